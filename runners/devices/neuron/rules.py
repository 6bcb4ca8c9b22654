"""TorchNeuron's per-call rules, as the snapshot's source states them (see the profile README).

Which inputs a conditional op declines (they run on the CPU and are fallbacks), which inputs
make it raise (a precondition), which attention path `scaled_dot_product_attention` takes, and
the dtype rules (float64 computed as float32, complex tensors unsupported). Every function here
reads tensor metadata only, so it works on fake tensors too; `values` reads a small tensor's
data where a rule needs it (the emulator passes a reader that does not count as a copy).

The environment variables are TorchNeuron's own, read at call time as it reads them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

ATTENTION_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})
GMM_ALIGN_ENV = "TORCH_NEURONX_ATEN_GMM_ALIGN"
SKIP_PRECONDITIONS_ENV = "TORCH_NEURONX_SKIP_OP_PRECONDITIONS"
MLIR_ATEN_OPS_ENV = "TORCH_NEURONX_MLIR_ATEN_OPS"
SDPA_OVERRIDEABLE = "aten::_scaled_dot_product_fused_attention_overrideable"

Values = Callable[[torch.Tensor], torch.Tensor]


def bind(op: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """An op call's arguments by schema name (defaults filled in)."""
    bound: dict[str, Any] = {}
    for i, arg in enumerate(op._schema.arguments):
        if not arg.kwarg_only and i < len(args):
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
        else:
            bound[arg.name] = None
    return bound


def tensors_in(x: Any) -> list[torch.Tensor]:
    """The tensors in `x` (a tensor, or nested lists / tuples)."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in tensors_in(v)]
    return []


def has_complex(args: tuple, kwargs: dict) -> bool:
    """Complex tensors are unsupported on Neuron: its native kernels decline them."""
    return any(t.is_complex() for t in tensors_in(list(args) + list(kwargs.values())))


# ---------------------------------------------------------------------------------------------
# Attention


def sdpa_uses_overrideable(query: Any, key: Any, value: Any) -> bool:
    """csrc/aten/SdpBackendSelection.cpp: `overrideable` when the query is on the device and
    q, k and v are all 4-D; the math decomposition otherwise."""
    tensors = (query, key, value)
    return (
        all(isinstance(t, torch.Tensor) for t in tensors)
        and query.device.type != "cpu"
        and all(t.dim() == 4 for t in tensors)
    )


def _attention_declines(q: Any, k: Any, v: Any) -> str | None:
    """The common checks of the snapshot's attention implementations."""
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        return "query, key and value must be tensors"
    if not (q.dtype == k.dtype == v.dtype and q.dtype in ATTENTION_DTYPES):
        return f"query/key/value dtypes {q.dtype}/{k.dtype}/{v.dtype} (needs one of fp32/fp16/bf16)"
    if not (q.dim() == k.dim() == v.dim() == 4):
        return "query, key and value must be 4-D"
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        return "batch sizes differ"
    if k.shape[2] != v.shape[2] or k.shape[1] != v.shape[1]:
        return "key and value differ in length or heads"
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        return "query heads are not a multiple of key/value heads"
    return None


def _sdpa_forward(a: dict[str, Any], values: Values | None) -> str | None:
    if a.get("return_debug_mask"):
        return "a debug attention mask was asked for"
    return _attention_declines(a["query"], a["key"], a["value"])


def _sdpa_backward(a: dict[str, Any], values: Values | None) -> str | None:
    return _attention_declines(a["query"], a["key"], a["value"])


def _multi_head_attention(a: dict[str, Any], values: Values | None) -> str | None:
    if a.get("mask") is not None:
        return "an arbitrary attention mask is not supported"
    if a.get("need_weights"):
        return "returning attention weights is not supported"
    return None


# ---------------------------------------------------------------------------------------------
# Grouped matmul, gather / scatter_add, fused AdamW


def _grouped_mm(a: dict[str, Any], values: Values | None) -> str | None:
    left, right = a["self"], a["mat2"]
    if (left.dim(), right.dim()) not in ((2, 2), (2, 3)):
        return f"{left.dim()}-D x {right.dim()}-D (native for 2-D x 2-D and 2-D x 3-D only)"
    if a["offs"] is None:  # only reached with the preconditions skipped
        return "no offs (its NKI kernels take per-group offsets)"
    return None


def skip_preconditions() -> bool:
    return os.environ.get(SKIP_PRECONDITIONS_ENV, "0") == "1"


def grouped_mm_precondition(a: dict[str, Any], values: Values | None) -> None:
    """python_ops/grouped_mm.py `validate_offs`, which both native implementations' `can_handle`
    call: raises as TorchNeuron does (ValueError; TypeError without offsets, from comparing
    None), unless TORCH_NEURONX_SKIP_OP_PRECONDITIONS=1. `offs` are the per-expert routing
    offsets (cumulative tokens per expert), `t` the routed rows."""
    if skip_preconditions() or values is None:
        return
    left, right, offs = a["self"], a["mat2"], a["offs"]
    if (left.dim(), right.dim()) not in ((2, 2), (2, 3)):
        return
    if right.dim() == 2:
        rows, align = left.shape[1], 128
    else:
        rows, align = left.shape[0], int(os.environ.get(GMM_ALIGN_ENV, "128"))
    hint = f" (TorchNeuron's _grouped_mm precondition; {SKIP_PRECONDITIONS_ENV}=1 skips it)"
    if rows % align:
        raise ValueError(
            f"t must be divisible by {align}, got {rows} (the rows routed to the experts)" + hint
        )
    if offs is None:
        raise TypeError(
            "_grouped_mm without offs: TorchNeuron's validate_offs compares the per-expert "
            "routing offsets, and None has none" + hint
        )
    offsets = values(offs)
    if bool((offsets < 0).any()) or bool((offsets > rows).any()):
        raise ValueError(f"offs must be between 0 and {rows}" + hint)
    if bool((offsets % align != 0).any()):
        raise ValueError(
            f"offs must be divisible by {align}: the per-expert routing offsets "
            f"{offsets.tolist()[:8]} (cumulative tokens per expert) are not" + hint
        )
    if offsets.numel() > 1 and bool((offsets[1:] < offsets[:-1]).any()):
        raise ValueError("offs must be sorted" + hint)


def _mlir_gated_gather(a: dict[str, Any], values: Values | None) -> str | None:
    if os.environ.get(MLIR_ATEN_OPS_ENV, "1") == "1":
        return None
    source = a.get("self")
    index = a.get("index")
    if (
        isinstance(source, torch.Tensor)
        and isinstance(index, torch.Tensor)
        and source.dim() == 2
        and a.get("dim") == 0
        and source.dtype in ATTENTION_DTYPES
        and not a.get("sparse_grad")
        and index.dim() == 2
        and index.stride(1) == 0
    ):
        return None
    return f"{MLIR_ATEN_OPS_ENV}=0 and not the NKI kernel's layout"


def _mlir_only(a: dict[str, Any], values: Values | None) -> str | None:
    if os.environ.get(MLIR_ATEN_OPS_ENV, "1") == "1":
        return None
    return f"{MLIR_ATEN_OPS_ENV}=0 (the MLIR kernel is the only one)"


def _fused_adamw(a: dict[str, Any], values: Values | None) -> str | None:
    if a.get("grad_scale") is not None or a.get("found_inf") is not None:
        return "grad_scale / found_inf are not supported"
    return None


Rule = Callable[[dict[str, Any], "Values | None"], "str | None"]

DECLINES: dict[str, Rule] = {
    SDPA_OVERRIDEABLE: _sdpa_forward,
    f"{SDPA_OVERRIDEABLE}_backward": _sdpa_backward,
    "aten::_native_multi_head_attention": _multi_head_attention,
    "aten::_native_multi_head_attention.out": _multi_head_attention,
    "aten::_grouped_mm": _grouped_mm,
    "aten::gather": _mlir_gated_gather,
    "aten::scatter_add": _mlir_gated_gather,
    "aten::scatter_add_": _mlir_gated_gather,
    "aten::gather.out": _mlir_only,
    "aten::scatter_add.out": _mlir_only,
    "aten::_fused_adamw_": _fused_adamw,
    "aten::_fused_adamw_.tensor_lr": _fused_adamw,
}
PRECONDITIONS: dict[str, Callable[[dict[str, Any], Values | None], None]] = {
    "aten::_grouped_mm": grouped_mm_precondition,
}


def decline_reason(
    name: str, op: Any, args: tuple, kwargs: dict, *, values: Values | None = None
) -> str | None:
    """Why a native kernel declines this call (it then runs on the CPU), or None. Raises
    where TorchNeuron raises (a precondition)."""
    precondition = PRECONDITIONS.get(name)
    rule = DECLINES.get(name)
    if precondition is None and rule is None:
        return None
    bound = bind(op, args, kwargs)
    if precondition is not None:
        precondition(bound, values)
    return rule(bound, values) if rule is not None else None


# ---------------------------------------------------------------------------------------------
# Host arguments (python_ops/base.py `OperationImplementation.can_handle`)


def host_argument(args: tuple, kwargs: dict, device_type: str) -> str | None:
    """TorchNeuron's default `can_handle` message for the first non-0-dim tensor argument
    (or list element, or keyword) not on the device, else None. 0-dim host tensors are
    scalars and allowed."""

    def off(t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.dim() != 0 and t.device.type != device_type

    for i, arg in enumerate(args):
        if off(arg):
            return f"Non-scalar tensor arg{i} is on {arg.device.type} device, expected neuron"
        if isinstance(arg, (list, tuple)):
            for j, value in enumerate(arg):
                if off(value):
                    return (
                        f"Non-scalar tensor arg{i}[{j}] is on {value.device.type} device, "
                        "expected neuron"
                    )
    for key, value in kwargs.items():
        if off(value):
            return (
                f"Non-scalar tensor kwarg '{key}' is on {value.device.type} device, expected neuron"
            )
    return None


# ---------------------------------------------------------------------------------------------
# Compile: where TorchNeuron's compile path raises (neuron_dynamo_backend/decompositions.py;
# every raise site is listed in compile-raises.txt, the ones below are those a valid PyTorch
# program reaches: the others repeat PyTorch's own argument checks or sit on unreachable paths)


def _meta(node: Any) -> Any:
    return getattr(node, "meta", {}).get("val") if node is not None else None


def _index_put_raises(node: Any) -> str | None:
    """`index_put_decomposition` (lines 1044-1170): a boolean index goes through `torch.where`
    when one mask covers leading dims with a one-element value (or a 1-D mask pairs with an
    integer index, one-element value); any other boolean index raises."""
    args = list(node.args) + [None] * 4
    source, indices, value = _meta(args[0]), args[1] or [], _meta(args[2])
    accumulate = bool(args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False))
    metas = [_meta(i) if i is not None else None for i in indices]
    bools = [m for m in metas if isinstance(m, torch.Tensor) and m.dtype == torch.bool]
    if not bools:
        return None
    one_value = isinstance(value, torch.Tensor) and value.numel() == 1
    if one_value and not accumulate and len(bools) == 1 and isinstance(source, torch.Tensor):
        mask, dims, ok = bools[0], 0, True
        for m in metas:
            if m is None:
                dims += 1
            elif m is mask:
                ok = ok and tuple(mask.shape) == tuple(source.shape[dims : dims + mask.dim()])
                dims += mask.dim()
            else:
                ok = False
        if ok:
            return None
    if one_value:
        has_mask = any(m.dim() == 1 for m in bools)
        has_int = any(
            isinstance(m, torch.Tensor) and m.dtype in (torch.int32, torch.int64) for m in metas
        )
        if has_mask and has_int:
            return None
    return "Boolean index_put is not supported in torch.compile on Neuron (decompositions.py:1168)"


def _grouped_mm_raises(node: Any) -> str | None:
    """`grouped_mm_decomposition` (lines 1475-1497, line 1490) indexes `offs[:, None]` for 2-D x 3-D: no
    offsets is a TypeError there."""
    args = list(node.args) + [None] * 3
    left, right = _meta(args[0]), _meta(args[1])
    offs = args[2] if len(node.args) > 2 else node.kwargs.get("offs")
    if (
        isinstance(left, torch.Tensor)
        and isinstance(right, torch.Tensor)
        and (left.dim(), right.dim()) == (2, 3)
        and offs is None
    ):
        return "_grouped_mm without offs: its decomposition indexes offs (decompositions.py:1490)"
    return None


COMPILE_RAISES: dict[str, Callable[[Any], str | None]] = {
    "aten::index_put": _index_put_raises,
    "aten::_grouped_mm": _grouped_mm_raises,
}


def compile_raise_reason(op: str, node: Any) -> str | None:
    """Why TorchNeuron's compile path raises on this graph node, or None."""
    rule = COMPILE_RAISES.get(op)
    return rule(node) if rule is not None and node is not None else None
