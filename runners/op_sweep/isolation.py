"""Run OpInfo samples in a child process, so that a sample that hangs or crashes is a row.

The child streams a message before each OpInfo x dtype and each sample, then each row as soon as
it is known. If it runs past the per-sample timeout the parent kills it; if it dies, the sample in
progress gets `timeout` / `crash` for the phase it was in (`not_run` for the backward after a
forward that never finished), and a fresh child carries on with the next sample. As in
`runners/isolation.py`, on Linux the child is forked from a parent that imported torch and
op_db but ran no op, so it starts in milliseconds.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from reports.schema import OpStatus

_SIGNAL_NAMES = {getattr(signal, n): n for n in dir(signal) if n.startswith("SIG") and "_" not in n}


@dataclass(frozen=True)
class Unit:
    """One OpInfo with the dtypes to sweep it in."""

    key: str  # name or name.variant
    name: str
    variant: str | None
    dtypes: tuple[str, ...]

    def meta(self, dtype: str) -> dict[str, Any]:
        return {
            "opinfo": self.key,
            "opinfo_name": self.name,
            "variant": self.variant,
            "dtype": dtype,
        }


@dataclass
class SweepOptions:
    device: str
    device_options: dict[str, Any] = field(default_factory=dict)
    inputs: str = "sample"
    timeout_s: float = 60.0  # per sample
    setup_timeout_s: float = 300.0  # device set-up and the first OpInfo's samples
    seed: int = 0
    declarations: str | None = None  # a user's declarations file
    threads: int = 1


def _child(conn: Any, units: list[Unit], start: tuple[int, int, int], opts: SweepOptions) -> None:
    try:
        import faulthandler
        import warnings

        faulthandler.disable()  # a crash is reported as a row, not as a dump on stderr
        warnings.simplefilter("ignore")
        import torch

        torch.set_num_threads(max(1, opts.threads))
        from runners.devices import get_device
        from runners.op_sweep.run import sweep_units

        device = get_device(opts.device, **(opts.device_options or {}))
        device.setup()
        sweep_units(units, start, device, opts, send=conn.send)
        conn.send(("done", None))
    except BaseException as exc:  # report, then exit: the parent turns it into rows
        with contextlib.suppress(Exception):
            conn.send(("error", (type(exc).__name__, str(exc))))
    finally:
        conn.close()
        os._exit(0)


def _context() -> Any:
    return mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")


@dataclass
class _Progress:
    unit: int = 0
    dtype: int = 0
    sample: int | None = None  # the sample in progress (None: between samples)
    meta: dict[str, Any] = field(default_factory=dict)  # opinfo, opinfo_name, variant, dtype
    phases: list[str] = field(default_factory=list)  # phases of the sample in progress
    received: list[str] = field(default_factory=list)


def run_units_isolated(units: list[Unit], opts: SweepOptions) -> Iterator[dict[str, Any]]:
    """Rows for every sample of `units`; never raises for a sample's failure."""
    position = (0, 0, 0)
    while True:
        unit = units[position[0]]
        progress = _Progress(unit=position[0], dtype=position[1])
        progress.meta = unit.meta(unit.dtypes[position[1]])
        outcome = yield from _run_child(units, position, opts, progress)
        if outcome is None:
            return
        kind, message = outcome
        if kind == "error":  # the device could not be set up, or the sweep loop itself broke
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
    units: list[Unit], start: tuple[int, int, int], opts: SweepOptions, progress: _Progress
) -> Generator[dict[str, Any], None, tuple[str, Any] | None]:
    """Yields rows; returns None when the child finished, else (kind, message) of its end."""
    ctx = _context()
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child_conn, units, start, opts), daemon=True)
    began = time.monotonic()
    proc.start()
    child_conn.close()
    deadline = began + opts.setup_timeout_s
    result: tuple[str, Any] | None = None
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                result = ("timeout", time.monotonic() - began)
                break
            try:
                ready = parent_conn.poll(min(remaining, 1.0))
            except (EOFError, OSError):
                result = ("crash", None)
                break
            if not ready:
                if not proc.is_alive() and not parent_conn.poll(0):
                    result = ("crash", None)
                    break
                continue
            try:
                kind, payload = parent_conn.recv()
            except (EOFError, OSError):
                result = ("crash", None)
                break
            if kind == "unit":
                progress.unit, progress.dtype = payload
                unit = units[progress.unit]
                progress.meta = unit.meta(unit.dtypes[progress.dtype])
                progress.sample, progress.phases, progress.received = None, [], []
                deadline = time.monotonic() + opts.setup_timeout_s
            elif kind == "sample":
                progress.sample, progress.phases = payload["index"], list(payload["phases"])
                progress.meta = {**progress.meta, "sample": payload["sample"]}
                progress.received = []
                deadline = time.monotonic() + opts.timeout_s
            elif kind == "row":
                if payload.get("sample_index") is not None:
                    progress.received.append(payload["phase"])
                yield payload
                deadline = max(deadline, time.monotonic() + opts.timeout_s)
            elif kind == "done":
                return None
            elif kind == "error":
                result = ("error", payload)
                break
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent_conn.close()
    assert result is not None
    if result[0] == "crash":
        code = proc.exitcode
        if code is not None and code < 0:
            name = _SIGNAL_NAMES.get(-code, f"signal {-code}")
            hint = " (killed: most likely out of memory)" if -code == signal.SIGKILL else ""
            result = ("crash", f"the process running the sample died with {name}{hint}")
        else:
            result = ("crash", f"the process running the sample exited ({code})")
    elif result[0] == "timeout":
        result = ("timeout", f"the sample did not finish within {opts.timeout_s:g} s")
    return result


def _lost_rows(progress: _Progress, kind: str, message: str) -> Iterator[dict[str, Any]]:
    """Rows for what the lost child was doing: the phase in progress and the ones after it."""
    status = OpStatus.TIMEOUT.value if kind == "timeout" else OpStatus.CRASH.value
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
    """The sweep could not go on (the device failed to set up): a row per OpInfo x dtype left."""
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
