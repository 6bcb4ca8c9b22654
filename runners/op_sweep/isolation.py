"""Run OpInfo samples in a supervised child process, so that a sample that hangs or crashes is a
row.

The child (`runners.supervisor.Child`, the one the model sweep runs its models in: a process
group, a memory budget, a deadline on its own time) streams a message before each OpInfo x
dtype and each sample, then each row as soon as it is known. If it runs past the per-sample
timeout the parent kills it; if it dies, the sample in progress gets `timeout`, `crash` or
`oom` (the kernel's OOM killer) for the phase it was in (`not_run` for the backward after a
forward that never finished), and a fresh child carries on with the next sample. What is not
the op's doing (the device failing to set up, a SIGKILL from outside, a device error inside a
sample) raises `EnvironmentFault` (from the supervisor): the task is retried and none of its
rows count. Before its first fork the parent imports, once, what every child would otherwise
import again (`runners.warm.warm_parent`: the op sweep's modules, PyTorch's OpInfo database and
the device's own modules; no op child compiles, so not the compile stack).
"""

from __future__ import annotations

import warnings
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from ground.schema import OpStatus
from runners.op_sweep.units import Unit
from runners.settings import OpSettings
from runners.supervisor import Child, Kind, Send, device_ready, fresh_interpreter
from runners.warm import warm_parent

# what an op child imports: its runner, PyTorch's OpInfo database (`runners.op_sweep.opdb`)
CHILD_MODULES = ("runners.op_sweep.run",)


def _op_child(
    send: Send, units: list[Unit], start: tuple[int, int, int], settings: OpSettings
) -> None:
    """The child's body: set the device up (any failure until then is the environment's), then
    sweep the units from `start` on."""
    warnings.simplefilter("ignore")
    device = device_ready(send, settings, tuple(u.key for u in units))
    from runners.op_sweep.run import sweep_units

    sweep_units(units, start, device, settings, send=send)
    send((Kind.DONE, None))


@dataclass
class _Progress:
    unit: int = 0
    dtype: int = 0
    sample: int | None = None  # the sample in progress (None: between samples)
    meta: dict[str, Any] = field(default_factory=dict)  # opinfo, opinfo_name, variant, dtype
    phases: list[str] = field(default_factory=list)  # phases of the sample in progress
    received: list[str] = field(default_factory=list)


def run_units_isolated(units: list[Unit], settings: OpSettings) -> Iterator[dict[str, Any]]:
    """Rows for every sample of `units`; never raises for a sample's failure; raises
    `EnvironmentFault` when the environment stopped it (retry the task; record nothing)."""
    from runners.op_sweep.opdb import op_db

    warm_parent(*CHILD_MODULES, compiles=False, device=settings.device.name)
    op_db()  # built once per process, before forking children (about 4 s)
    position = (0, 0, 0)
    while True:
        unit = units[position[0]]
        progress = _Progress(unit=position[0], dtype=position[1])
        progress.meta = unit.meta(unit.dtypes[position[1]])
        outcome = yield from _run_child(units, position, settings, progress)
        if outcome is None:
            return
        kind, message = outcome
        if kind == "error":  # the sweep loop itself broke outside any sample
            yield from _unit_rows(units, progress, OpStatus.FAIL.value, message[0], message[1])
            return
        yield from _lost_rows(progress, kind, message)
        if progress.sample is None:  # lost between samples: give up on this OpInfo x dtype
            position = _next_dtype(units, progress.unit, progress.dtype)
        else:
            position = (progress.unit, progress.dtype, progress.sample + 1)
        if position[0] >= len(units):
            return


def _next_dtype(units: list[Unit], unit: int, dtype: int) -> tuple[int, int, int]:
    if dtype + 1 < len(units[unit].dtypes):
        return (unit, dtype + 1, 0)
    return (unit + 1, 0, 0)


def _run_child(
    units: list[Unit], start: tuple[int, int, int], settings: OpSettings, progress: _Progress
) -> Generator[dict[str, Any], None, tuple[str, Any] | None]:
    """Yields rows; returns None when the child finished, else (kind, message) of its end:
    `error` (the sweep loop broke), or a status (`timeout`, `crash`, `oom`) for the sample."""
    spawn = fresh_interpreter(settings.device.name, settings.device.options())
    with Child(
        _op_child,
        (units, start, settings),
        spawn=spawn,
        memory_limit=settings.memory_limit,
        process="the op sweep's process",
    ) as child:
        child.doing = "the sample"
        child.deadline(settings.setup_timeout_s)
        while (message := child.receive()) is not None:  # EnvironmentFault: not the op's
            kind, payload = message
            if kind == Kind.UNIT:
                progress.unit, progress.dtype = payload
                unit = units[progress.unit]
                progress.meta = unit.meta(unit.dtypes[progress.dtype])
                progress.sample, progress.phases, progress.received = None, [], []
                child.deadline(settings.setup_timeout_s)
            elif kind == Kind.SAMPLE:
                progress.sample, progress.phases = payload["index"], list(payload["phases"])
                progress.meta = {**progress.meta, "sample": payload["sample"]}
                progress.received = []
                child.deadline(settings.timeout_s)
            elif kind == Kind.ROW:
                if payload.get("sample_index") is not None:
                    progress.received.append(payload["phase"])
                yield payload
                child.extend(settings.timeout_s)
            elif kind == Kind.DONE:
                return None
            elif kind == Kind.ERROR:
                return ("error", payload)
    ending = child.ending
    assert ending is not None
    if ending.timed_out:
        return ("timeout", f"the sample did not finish within {settings.timeout_s:g} s")
    death = ending.death  # of its own doing: one from outside raised in `receive`
    assert death is not None and death.status is not None
    return (death.status.value, death.message)


def _lost_rows(progress: _Progress, kind: str, message: str) -> Iterator[dict[str, Any]]:
    """Rows for what the lost child was doing: the phase in progress and the ones after it."""
    status = OpStatus(kind).value  # timeout, crash or oom
    error_type = "Timeout" if kind == "timeout" else "WorkerCrashed"
    base = {k: v for k, v in progress.meta.items() if k != "sample"}
    if progress.sample is None or len(progress.received) >= len(progress.phases):
        # between samples (generating the next ones): one row for the OpInfo x dtype
        yield {
            **base,
            "sample_index": None,
            "phase": "forward",
            "status": status,
            "error_type": error_type,
            "error_message": f"{message} (while preparing the next sample)",
            "error_signature": f"{error_type}: {kind} while preparing samples",
        }
        progress.sample = None
        return
    missing = [p for p in progress.phases if p not in progress.received]
    for i, phase in enumerate(missing):
        row = {
            **base,
            "sample_index": progress.sample,
            "sample": progress.meta.get("sample"),
            "phase": phase,
        }
        if i == 0:
            row.update(
                status=status,
                error_type=error_type,
                error_message=message,
                error_signature=f"{error_type}: {message.split(' (')[0]}",
            )
        else:
            row.update(status=OpStatus.NOT_RUN.value, detail=f"the {missing[0]} pass did not end")
        yield row


def _unit_rows(
    units: list[Unit], progress: _Progress, status: str, error_type: str, message: str
) -> Iterator[dict[str, Any]]:
    """The sweep loop broke outside any sample (not the environment): a row per OpInfo x dtype
    left."""
    from runners.signature import error_signature, short_message

    for ui in range(progress.unit, len(units)):
        unit = units[ui]
        first = progress.dtype if ui == progress.unit else 0
        for dtype in unit.dtypes[first:]:
            yield {
                **unit.meta(dtype),
                "sample_index": None,
                "phase": "forward",
                "status": status,
                "error_type": error_type,
                "error_message": short_message(message),
                "error_signature": error_signature(error_type, message),
            }
