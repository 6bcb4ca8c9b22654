"""Run one model in a child process with a timeout, so a hang or a crash becomes a row.

The child streams each stage's result to the parent as soon as it is known. If the child runs
past its deadline, the parent kills it and the stage in progress is `timeout`; if it dies (a
segfault, the OOM killer), that stage is `crash` (or `oom` for an out-of-memory kill). Later
stages are `not_run`. The parent process never runs model code itself.

On Linux the child is forked from a parent that imported torch and the model libraries but ran
no op, so a child starts in milliseconds; elsewhere it is spawned. It is spawned on Linux too
when the device needs an environment variable that the parent's torch never read (it loaded
before the variable was set: MPS's CPU fallback switch).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import time
from typing import Any

from model_configs.spec import TinySpec
from reports.schema import Stage, Status
from runners.outcome import ModelOutcome, StageResult, failed_before, ordered

_SIGNAL_NAMES = {getattr(signal, n): n for n in dir(signal) if n.startswith("SIG") and "_" not in n}


def _child(conn: Any, spec: TinySpec, kwargs: dict[str, Any]) -> None:
    try:
        import faulthandler

        faulthandler.disable()  # a crash is reported as a row, not as a dump on stderr
        import torch

        torch.set_num_threads(max(1, int(kwargs.pop("threads", 1))))
        from runners.devices import get_device
        from runners.run_model import run_model

        options = kwargs.pop("device_options", {}) or {}
        device = get_device(kwargs.pop("device"), **options)
        device.setup()
        outcome = run_model(
            spec, device=device, on_stage=lambda r: conn.send(("stage", r)), **kwargs
        )
        conn.send(("done", outcome.param_count))
    except BaseException as exc:  # report, then exit: the parent turns it into rows
        with contextlib.suppress(Exception):
            conn.send(("error", (type(exc).__name__, str(exc))))
    finally:
        conn.close()
        os._exit(0)


def _context() -> Any:
    if sys.platform.startswith("linux"):
        return mp.get_context("fork")
    return mp.get_context("spawn")


def _context_for(device: str, device_options: dict[str, Any] | None) -> Any:
    """Fork, unless the device needs an environment variable this process's torch never read
    (then a fresh interpreter, which imports torch after it is set)."""
    from runners.devices import prepare_process_env

    if prepare_process_env(device, device_options):
        return mp.get_context("spawn")
    return _context()


def run_isolated(
    spec: TinySpec,
    *,
    device: str,
    device_options: dict[str, Any] | None = None,
    dtype: str = "fp32",
    stages: list[Stage] | list[str] | None = None,
    timeout_s: float = 600.0,
    threads: int = 1,
    seed: int = 0,
    compile_backend: str | None = None,
) -> ModelOutcome:
    """Run `spec` in a child process; always returns one StageResult per requested stage."""
    order = ordered(stages or list(Stage))
    ctx = _context_for(device, device_options)
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    kwargs = {
        "device": device,
        "device_options": device_options or {},
        "dtype": dtype,
        "stages": [s.value for s in order],
        "threads": threads,
        "seed": seed,
        "compile_backend": compile_backend,
    }
    proc = ctx.Process(target=_child, args=(child_conn, spec, kwargs), daemon=True)
    start = time.monotonic()
    proc.start()
    child_conn.close()
    results: list[StageResult] = []
    param_count: int | None = None
    finished = False
    child_error: tuple[str, str] | None = None
    timed_out = False
    deadline = start + timeout_s
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            try:
                ready = parent_conn.poll(min(remaining, 1.0))
            except (EOFError, OSError):
                break
            if not ready:
                if not proc.is_alive() and not parent_conn.poll(0):
                    break
                continue
            try:
                kind, payload = parent_conn.recv()
            except (EOFError, OSError):
                break
            if kind == "stage":
                results.append(payload)
            elif kind == "done":
                param_count, finished = payload, True
                break
            elif kind == "error":
                child_error = payload
                break
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent_conn.close()
    if finished and len(results) == len(order):
        return ModelOutcome(stages=results, param_count=param_count)
    elapsed = time.monotonic() - start
    rest = order[len(results) :]
    if timed_out:
        tail = failed_before(
            rest,
            Status.TIMEOUT,
            "Timeout",
            f"{rest[0].value} did not finish within {timeout_s:g} s (model timeout)",
            duration_s=elapsed,
        )
    elif child_error is not None:
        tail = failed_before(rest, Status.FAIL, child_error[0], child_error[1], duration_s=elapsed)
    else:
        code = proc.exitcode
        if code is not None and code < 0:
            name = _SIGNAL_NAMES.get(-code, f"signal {-code}")
            status = Status.OOM if -code == signal.SIGKILL else Status.CRASH
            hint = " (killed: most likely out of memory)" if status is Status.OOM else ""
            message = f"the process running {rest[0].value} died with {name}{hint}"
        else:
            status, message = Status.CRASH, f"the process running {rest[0].value} exited ({code})"
        tail = failed_before(rest, status, "WorkerCrashed", message, duration_s=elapsed)
    return ModelOutcome(stages=results + tail.stages, param_count=param_count)
