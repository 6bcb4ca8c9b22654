"""Tiny quantized checkpoints, loaded through transformers' own quantizer.

For a method with a path here (`model_configs.quantization`), the tiny model is built at full
precision from its seed, written as a checkpoint in the method's own format and loaded back
with `from_pretrained`, so the load and the ops after it are those of the real checkpoint on a
machine without CUDA:

- `fp8` (fine-grained FP8): every Linear transformers would convert (and every expert) as
  `float8_e4m3fn` blocks with their `weight_scale_inv`; transformers dequantizes them at load;
- `mxfp4`: the experts as packed FP4 e2m1 blocks of 32 with E8M0 scales (`*_blocks`,
  `*_scales`); transformers dequantizes them at load;
- `compressed-tensors`: compressed-tensors' own compressor, with weight scales from the
  weights (min / max, as its `minmax` observer); the weights stay compressed until the first
  forward, on the device.

`fit` makes the shrunk `quantization_config` consistent with the tiny widths (block and group
sizes that divide them). `to_dtype` casts a loaded model to the run's dtype without touching
its quantized storage (float8, packed integers).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from ground.errors import ShrinkError
from model_configs.quantization import Method, from_config, quantization_block
from model_configs.spec import TinySpec

FP8_MAX = 448.0  # largest float8_e4m3fn
MX_BLOCK = 32  # elements per MXFP4 scale (the OCP MX format)
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # e2m1 magnitudes, codes 0-7 (+8: sign)


def method_of_spec(spec: TinySpec) -> Method | None:
    """The runnable method a shrunk transformers config carries, or None."""
    if spec.library != "transformers":
        return None
    method = from_config(spec.config)
    return method if method is not None and method.runs else None


def plain(spec: TinySpec) -> TinySpec:
    """The same tiny model without its quantization block (what is built before quantizing)."""
    config = {k: v for k, v in spec.config.items() if k not in ("quantization_config",)}
    return replace(spec, config=config)


# ---- shrink: a quantization_config that fits the tiny widths ----------------------------------


def fit(spec: TinySpec) -> TinySpec:
    """Block and group sizes of the spec's quantization block that divide the tiny model's
    quantized widths (the largest power of two up to the original); changes recorded."""
    method = method_of_spec(spec)
    if method is None:
        return spec
    block = quantization_block(spec.config)
    assert block is not None
    new = json.loads(json.dumps(block))
    changes: dict[str, list[Any]] = {}
    model = _on_meta(plain(spec))
    if method.name == "fp8":
        sizes = new.get("weight_block_size")
        if isinstance(sizes, list) and len(sizes) == 2:
            dims = _fp8_dims(model, new)
            fitted = [_fitting_power(int(s), dims) for s in sizes]
            if fitted != sizes:
                changes["quantization_config.weight_block_size"] = [sizes, fitted]
                new["weight_block_size"] = fitted
    elif method.name == "mxfp4":
        widths = _expert_widths(model)
        odd = sorted({w for w in widths if w % MX_BLOCK})
        if odd:
            raise ShrinkError(
                f"MXFP4 packs the experts in blocks of {MX_BLOCK}; the tiny experts have widths "
                f"{odd} that it does not divide"
            )
    elif method.name == "compressed-tensors":
        in_dims = [m.in_features for m in _linears(model)]
        for group_name, group in (new.get("config_groups") or {}).items():
            for side in ("weights", "input_activations"):
                args = group.get(side) if isinstance(group, dict) else None
                if not isinstance(args, dict):
                    continue
                size = args.get("group_size")
                if isinstance(size, int) and size > 0:
                    fitted_size = _fitting_power(size, in_dims)
                    if fitted_size != size:
                        key = f"quantization_config.config_groups.{group_name}.{side}.group_size"
                        changes[key] = [size, fitted_size]
                        args["group_size"] = fitted_size
                structure = args.get("block_structure")
                if isinstance(structure, list) and len(structure) == 2:
                    dims = [d for m in _linears(model) for d in (m.in_features, m.out_features)]
                    fitted_blocks = [_fitting_power(int(s), dims) for s in structure]
                    if fitted_blocks != structure:
                        key = (
                            f"quantization_config.config_groups.{group_name}.{side}.block_structure"
                        )
                        changes[key] = [structure, fitted_blocks]
                        args["block_structure"] = fitted_blocks
    if not changes:
        return spec
    return replace(
        spec,
        config={**spec.config, "quantization_config": new},
        changes={**spec.changes, **changes},
    )


def _fitting_power(size: int, dims: list[int]) -> int:
    """The largest power of two, at most `size`, that divides every width in `dims`."""
    g = 0
    for d in dims:
        g = math.gcd(g, int(d))
    best = 1
    while best * 2 <= size and g % (best * 2) == 0:
        best *= 2
    return best


def _on_meta(spec: TinySpec) -> Any:
    import torch

    from model_configs.libraries.transformers import build

    with torch.device("meta"):
        return build.build_model(spec)


def _linears(model: Any) -> list[Any]:
    import torch

    return [m for m in model.modules() if type(m) is torch.nn.Linear]


def _fp8_targets(model: Any, block: dict[str, Any]) -> tuple[set[str], set[str]]:
    """Module names transformers' FP8 quantizer converts: plain Linear layers, and experts
    (`replace_with_fp8_linear`), less its modules_to_not_convert (`get_keys_to_not_convert`)."""
    import torch
    from transformers.quantizers.base import get_keys_to_not_convert
    from transformers.quantizers.quantizers_utils import should_convert_module

    skip = list(get_keys_to_not_convert(model)) + list(block.get("modules_to_not_convert") or [])
    linear, experts = set(), set()
    for name, module in model.named_modules():
        if not name or not should_convert_module(name, skip):
            continue
        if name.endswith(".experts"):
            experts.add(name)
        elif type(module) is torch.nn.Linear:
            linear.add(name)
    return linear, experts


def _fp8_dims(model: Any, block: dict[str, Any]) -> list[int]:
    linear, experts = _fp8_targets(model, block)
    modules = dict(model.named_modules())
    dims: list[int] = []
    for name in linear:
        dims += [modules[name].in_features, modules[name].out_features]
    for name in experts:
        for pname, p in modules[name].named_parameters(recurse=False):
            if p.dim() == 3:
                dims += list(p.shape[-2:])
                if "gate_up" in pname:  # stored per expert as gate and up halves
                    dims += [d // 2 for d in p.shape[-2:]]
    return dims


def _expert_widths(model: Any) -> list[int]:
    widths: list[int] = []
    for name, module in model.named_modules():
        if name.endswith(".experts"):
            for pname, p in module.named_parameters(recurse=False):
                if p.dim() == 3 and pname in ("gate_up_proj", "down_proj"):
                    widths.append(int(p.shape[1]))  # gpt-oss layout: (experts, in, out)
    return widths


# ---- build: write the checkpoint, load it through transformers' quantizer ---------------------


def save_and_load(spec: TinySpec, model: Any, folder: Path) -> Any:
    """Write `model` (the full-precision tiny model) as a checkpoint of the spec's method and
    load it with `from_pretrained`; returns the loaded model in eval mode."""
    import tempfile

    method = method_of_spec(spec)
    assert method is not None
    block = quantization_block(spec.config)
    assert block is not None
    cls = type(model)
    with tempfile.TemporaryDirectory(prefix="hfsweep-quantized-", dir=folder) as tmp:
        out = Path(tmp)
        if method.name == "compressed-tensors":
            _write_compressed_tensors(model, block, out)
        else:
            model.save_pretrained(out)
            writer = _write_fp8 if method.name == "fp8" else _write_mxfp4
            writer(model, block, out)
            config = json.loads((out / "config.json").read_text())
            config["quantization_config"] = block
            (out / "config.json").write_text(json.dumps(config, indent=2))
        del model
        return cls.from_pretrained(out).eval()


def _state_files(folder: Path) -> list[Path]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise RuntimeError("save_pretrained wrote no safetensors file")
    return files


def _rewrite(folder: Path, convert: Any) -> None:
    """Rewrite each safetensors file of a checkpoint through `convert(state) -> state`."""
    from safetensors.torch import load_file, save_file

    for path in _state_files(folder):
        state = convert(load_file(str(path)))
        save_file(state, str(path), metadata={"format": "pt"})
    index = folder / "model.safetensors.index.json"
    if index.is_file():  # sharded: the new tensor names must be in the index
        from safetensors import safe_open

        weight_map = {}
        for path in _state_files(folder):
            with safe_open(str(path), "pt") as f:
                weight_map.update(dict.fromkeys(f.keys(), path.name))
        data = json.loads(index.read_text())
        data["weight_map"] = weight_map
        index.write_text(json.dumps(data, indent=2))


def _write_fp8(model: Any, block: dict[str, Any], folder: Path) -> None:
    linear, experts = _fp8_targets(model, block)
    sizes = block.get("weight_block_size")

    def targeted(key: str) -> bool:
        base = key.removesuffix(".weight")
        return base in linear or any(base.startswith(e + ".") for e in experts)

    def convert(state: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, value in state.items():
            if key.endswith(".weight") and value.dim() == 2 and targeted(key):
                q, scale = fp8_quantize(value.float(), sizes)
                out[key] = q
                out[key.removesuffix("weight") + "weight_scale_inv"] = scale
            else:
                out[key] = value
        return out

    _rewrite(folder, convert)


def fp8_quantize(weight: Any, block_size: list[int] | None) -> tuple[Any, Any]:
    """`weight` (rows, cols) as float8_e4m3fn and its per-block dequantization scales
    (`weight_scale_inv`: the FP8 values times it give the weight), as DeepSeek-V3-style
    checkpoints store them; one scale for the tensor when `block_size` is None."""
    import torch

    if not block_size:
        scale = weight.abs().amax().clamp(min=1e-12) / FP8_MAX
        return (weight / scale).to(torch.float8_e4m3fn), scale.float()
    bm, bn = int(block_size[0]), int(block_size[1])
    rows, cols = weight.shape
    if rows % bm or cols % bn:
        raise ShrinkError(f"FP8 blocks {bm}x{bn} do not divide a {rows}x{cols} weight")
    blocks = weight.reshape(rows // bm, bm, cols // bn, bn)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / FP8_MAX
    q = (blocks / scale[:, None, :, None]).to(torch.float8_e4m3fn).reshape(rows, cols)
    return q, scale.float()


def _write_mxfp4(model: Any, block: dict[str, Any], folder: Path) -> None:
    experts = {n for n, _ in model.named_modules() if n.endswith(".experts")}

    def convert(state: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, value in state.items():
            base, _, proj = key.rpartition(".")
            if base in experts and proj in ("gate_up_proj", "down_proj") and value.dim() == 3:
                blocks, scales = mxfp4_quantize(value.float().transpose(1, 2))
                out[f"{key}_blocks"] = blocks
                out[f"{key}_scales"] = scales
            else:
                out[key] = value
        return out

    _rewrite(folder, convert)


def mxfp4_quantize(weight: Any) -> tuple[Any, Any]:
    """`weight` (..., rows, cols) as MXFP4, the layout gpt-oss checkpoints store: blocks
    (..., rows, cols/32, 16) of uint8, two e2m1 codes a byte (low nibble first), and scales
    (..., rows, cols/32) of uint8 E8M0 exponents (biased by 127)."""
    import torch

    *lead, rows, cols = weight.shape
    if cols % MX_BLOCK:
        raise ShrinkError(f"MXFP4 blocks of {MX_BLOCK} do not divide a width of {cols}")
    groups = weight.reshape(*lead, rows, cols // MX_BLOCK, MX_BLOCK)
    amax = groups.abs().amax(dim=-1, keepdim=True)
    exponent = torch.where(
        amax > 0, torch.ceil(torch.log2(amax.clamp(min=1e-30) / FP4_VALUES[-1])), 0.0
    ).clamp(-127, 127)
    scaled = groups / torch.exp2(exponent)
    magnitudes = torch.tensor(FP4_VALUES)
    codes = (scaled.abs().unsqueeze(-1) - magnitudes).abs().argmin(dim=-1)
    codes = codes + 8 * (scaled < 0).long() * (codes > 0).long()
    codes = codes.to(torch.uint8)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    scales = (exponent.squeeze(-1) + 127).to(torch.uint8)
    return packed.contiguous(), scales.contiguous()


def _write_compressed_tensors(model: Any, block: dict[str, Any], folder: Path) -> None:
    """compressed-tensors' own compression of the tiny model (its schemes applied, weight
    scales from each weight's min / max), saved with the config block its compressor writes."""
    import torch
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationConfig,
        QuantizationStrategy,
        apply_quantization_config,
    )
    from compressed_tensors.quantization.utils import calculate_qparams

    config = QuantizationConfig.model_validate(
        {k: v for k, v in block.items() if k not in ("quant_method", "sparsity_config")}
    )
    apply_quantization_config(model, config)
    with torch.no_grad():
        for module in model.modules():
            scheme = getattr(module, "quantization_scheme", None)
            args = getattr(scheme, "weights", None)
            if args is None or not hasattr(module, "weight_scale"):
                continue
            w = module.weight.detach().float()
            if args.strategy == QuantizationStrategy.CHANNEL:
                low, high = w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
            elif args.strategy in (QuantizationStrategy.GROUP, QuantizationStrategy.TENSOR_GROUP):
                grouped = w.reshape(w.shape[0], -1, args.group_size)
                low, high = grouped.amin(-1), grouped.amax(-1)
            elif args.strategy == QuantizationStrategy.BLOCK:
                bm, bn = args.block_structure
                blocks = w.reshape(w.shape[0] // bm, bm, w.shape[1] // bn, bn)
                low, high = blocks.amin(dim=(1, 3)), blocks.amax(dim=(1, 3))
            else:  # tensor
                low, high = w.amin().reshape(1), w.amax().reshape(1)
            zero = torch.zeros_like(low)
            scale, zero_point = calculate_qparams(
                torch.minimum(low, zero), torch.maximum(high, zero), args
            )
            module.weight_scale.data = scale.reshape(module.weight_scale.shape).to(
                module.weight_scale.dtype
            )
            if hasattr(module, "weight_zero_point"):
                module.weight_zero_point.data = zero_point.reshape(
                    module.weight_zero_point.shape
                ).to(module.weight_zero_point.dtype)
    compressor = ModelCompressor.from_pretrained_model(model)
    if compressor is None:
        raise RuntimeError("compressed-tensors found no quantized module to compress")
    compressor.compress_model(model)
    model.save_pretrained(folder)
    compressor.update_config(str(folder))


# ---- the run's dtype ------------------------------------------------------------------------


def to_dtype(model: Any, dtype: Any) -> Any:
    """Cast the model's floating-point parameters and buffers to `dtype`, leaving quantized
    storage (float8, packed integers, E8M0 bytes) as loaded."""
    import torch

    compute = {torch.float32, torch.float16, torch.bfloat16, torch.float64}
    return model._apply(lambda t: t.to(dtype) if t.dtype in compute else t)
