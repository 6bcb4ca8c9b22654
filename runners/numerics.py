"""Numerics: a device's outputs and gradients against the same model on the CPU.

Run both models from the same weights and inputs, in eval mode (dropout off), then:

    result = compare_tensors(cpu_outputs, device_outputs, dtype)
    result = result.merge(compare_gradients(cpu_model, device_model, dtype))
    if not result.ok: status = fail_accuracy, max_abs_error = result.max_abs_error

Nested outputs (transformers `ModelOutput`, diffusers `BaseOutput`, dicts, tuples, lists) are
walked; leaves that are not tensors (caches, None) are skipped. Floating tensors must agree
within the dtype's tolerance (`|a - r| <= atol + rtol * |r| + srtol * max|R|`, NaN matching
NaN); complex ones
part by part; integer and bool tensors must be equal. The tolerance is the run dtype's: a
device that computes float64 as float32 (neuron) is compared at the float32 tolerance of an
fp32 run.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class Tolerance:
    """`|a - r| <= atol + rtol * |r| + srtol * max|R|`: the last term is a share of the
    tensor's largest magnitude. Another accumulation order (another kernel, another layout)
    moves an element by a few ulps of the terms it sums; cancellation can make that large
    next to the element itself (a projection's weight gradient of magnitude 700 whose small
    elements differ by 5e-4 in float32), never next to the tensor's scale."""

    atol: float
    rtol: float
    srtol: float = 0.0


# Device-vs-CPU in the same dtype: accumulation order differs, so a few ulps per layer.
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(atol=1e-7, rtol=1e-7, srtol=1e-12),
    torch.float32: Tolerance(atol=1e-4, rtol=1e-4, srtol=1e-5),
    torch.float16: Tolerance(atol=1e-2, rtol=1e-2, srtol=1e-3),
    torch.bfloat16: Tolerance(atol=5e-2, rtol=5e-2, srtol=1e-2),
}


def tolerance(dtype: torch.dtype | None) -> Tolerance:
    """The tolerance for comparing tensors computed in `dtype` (float32 when unknown)."""
    return TOLERANCES.get(dtype or torch.float32, TOLERANCES[torch.float32])


@dataclass
class NumericsResult:
    ok: bool = True
    max_abs_error: float = 0.0  # over every compared floating element (inf: NaN/shape mismatch)
    worst_name: str | None = None  # the tensor with the largest error (or the first mismatch)
    compared: int = 0  # tensors compared
    mismatched: list[str] = field(default_factory=list)

    def merge(self, other: NumericsResult) -> NumericsResult:
        worst = self if self.max_abs_error >= other.max_abs_error else other
        return NumericsResult(
            ok=self.ok and other.ok,
            max_abs_error=worst.max_abs_error,
            worst_name=worst.worst_name,
            compared=self.compared + other.compared,
            mismatched=self.mismatched + other.mismatched,
        )

    @property
    def message(self) -> str:
        if self.ok:
            return (
                f"{self.compared} tensors within tolerance (max abs error {self.max_abs_error:.3g})"
            )
        shown = ", ".join(self.mismatched[:5]) + (" ..." if len(self.mismatched) > 5 else "")
        return (
            f"{len(self.mismatched)} of {self.compared} tensors differ from the CPU reference "
            f"(max abs error {self.max_abs_error:.3g} in {self.worst_name}): {shown}"
        )


def named_tensors(obj: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor | None]]:
    """Leaves of a nested output as (dotted name, tensor); a missing leaf yields None."""
    if isinstance(obj, torch.Tensor):
        yield prefix or "output", obj
    elif isinstance(obj, dict):  # ModelOutput and BaseOutput are OrderedDicts
        for key, value in obj.items():
            yield from named_tensors(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from named_tensors(value, f"{prefix}.{i}" if prefix else str(i))


def _tensor_error(
    reference: torch.Tensor, actual: torch.Tensor, tol: Tolerance
) -> tuple[bool, float]:
    actual = actual.detach().cpu()
    reference = reference.detach().cpu()
    if actual.is_complex() != reference.is_complex():
        return False, math.inf
    if reference.is_complex():  # compare real and imaginary parts (a cast would drop the latter)
        reference = torch.view_as_real(reference.resolve_conj())
        actual = torch.view_as_real(actual.resolve_conj())
    if actual.shape != reference.shape:
        return False, math.inf
    if not reference.is_floating_point():
        equal = torch.equal(reference, actual.to(reference.dtype))
        return equal, 0.0 if equal else math.inf
    ref = reference.to(torch.float64)
    act = actual.to(torch.float64)
    both_nan = torch.isnan(ref) & torch.isnan(act)
    same_inf = torch.isinf(ref) & (ref == act)
    skip = both_nan | same_inf
    diff = (act - ref).abs().masked_fill(skip, 0.0)
    if torch.isnan(diff).any():  # NaN on one side only
        return False, math.inf
    max_error = float(diff.max()) if diff.numel() else 0.0
    magnitude = ref.abs().masked_fill(skip, 0.0)
    scale = float(magnitude.max()) if magnitude.numel() else 0.0
    within = diff <= tol.atol + tol.rtol * magnitude + tol.srtol * scale
    return bool(within.all()), max_error


def compare_tensors(
    reference: Any,
    actual: Any,
    dtype: torch.dtype | None = None,
    *,
    tol: Tolerance | None = None,
) -> NumericsResult:
    """Compare nested outputs leaf by leaf (tolerance from `dtype` unless `tol` is given)."""
    tol = tol or tolerance(dtype)
    expected = dict(named_tensors(reference))
    got = dict(named_tensors(actual))
    result = NumericsResult()
    for name, ref in expected.items():
        if ref is None:
            continue
        result.compared += 1
        act = got.get(name)
        ok, error = (False, math.inf) if act is None else _tensor_error(ref, act, tol)
        if not ok:
            result.ok = False
            result.mismatched.append(name)
        if error > result.max_abs_error or (not ok and result.worst_name is None):
            result.max_abs_error = max(error, result.max_abs_error)
            result.worst_name = name
    return result


def gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameter gradients by name (parameters without a gradient are left out)."""
    return {name: param.grad for name, param in model.named_parameters() if param.grad is not None}


def compare_gradients(
    reference_model: torch.nn.Module,
    actual_model: torch.nn.Module,
    dtype: torch.dtype | None = None,
    *,
    tol: Tolerance | None = None,
) -> NumericsResult:
    """Compare parameter gradients; a gradient present on one side only is a mismatch."""
    ref = {f"grad.{k}": v for k, v in gradients(reference_model).items()}
    act = {f"grad.{k}": v for k, v in gradients(actual_model).items()}
    result = compare_tensors(ref, act, dtype, tol=tol)
    for name in sorted(set(act) - set(ref)):
        result.ok = False
        result.compared += 1
        result.mismatched.append(name)
        result.max_abs_error = math.inf
        result.worst_name = name
    return result
