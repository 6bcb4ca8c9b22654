"""PyTorch's OpInfo database as the op sweep sees it: names, applicability, tolerances.

`torch.testing._internal.common_methods_invocations.op_db` is PyTorch's own list of operators
with sample inputs, supported dtypes and known skips (it needs the `expecttest` package). An
OpInfo is named `name` or `name.variant` (`nn.functional.layer_norm`, `normal.number_mean`).

What decides, before anything runs, whether a sample is compared at all is PyTorch's own
applicability: the dtypes the OpInfo supports on CPU, whether it has a gradient for that dtype,
and the skips it declares for comparing a device with the CPU (`TestCommon.test_compare_cpu`,
e.g. "output is non-deterministic"). Tolerances are the OpInfo's own `toleranceOverride`s for
the dtype where it declares any, else `torch.testing.assert_close`'s defaults for the dtype.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass
from typing import Any

import torch

from ground.errors import SweepError, UnknownNameError
from ground.schema import OpSkipReason

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
INPUTS = ("sample", "reference")  # OpInfo.sample_inputs, or reference_inputs (more, larger)

# The PyTorch test whose declared skips and tolerances describe "the same op on another device
# against the CPU", which is what the op sweep does.
COMPARE_TEST = ("TestCommon", "test_compare_cpu")

# torch.testing.assert_close's defaults (rtol, atol) for the dtypes swept.
_DEFAULT_TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


class OpDbUnavailable(SweepError):
    """PyTorch's OpInfo database cannot be imported (usually: `expecttest` is missing)."""


@functools.cache
def op_db() -> tuple[Any, ...]:
    """Every OpInfo of the installed torch (imported once per process; about 4 s)."""
    try:
        from torch.testing._internal.common_methods_invocations import op_db as db
    except ImportError as exc:
        raise OpDbUnavailable(
            f"PyTorch's OpInfo database cannot be imported: {exc}",
            hint="install the test helpers it needs: pip install expecttest",
        ) from exc
    return tuple(db)


def opinfo_key(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


@functools.cache
def _by_key() -> dict[str, Any]:
    return {opinfo_key(op): op for op in op_db()}


def get_opinfo(key: str) -> Any:
    return _by_key()[key]


def select_opinfos(names: list[str] | None = None) -> list[str]:
    """OpInfo keys for `names` (all of op_db when None). A plain name takes every variant
    (`normal` -> `normal`, `normal.in_place`, `normal.number_mean`); unknown names raise with
    the closest known ones."""
    keys = list(_by_key())
    if not names:
        return keys
    chosen: list[str] = []
    unknown: list[str] = []
    for name in names:
        matched = [k for k in keys if k == name or _by_key()[k].name == name]
        if not matched:
            unknown.append(name)
        for key in matched:
            if key not in chosen:
                chosen.append(key)
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, keys, n=3)
            hints.append(f"{name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        raise UnknownNameError(
            f"Unknown OpInfo name(s): {'; '.join(hints)}",
            hint="names are those of torch's op_db, e.g. add, nn.functional.layer_norm; "
            "`hfsweep ops --list` prints them all",
        )
    return chosen


@dataclass(frozen=True)
class Applicability:
    """PyTorch's own verdict for one OpInfo x dtype, before any sample runs."""

    forward: tuple[str, str] | None  # (OpSkipReason, detail) when the whole op x dtype is skipped
    backward: tuple[str, str] | None
    expected_failure: bool  # PyTorch marks its CPU comparison as an expected failure


def applicability(op: Any, dtype: torch.dtype, device_type: str) -> Applicability:
    if dtype not in op.supported_dtypes("cpu"):
        skip = (
            OpSkipReason.DTYPE_NOT_SUPPORTED.value,
            f"{op.name} does not support {dtype} on CPU",
        )
        return Applicability(skip, skip, False)
    declared, expected_failure = _declared_compare(op, dtype, device_type)
    if declared is not None:
        skip = (OpSkipReason.PYTORCH_DECLARED.value, declared)
        return Applicability(skip, skip, expected_failure)
    backward = None
    if not op.supports_autograd:
        backward = (OpSkipReason.NO_AUTOGRAD.value, f"{op.name} does not support autograd")
    elif dtype not in op.supported_backward_dtypes("cpu"):
        backward = (OpSkipReason.NO_AUTOGRAD.value, f"{op.name} has no gradient for {dtype} on CPU")
    return Applicability(None, backward, expected_failure)


def _declared_compare(op: Any, dtype: torch.dtype, device_type: str) -> tuple[str | None, bool]:
    """(skip reason, expected failure) that the OpInfo declares for comparing with the CPU."""
    skip: str | None = None
    xfail = False
    cls_name, test_name = COMPARE_TEST
    for info in _decorate_infos(op):
        if not info.is_active(cls_name, test_name, device_type, dtype, {}):
            continue
        for decorator in info.decorators:
            marked = _apply(decorator)
            if getattr(marked, "__unittest_skip__", False):
                skip = skip or (
                    getattr(marked, "__unittest_skip_why__", "") or "skipped by PyTorch"
                )
            elif getattr(marked, "__unittest_expecting_failure__", False):
                xfail = True
    if skip is not None:
        skip = f"PyTorch skips comparing {opinfo_key(op)} with the CPU: {skip}"
    return skip, xfail


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (list, tuple, set, frozenset)) else (value,)


def _decorate_infos(op: Any) -> list[Any]:
    from torch.testing._internal.opinfo.core import DecorateInfo

    return [d for d in (*op.decorators, *op.skips) if isinstance(d, DecorateInfo)]


def _apply(decorator: Any) -> Any:
    def probe() -> None:
        return None

    try:
        return decorator(probe)
    except Exception:  # a decorator that needs a test class: not a skip we can read
        return probe


def tolerance(op: Any, dtype: torch.dtype, device_type: str = "cpu") -> tuple[float, float]:
    """(atol, rtol) for comparing this OpInfo's results in `dtype`: the loosest override the
    OpInfo declares for the dtype (any test, any device or this device type), else
    assert_close's defaults for the dtype."""
    rtol, atol = _DEFAULT_TOLERANCE.get(dtype, (0.0, 0.0))
    found: list[tuple[float, float]] = []
    for info in _decorate_infos(op):
        if info.dtypes is not None and dtype not in info.dtypes:
            continue
        if info.device_type is not None and device_type not in _as_tuple(info.device_type):
            continue
        for decorator in info.decorators:
            overrides = getattr(decorator, "d", None)
            if not isinstance(overrides, dict) or dtype not in overrides:
                continue
            tol = overrides[dtype]
            if isinstance(tol, (int, float)):  # precisionOverride: an absolute tolerance
                found.append((float(tol), rtol))
            else:  # toleranceOverride: tol(atol, rtol)
                found.append((float(tol.atol), float(tol.rtol)))
    if found:
        return max(a for a, _ in found), max(r for _, r in found)
    return atol, rtol
