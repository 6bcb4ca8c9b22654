"""Run one model in a child process with a timeout, so a hang or a crash becomes a row.

The child streams each stage's result to the parent as soon as it is known. If the child runs
past its deadline, the parent kills it and the stage in progress is `timeout`; if it dies (a
segfault), that stage is `crash`, or `oom` when the kernel's OOM killer killed it; an
allocation past the model's memory budget fails inside the stage, which is `oom` too. Later
stages are `not_run`. The parent process never runs model code itself. What is not the
model's doing (the device failing to set up in the child, a SIGKILL from outside) raises
`EnvironmentFault`: the task is retried and no row is written. The child cannot outlive its
parent (`runners.containment`).

On Linux the child is forked from a parent that imported torch and the model libraries but ran
no op, so a child starts in milliseconds; elsewhere it is spawned. It is spawned on Linux too
when the device needs an environment variable that the parent's torch never read (it loaded
before the variable was set: MPS's CPU fallback switch). Before its first fork the parent also
imports, once, what every child would otherwise import again (`warm_parent`).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import os
import sys
import time
from typing import Any

from model_configs.spec import TinySpec
from reports.errors import EnvironmentFault, is_environment_error, safe_text
from reports.schema import Stage, Status
from runners import containment, faults
from runners.outcome import ModelOutcome, StageResult, failed_before, ordered

_WARM = False  # whether this process has warmed itself for its forks


def warm_parent() -> None:
    """Import once in this (parent) process what each forked child would otherwise import
    again: torch, the model libraries, and the compile stack (Dynamo looks up its backends by
    importing every one of them, about half a second). Imports only: the device itself is set
    up in each child, since registering a PrivateUse1 backend in the parent breaks autograd in
    forked children, and a real accelerator's runtime does not survive a fork.
    `HFSWEEP_WARM_PARENT=0` leaves every child to import for itself (benches compare the two)."""
    global _WARM
    if _WARM or _context().get_start_method() != "fork":
        return
    if os.environ.get("HFSWEEP_WARM_PARENT", "1") == "0":
        import runners.stages  # noqa: F401  (what the parent always imported before)

        return
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no compile worker pool
    from torch._dynamo.backends.registry import list_backends

    import runners.stages  # noqa: F401  (torch and the model libraries)
    from runners.devices import preload_modules

    for name in preload_modules():  # what the devices' model processes import (their compilers)
        importlib.import_module(name)

    list_backends(exclude_tags=())
    for name in _COMPILE_IMPORTS:  # what a first compile imports (measured: about 0.7 s)
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    import torch._decomp

    # the decomposition table compile backends (and export) build on first use, from the
    # dispatcher's registrations (cached per process; about 0.3 s): Python objects, no op
    torch._decomp.core_aten_decompositions()
    _WARM = True


# Modules the compile stage imports on its first use in a process (torch 2.14), found by
# comparing sys.modules before and after compiling models in a fresh child.
_COMPILE_IMPORTS = (
    "sympy.combinatorics",
    "sympy.tensor.tensor",
    "torch._dynamo.repro.after_aot",
    "torch._export.db",
    "torch._export.passes.add_runtime_assertions_for_constraints_pass",
    "torch._export.passes.collect_tracepoints_pass",
    "torch._functorch._activation_checkpointing.remat_using_tags_for_fwd_loss_bwd_graph_pass",
    "torch._higher_order_ops.passes.inline_invoke_subgraph",
    "torch._inductor.debug",
    "torch._inductor.fx_passes.dedupe_symint_uses",
    "torch._subclasses.schema_check_mode",
    "torch.export._trace",
    "torch.export._unlift",
    "torch.fx.experimental.validator",
    "torch.fx.passes.infra.partitioner",
    "torch.fx.passes.utils.fuser_utils",
)


def _child(conn: Any, spec: TinySpec, kwargs: dict[str, Any]) -> None:
    containment.enter_child(kwargs.pop("parent_pid"), kwargs.pop("memory_limit", None))
    kind = "env"  # until the device is set up, any failure is the environment's
    try:
        started = time.perf_counter()
        import faulthandler

        faulthandler.disable()  # a crash is reported as a row, not as a dump on stderr
        import torch

        torch.set_num_threads(max(1, int(kwargs.pop("threads", 1))))
        from runners.devices import get_device
        from runners.run_model import run_model

        options = kwargs.pop("device_options", {}) or {}
        device = get_device(kwargs.pop("device"), **options)
        faults.inject_spec("setup", spec)
        device.setup()
        setup_s = time.perf_counter() - started
        kind = "error"
        outcome = run_model(  # the process exits next: nothing to release
            spec,
            device=device,
            on_stage=lambda r: conn.send(("stage", r)),
            release_memory=False,
            **kwargs,
        )
        conn.send(("done", (outcome.param_count, setup_s)))
    except BaseException as exc:  # report, then exit: the parent turns it into rows
        if is_environment_error(exc):
            kind = "env"
        with contextlib.suppress(Exception):
            conn.send((kind, (type(exc).__name__, safe_text(exc))))
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
    memory_limit: int | None = containment.DEFAULT_MEMORY_LIMIT,
) -> ModelOutcome:
    """Run `spec` in a child process; returns one StageResult per requested stage, or raises
    `EnvironmentFault` when what went wrong was not the model (retry it; record nothing).
    `memory_limit`: bytes the model may allocate beyond the forked child's start (None: no cap)."""
    order = ordered(stages or list(Stage))
    warm_parent()
    containment.sweep_orphans()  # groups left by a worker that died on this node
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
        "parent_pid": os.getpid(),
        "memory_limit": memory_limit,
    }
    proc = ctx.Process(target=_child, args=(child_conn, spec, kwargs), daemon=True)
    oom_before = containment.oom_kills()
    start = time.monotonic()
    proc.start()
    containment.register(proc.pid)
    child_conn.close()
    results: list[StageResult] = []
    param_count: int | None = None
    setup_s: float | None = None
    finished = False
    child_error: tuple[str, str] | None = None
    environment = False
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
                (param_count, setup_s), finished = payload, True
                break
            elif kind in ("error", "env"):
                child_error = payload
                environment = kind == "env"
                break
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        containment.kill_group(proc.pid)  # whatever the model started goes with it
        containment.unregister(proc.pid)
        parent_conn.close()
    elapsed = time.monotonic() - start
    timings = {"child_s": elapsed, "stages_s": sum(r.duration_s or 0.0 for r in results)}
    if setup_s is not None:
        timings["setup_s"] = setup_s
    if finished and len(results) == len(order):
        return ModelOutcome(stages=results, param_count=param_count, timings=timings)
    rest = order[len(results) :]
    if timed_out:
        tail = failed_before(
            rest,
            Status.TIMEOUT,
            "Timeout",
            f"{rest[0].value} did not finish within {timeout_s:g} s (model timeout)",
            duration_s=elapsed,
        )
    elif child_error is not None and environment:
        raise EnvironmentFault(
            f"the model's process could not run {rest[0].value}: {child_error[0]}: "
            f"{child_error[1]}",
            stage=rest[0].value,
            cause_type=child_error[0],
        )
    elif child_error is not None:
        tail = failed_before(rest, Status.FAIL, child_error[0], child_error[1], duration_s=elapsed)
    else:
        death = containment.death_of(proc.exitcode, rest[0].value, oom_before)
        if death.status is None:
            raise EnvironmentFault(death.message, stage=rest[0].value)
        tail = failed_before(rest, death.status, "WorkerCrashed", death.message, duration_s=elapsed)
    return ModelOutcome(stages=results + tail.stages, param_count=param_count, timings=timings)
