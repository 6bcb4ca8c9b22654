"""The model at full size, from its own config, built on PyTorch's `meta` device.

A `meta` build makes every module and parameter with its shape and no memory, so counting a
70B model costs a fraction of a second of Python, not 280 GB. From the build (`size_model`):
- parameters, each shared (tied) parameter counted once, and buffers;
- the bytes of weights and buffers at fp32, bf16, fp16 and fp8 (floating-point tensors at the
  dtype's width, other buffers at their own);
- for a model that generates, the KV cache per token from the layout its adapter gives: per
  attention layer `kv_heads x (key head dim + value head dim)` elements, layers with a sliding or
  chunked window apart (their cache stops growing at the window), layers without attention
  (Mamba, linear attention) none; the cross-attention cache of encoder-decoder models is not
  counted (it grows with the encoder's input, not the generated tokens);
- attention heads and KV heads (what tensor parallelism must divide);
- LoRA's trainable parameters at peft's default rank on the library's default target modules
  (peft's for a transformers model type; every Linear layer but the output head where it names
  none).
The heads, the KV cache's layers and the LoRA targets are what only the library knows: its
adapter says them (`Adapter.attention_layout`, `Adapter.lora_targets`).
What is built is the library adapter's `full_size_spec`: the class the tiny spec builds with
the model's own unshrunk config (transformers; sentence-transformers' backbone; diffusers'
denoiser, and the diffusers class a single file maps to). A library whose adapter gives none
(timm, open_clip, Chronos, pyannote, SpeechBrain, YOLO: they shrink inside their build or build
from other files) is `unsupported`.
The formula that turns these into memory and cores is `sizing.cores` (docs/sizing.md).

Guards, before anything is built: a config whose largest size-like integer is past
`MAX_FULL_DIMENSION` is `refused`; a build that registers more than `MAX_MODULES` modules is
stopped (a config claiming a million layers) and is an `error`. A build that raises (a missing
key, a class the library lacks) is an `error` with the exception as raised. Sizing never fails
the model's stages: it is a fact beside them.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, fields
from typing import Any

from ground.errors import safe_text
from ground.schema import SizingStatus
from model_configs.build import build_on_meta, largest_dimension
from model_configs.libraries import get_adapter
from model_configs.libraries.base import AttentionLayout, LoraTargets, NotSizable
from model_configs.spec import ResolvedConfig, TinySpec

# The largest integer a full-size config may hold where it may be a size: above Llama 4's
# 10,485,760-token context (max_position_embeddings), the largest size in the top 1,000.
MAX_FULL_DIMENSION = 1 << 24
# Modules a full-size build may register: DeepSeek-V3 (61 layers x 256 experts x 3 linears)
# registers about 50,000; a config past this claims sizes no model has.
MAX_MODULES = 500_000
LORA_RANK = 8  # peft's LoraConfig default `r`
DTYPE_WIDTHS: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
_CACHE_SIZE = 256  # sizings kept per process (a plan worker meets a config many times)
_CACHE: OrderedDict[tuple[Any, ...], ModelSize] = OrderedDict()


class TooManyModules(RuntimeError):
    """The full-size build registered more modules than `MAX_MODULES`."""


@dataclass(frozen=True)
class ModelSize:
    """What the full-size model holds (JSON-able: it travels in a plan record)."""

    status: str  # SizingStatus
    architecture: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    parameters: int | None = None  # tied once
    buffers: int | None = None  # elements
    float_elements: int | None = None  # parameters and floating-point buffers
    other_bytes: int | None = None  # buffers that are not floating point, at their own width
    kv_elements_per_token: int | None = None  # summed over attention layers without a window
    kv_window_elements_per_token: int | None = None  # over layers with a window
    sliding_window: int | None = None  # tokens a windowed layer keeps
    attention_heads: int | None = None
    kv_heads: int | None = None
    lora_parameters: int | None = None
    sizing_s: float | None = None  # the build's own time

    @property
    def ok(self) -> bool:
        return self.status == SizingStatus.OK.value

    def bytes_at(self, dtype: str) -> int | None:
        """Weights and buffers at `dtype` (fp32, bf16, fp16, fp8)."""
        if self.float_elements is None:
            return None
        return self.float_elements * DTYPE_WIDTHS[dtype] + (self.other_bytes or 0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSize:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def size_model(resolved: ResolvedConfig, spec: TinySpec) -> ModelSize:
    """The full-size model of `spec` (its class) from `resolved` (its own config); never
    raises for the model's problems (the status says). Built once per process per config."""
    key = (spec.library, spec.architecture, spec.generative, resolved.hash)
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    size = _size(resolved, spec)
    _CACHE[key] = size
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return size


def _size(resolved: ResolvedConfig, spec: TinySpec) -> ModelSize:
    try:
        full = get_adapter(spec.library).full_size_spec(resolved, spec)
    except NotSizable as exc:
        return ModelSize(SizingStatus.UNSUPPORTED.value, spec.architecture, error_message=str(exc))
    except Exception as exc:  # the config does not give a full-size spec
        return _failed(spec, exc)
    largest = largest_dimension(full.config)
    if largest is not None and largest[1] > MAX_FULL_DIMENSION:
        return ModelSize(
            SizingStatus.REFUSED.value,
            full.architecture,
            error_type="SizeGuard",
            error_message=f"{largest[0]}={largest[1]:,} is over {MAX_FULL_DIMENSION:,}: "
            "nothing was built",
        )
    start = time.perf_counter()
    try:
        model = _guarded_build(full)
        return _measure(model, full, time.perf_counter() - start)
    except Exception as exc:  # the model's own problem: the status says, the stages go on
        return _failed(full, exc)


def _failed(spec: TinySpec, exc: BaseException) -> ModelSize:
    from ground.errors import is_environment_error

    if is_environment_error(exc):
        raise exc  # the machine's (disk, memory), never the model's result
    return ModelSize(
        SizingStatus.ERROR.value,
        spec.architecture,
        error_type=type(exc).__name__,
        error_message=(safe_text(exc) or type(exc).__name__)[:2000],
    )


def _guarded_build(spec: TinySpec) -> Any:
    """The meta build, stopped once it has registered `MAX_MODULES` modules."""
    from torch.nn.modules.module import register_module_module_registration_hook

    count = 0

    def on_module(module: Any, name: str, submodule: Any) -> None:
        nonlocal count
        count += 1
        if count > MAX_MODULES:
            raise TooManyModules(f"the build registered more than {MAX_MODULES:,} modules")

    handle = register_module_module_registration_hook(on_module)
    try:
        return build_on_meta(spec)
    finally:
        handle.remove()


def _measure(model: Any, spec: TinySpec, seconds: float) -> ModelSize:
    parameters = sum(p.numel() for p in model.parameters())  # shared parameters once
    float_buffers = other_bytes = buffers = 0
    for b in model.buffers():
        buffers += b.numel()
        if b.is_floating_point():
            float_buffers += b.numel()
        else:
            other_bytes += b.numel() * b.element_size()
    adapter = get_adapter(spec.library)
    attention = adapter.attention_layout(model, kv_cache=spec.generative)
    kv = _kv_elements(attention)
    return ModelSize(
        SizingStatus.OK.value,
        spec.architecture,
        parameters=parameters,
        buffers=buffers,
        float_elements=parameters + float_buffers,
        other_bytes=other_bytes,
        kv_elements_per_token=kv[0] if kv else None,
        kv_window_elements_per_token=kv[1] if kv else None,
        sliding_window=kv[2] if kv else None,
        attention_heads=attention.heads,
        kv_heads=attention.kv_heads,
        lora_parameters=lora_parameters(model, adapter.lora_targets(model)),
        sizing_s=seconds,
    )


def _kv_elements(attention: AttentionLayout) -> tuple[int, int, int | None] | None:
    """(KV cache elements per token in layers without a window, in layers with one, the
    window): `kv_heads x (key head dim + value head dim)` per layer."""
    cache = attention.kv_cache
    if cache is None or not attention.kv_heads:
        return None
    per_layer = attention.kv_heads * (cache.key_dim + cache.value_dim)
    if not per_layer:
        return None
    return cache.full_layers * per_layer, cache.windowed_layers * per_layer, cache.window


def lora_parameters(model: Any, targets: LoraTargets, rank: int = LORA_RANK) -> int:
    """LoRA's trainable parameters: `rank x (in + out)` per targeted layer with a 2-D weight
    (the named targets, Linear or transformers' Conv1D; where none are named, every Linear
    layer), the excluded modules (the output head) left out."""
    import torch

    excluded = {id(m) for m in targets.excluded}
    total = 0
    for name, module in model.named_modules():
        if id(module) in excluded:
            continue
        weight = getattr(module, "weight", None)
        if targets.modules is None:
            if isinstance(module, torch.nn.Linear):
                total += rank * (module.in_features + module.out_features)
        elif (
            name.rsplit(".", 1)[-1] in targets.modules
            and isinstance(weight, torch.Tensor)
            and weight.dim() == 2
        ):
            total += rank * (weight.shape[0] + weight.shape[1])
    return total
