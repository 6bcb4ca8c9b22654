"""Native dtype rules: what TorchNeuron's kernels do with dtypes, over the borrowed CPU kernel.

- float64 inputs (non-0-dim) are computed as float32 (python_ops/base.py); a float64 `out=`
  with no float64 input is a TypeError;
- a native op whose borrowed CPU kernel lacks a dtype the device computes runs in a wider dtype
  (integer `histc`) and is cast back.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from runners.devices.neuron import rules
from runners.devices.neuron.schemas import OpSchema

_DTYPE_NAMES = {
    "Bool": torch.bool,
    "Byte": torch.uint8,
    "Char": torch.int8,
    "Short": torch.int16,
    "Int": torch.int32,
    "Long": torch.int64,
    "Half": torch.float16,
    "BFloat16": torch.bfloat16,
}
_MISSING_DTYPE = re.compile(r"not implemented for '(\w+)'")


class _Widened:
    """Ops a native kernel ran through a wider dtype because the CPU kernel lacked one."""

    calls: dict[tuple[str, str], int] = {}


def widened_calls() -> dict[tuple[str, str], int]:
    """(op, dtype) -> calls the emulator computed in a wider dtype (the CPU kernel lacks it)."""
    return dict(_Widened.calls)


def float64_as_float32(
    info: OpSchema, args: list, kwargs: dict, *, float64_out: bool = False
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """python_ops/base.py: non-0-dim float64 inputs are computed as float32 (no float64 on the
    hardware); a float64 `out` needs a float64 input (a Torch-MLIR kernel takes one anyway,
    `float64_out`: dtype_autocast.py `validate_output_dtypes`). Returns (original, float32 copy) pairs of
    the arguments written in place, to copy back after the op."""
    written: list[tuple[torch.Tensor, torch.Tensor]] = []
    mutated = set(info.mutated)

    def cast(x: Any, key: int | str) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype == torch.float64 and x.dim() > 0:
            copy = x.to(torch.float32)
            if key in mutated:
                written.append((x, copy))
            return copy
        if isinstance(x, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in x):
            return type(x)(cast(v, -1) for v in x)
        return x

    inputs = rules.tensors_in(list(args) + [v for k, v in kwargs.items() if k != "out"])
    float64_in = any(t.dtype == torch.float64 for t in inputs)
    out = kwargs.get("out")
    if (
        isinstance(out, torch.Tensor)
        and out.dtype == torch.float64
        and not float64_in
        and not float64_out
    ):
        raise TypeError(
            "Output tensor has dtype float64 which is not supported on Neuron. "
            "Please use float32 for the output tensor."
        )
    if not float64_in:
        return written
    for i, value in enumerate(args):
        args[i] = cast(value, i)
    for key, value in kwargs.items():
        kwargs[key] = cast(value, key)
    return written


# python_ops/dtype_autocast.py: what the Torch-MLIR kernels compute an unsupported dtype in.
_MLIR_COMPUTES_IN = {torch.float64: torch.float32, torch.int64: torch.int32}


def _mlir_cast(x: Any, *, in_list: bool = False) -> Any:
    """`DtypeAutocastContext._process_value`: non-0-dim float64 / int64 tensors (any tensor in a
    list), and dtype arguments, in their 32-bit dtype."""
    if isinstance(x, torch.Tensor):
        target = _MLIR_COMPUTES_IN.get(x.dtype)
        return x.to(target) if target is not None and (in_list or x.dim() > 0) else x
    if isinstance(x, torch.dtype):
        return _MLIR_COMPUTES_IN.get(x, x)
    if isinstance(x, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in x):
        return type(x)(_mlir_cast(v, in_list=True) for v in x)
    return x


def _contiguous(result: Any) -> Any:
    if isinstance(result, torch.Tensor):
        return result if result.is_contiguous() else result.contiguous()
    if isinstance(result, (list, tuple)):
        return type(result)(_contiguous(r) for r in result)
    return result


def _run_mlir(run: Any, info: OpSchema, args: list, kwargs: dict) -> Any:
    """A functional op served by an eager Torch-MLIR kernel (python_ops/torch_mlir/op_impl.py,
    kernel.py): its inputs computed in 32 bits (dtype autocast: float64 as float32, int64 as
    int32), its outputs fresh contiguous tensors (`io_tensor.empty`) of the dtypes the op gives
    for the original inputs (`infer_outputs_from_meta` on them, then `_upcast_execution_results`,
    kernel.py lines 479-509)."""
    cast_args = [_mlir_cast(a) for a in args]
    cast_kwargs = {k: _mlir_cast(v) for k, v in kwargs.items()}
    changed = any(c is not a for c, a in zip(cast_args, args, strict=True)) or any(
        cast_kwargs[k] is not v for k, v in kwargs.items()
    )
    if not changed:
        return _run_or_widen(run, info, args, kwargs)
    expected = _expected_dtypes(run, args, kwargs, None)
    try:
        result = _run_or_widen(run, info, cast_args, cast_kwargs)
    except Exception:
        # the borrowed CPU kernel refuses a 32-bit input TorchNeuron's traced body computes
        # (an index it wants as int64): a native op never fails for the borrowed kernel's
        # dtype limits; it computes in the original dtypes (an error there is the op's own)
        result = _run_or_widen(run, info, args, kwargs)
    if expected is not None:
        result = _cast_like(result, expected)
    return result


def _run_or_widen(run: Any, info: OpSchema, args: list, kwargs: dict) -> Any:
    try:
        return run(*args, **kwargs)
    except (RuntimeError, NotImplementedError) as exc:
        return _run_widened(run, info, args, kwargs, exc)


def run_native(
    run: Any, info: OpSchema, args: list, kwargs: dict, *, mlir: bool = False, fresh: bool = False
) -> Any:
    """Run a native op on the host with the device's dtype and layout rules: a Torch-MLIR
    kernel's for a functional op it serves, else python_ops/base.py's (float64 computed as
    float32); a functional op a Python implementation serves returns fresh contiguous outputs
    (its kernel writes `io_tensor.empty` / `torch.empty` of its output spec), where the
    borrowed CPU kernel would keep an input's layout (a permuted input stays permuted)."""
    functional = not info.mutated and "out" not in kwargs
    if mlir and functional:
        result = _run_mlir(run, info, args, kwargs)
        return _contiguous(result) if fresh else result
    written = float64_as_float32(info, args, kwargs, float64_out=mlir)
    result = _run_or_widen(run, info, args, kwargs)
    for original, copy in written:
        if original.shape != copy.shape:  # an out= the op resized
            original.resize_(copy.shape)
        original.copy_(copy)
        for i, value in enumerate(args):
            if value is copy:
                args[i] = original
        for key, value in kwargs.items():
            if value is copy:
                kwargs[key] = original
        if result is copy:
            result = original
    return _contiguous(result) if fresh and functional else result


def _run_widened(run: Any, info: OpSchema, args: list, kwargs: dict, exc: Exception) -> Any:
    """The CPU kernel lacks a dtype the device computes (`"histogram_cpu" not implemented for
    'Int'`): compute in a wider dtype (integers in float64, halves in float32) and cast the
    results back to the dtypes the op gives. Functional ops only; anything else re-raises."""
    match = _MISSING_DTYPE.search(str(exc))
    dtype = _DTYPE_NAMES.get(match.group(1)) if match else None
    if dtype is None or info.mutated:
        raise exc
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else torch.float64

    def widen(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype == dtype:
            return x.to(wide)
        if isinstance(x, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in x):
            return type(x)(widen(v) for v in x)
        return x

    try:
        result = run(*[widen(a) for a in args], **{k: widen(v) for k, v in kwargs.items()})
    except Exception:
        raise exc from None
    key = (info.name, str(dtype).removeprefix("torch."))
    _Widened.calls[key] = _Widened.calls.get(key, 0) + 1
    return _cast_like(result, _expected_dtypes(run, args, kwargs, dtype))


def _expected_dtypes(run: Any, args: list, kwargs: dict, dtype: torch.dtype | None) -> Any:
    """The output dtypes the op gives for these inputs (from its meta kernel), else `dtype`."""

    def meta(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="meta")
        if isinstance(x, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in x):
            return type(x)(meta(v) for v in x)
        return x

    try:
        out = run(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})
    except Exception:
        return dtype

    def dtypes(y: Any) -> Any:
        if isinstance(y, torch.Tensor):
            return y.dtype
        if isinstance(y, (list, tuple)):
            return type(y)(dtypes(v) for v in y)
        return None

    return dtypes(out)


def _cast_like(result: Any, dtypes: Any) -> Any:
    if isinstance(result, torch.Tensor):
        target = dtypes if isinstance(dtypes, torch.dtype) else None
        return result.to(target) if target is not None and result.dtype != target else result
    if isinstance(result, (list, tuple)):
        per = dtypes if isinstance(dtypes, (list, tuple)) else [dtypes] * len(result)
        return type(result)(_cast_like(r, d) for r, d in zip(result, per, strict=False))
    return result
