"""The op sweep inside one process: OpInfo x dtype x sample on a set-up device, rows out.

`sweep_units` is what the child process of `runners/op_sweep/isolation.py` runs; `send` receives
(`Kind.UNIT`, (unit, dtype)) before each OpInfo x dtype, (`Kind.SAMPLE`, {...}) before each
sample and (`Kind.ROW`, row) for each result row (`runners.supervisor.Kind`), so that the
parent always knows what was in progress. An exception that is the environment's
(`is_environment_error`: the device stopped answering) is never a sample's row: it ends the
process, and the task is retried.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ground.errors import is_environment_error, safe_text
from ground.schema import OpSkipReason, OpStatus
from runners.devices.base import Device
from runners.op_sweep.check import (
    Lowering,
    SampleContext,
    check_sample,
    describe,
    iter_samples,
    sample_dtypes,
)
from runners.op_sweep.declarations import DeviceDeclarations, load_declarations
from runners.op_sweep.opdb import DTYPES, applicability, get_opinfo, tolerance
from runners.op_sweep.units import Unit
from runners.settings import OpSettings
from runners.signature import error_signature, short_message
from runners.supervisor import Kind, Send


def device_type(device: Device) -> str:
    return device.torch_device.type


# A device's class of an op -> whether it has a native lowering (a conditional op has one for
# some inputs; an op routed to the CPU on purpose has none).
_LOWERED = {
    "native": True,
    "view": True,
    "conditional": True,
    "routed_to_cpu": False,
    "fallback": False,
}


def lowering_of(device: Device) -> Lowering:
    """Whether `device` declares a native kernel for an ATen op, from its own class of the op
    (`Device.classify_op`: native / view / routed / conditional / fallback); None where the
    device declares nothing."""
    return functools.cache(lambda op: _LOWERED.get(str(device.classify_op(op))))


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def device_skip_for(
    decl: DeviceDeclarations, unit: Unit, dtype: str, tensor_dtypes: list[torch.dtype]
) -> Callable[[str, list[torch.dtype]], tuple[str, str] | None]:
    """The device's verdict for one sample: a tensor of a dtype it declares unsupported, in the
    sample or produced by its ops on the CPU (`produced`), or the device's own skip list."""

    def unsupported(dtypes: list[torch.dtype]) -> tuple[str, str] | None:
        for name in (_dtype_name(d) for d in dtypes):
            why = decl.unsupported_dtype(name)
            if why:
                return name, why
        return None

    given = unsupported(tensor_dtypes)

    def skip(phase: str, produced: list[torch.dtype]) -> tuple[str, str] | None:
        found = given
        where = "tensor"
        if found is None:
            found, where = unsupported(produced), "tensor computed on the way"
        if found is not None:
            name, why = found
            return OpSkipReason.DEVICE_UNSUPPORTED_FEATURE.value, f"{why} (a {name} {where})"
        why_declared = decl.skip_for(unit.key, unit.name, dtype, phase)
        if why_declared:
            return OpSkipReason.DEVICE_DECLARED.value, why_declared
        return None

    return skip


def _op_level(meta: dict[str, Any], phase: str, **fields: Any) -> dict[str, Any]:
    return {**meta, "sample_index": None, "phase": phase, **fields}


def sweep_units(
    units: list[Unit],
    start: tuple[int, int, int],
    device: Device,
    settings: OpSettings,
    *,
    send: Send,
) -> None:
    decl = load_declarations(device.name, settings.declarations)
    lowering = lowering_of(device)
    dev_type = device_type(device)
    for ui in range(start[0], len(units)):
        unit = units[ui]
        op = get_opinfo(unit.key)
        first_dtype = start[1] if ui == start[0] else 0
        for di in range(first_dtype, len(unit.dtypes)):
            dtype = unit.dtypes[di]
            send((Kind.UNIT, (ui, di)))
            first_sample = start[2] if (ui, di) == (start[0], start[1]) else 0
            _sweep_dtype(
                unit, dtype, op, device, settings, decl, lowering, dev_type, first_sample, send
            )


def _sweep_dtype(
    unit: Unit,
    dtype: str,
    op: Any,
    device: Device,
    settings: OpSettings,
    decl: DeviceDeclarations,
    lowering: Lowering,
    dev_type: str,
    first_sample: int,
    send: Send,
) -> None:
    meta = unit.meta(dtype)
    tdtype = DTYPES[dtype]
    app = applicability(op, tdtype, dev_type)
    atol, rtol = tolerance(op, tdtype, dev_type)
    common = {"atol": atol, "rtol": rtol, "expected_failure": app.expected_failure}
    if app.forward is not None:
        if first_sample == 0:
            for phase in ("forward", "backward"):
                skip = app.forward if phase == "forward" else (app.backward or app.forward)
                send(
                    (
                        Kind.ROW,
                        _op_level(
                            meta,
                            phase,
                            status=OpStatus.SKIP.value,
                            reason=skip[0],
                            detail=skip[1],
                            **common,
                        ),
                    )
                )
        return
    if app.backward is not None and first_sample == 0:
        send(
            (
                Kind.ROW,
                _op_level(
                    meta,
                    "backward",
                    status=OpStatus.SKIP.value,
                    reason=app.backward[0],
                    detail=app.backward[1],
                    **common,
                ),
            )
        )
    ctx = SampleContext(
        op=op,
        key=unit.key,
        dtype=dtype,
        torch_dtype=tdtype,
        atol=atol,
        rtol=rtol,
        backward_skip=app.backward,
        expected_failure=app.expected_failure,
        lowering=lowering,
        seed=settings.seed,
    )
    phases = ["forward"] if app.backward is not None else ["forward", "backward"]
    index = -1
    try:
        samples = iter_samples(
            op,
            tdtype,
            inputs=settings.inputs,
            requires_grad=app.backward is None,
            seed=settings.seed,
        )
        for index, (sample, host_only) in enumerate(samples):
            if index < first_sample:
                continue
            send((Kind.SAMPLE, {"index": index, "phases": phases, "sample": describe(sample)}))
            _check_one(ctx, index, sample, host_only, device, decl, unit, dtype, phases, send)
    except Exception as exc:  # the OpInfo's own sample generator raised on the CPU
        if is_environment_error(exc):
            raise
        detail = (
            f"PyTorch's sample generator for {unit.key} raised after {index + 1} samples: "
            f"{type(exc).__name__}: {short_message(str(exc), 200)}"
        )
        send(
            (
                Kind.ROW,
                _op_level(
                    meta,
                    "forward",
                    status=OpStatus.SKIP.value,
                    reason=OpSkipReason.REFERENCE_FAILED.value,
                    detail=detail,
                    **common,
                ),
            )
        )


def _check_one(
    ctx: SampleContext,
    index: int,
    sample: Any,
    host_only: frozenset[int],
    device: Device,
    decl: DeviceDeclarations,
    unit: Unit,
    dtype: str,
    phases: list[str],
    send: Send,
) -> None:
    sent: list[str] = []

    def on_row(row: dict[str, Any]) -> None:
        sent.append(row["phase"])
        send((Kind.ROW, row))

    skip = device_skip_for(decl, unit, dtype, sample_dtypes(sample))
    try:
        check_sample(
            ctx, index, sample, device, device_skip=skip, host_only=host_only, on_row=on_row
        )
    except Exception as exc:  # outside the op itself (moving the sample, reading results)
        if is_environment_error(exc):
            raise
        message = safe_text(exc)
        for phase in [p for p in phases if p not in sent]:
            on_row(
                {
                    **unit.meta(dtype),
                    "sample_index": index,
                    "sample": describe(sample),
                    "phase": phase,
                    "status": OpStatus.FAIL.value,
                    "error_type": type(exc).__name__,
                    "error_message": short_message(message),
                    "error_signature": error_signature(type(exc).__name__, message),
                    "atol": ctx.atol,
                    "rtol": ctx.rtol,
                }
            )
