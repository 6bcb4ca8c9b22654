"""Run one model in a child process with a deadline, so a hang or a crash becomes a row.

The child (`runners.supervisor.Child`) streams each stage's result to the parent as soon as it
is known. If the child runs past its deadline (`--timeout` of its own time: waiting for a CPU
on a loaded machine does not count), the parent kills it and the stage in progress is
`timeout`; if it dies (a segfault), that stage is `crash`, or `oom` when the kernel's OOM
killer killed it; an allocation past the model's memory budget fails inside the stage, which
is `oom` too. Later stages are `not_run`. The parent process never runs model code itself.
What is not the model's doing (the device failing to set up in the child, a SIGKILL from
outside) raises `EnvironmentFault`: the task is retried and no row is written.

On Linux the child is forked from a parent that imported torch and the model libraries but ran
no op, so a child starts in milliseconds; it is spawned where the device needs an environment
variable that the parent's torch never read (MPS's CPU fallback switch). Before its first fork
the parent also imports, once, what every child would otherwise import again (`warm_parent`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections.abc import Callable

from model_configs.spec import TinySpec
from reports.errors import EnvironmentFault
from reports.schema import Stage, Status
from runners import containment, faults
from runners.outcome import ModelOutcome, StageResult, failed_before, not_applicable_to
from runners.settings import ModelSettings
from runners.supervisor import Child, Send, forks, fresh_interpreter, peak_rss_bytes

_WARM = False  # whether this process has warmed itself for its forks


def warm_parent() -> None:
    """Import once in this (parent) process what each forked child would otherwise import
    again: torch, the model libraries, and the compile stack (Dynamo looks up its backends by
    importing every one of them, about half a second). Imports only: the device itself is set
    up in each child, since registering a PrivateUse1 backend in the parent breaks autograd in
    forked children, and a real accelerator's runtime does not survive a fork.
    `HFSWEEP_WARM_PARENT=0` leaves every child to import for itself (benches compare the two)."""
    global _WARM
    if _WARM or not forks():
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


def warm_peft() -> None:
    """Import peft once in this parent when the lora stage runs: each forked child would
    otherwise import it again (several seconds: it brings accelerate)."""
    if not forks() or os.environ.get("HFSWEEP_WARM_PARENT") == "0":
        return
    with contextlib.suppress(ImportError):  # without peft the lora stage is a skip
        importlib.import_module("peft")


# Modules the compile stage imports on its first use in a process (torch 2.14), found by
# comparing sys.modules before and after compiling models in a fresh child.
_COMPILE_IMPORTS = (
    # what a first compile (aot_eager or the neuron backend: AOTAutograd) imports with torch
    # 2.14 (measured: 1.2 s of a fresh child's first compile, 0.3 s once these are imported)
    "torch._inductor.compile_fx",
    "torch._inductor.lowering",
    "torch._inductor.select_algorithm",
    "torch.ao.quantization",
    "torch._dynamo.dce_extra_outputs",
    "torch._export.passes._node_metadata_hook",
    "torch._inductor.compiler_bisector",
    "torch.distributed.tensor.experimental",
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


def _model_child(send: Send, spec: TinySpec, settings: ModelSettings) -> None:
    """The child's body: set the device up (any failure until then is the environment's), then
    stream each stage's result as soon as it is known."""
    started = time.perf_counter()
    import torch

    torch.set_num_threads(max(1, settings.threads))
    from runners.run_model import run_model

    device = settings.device.build()
    faults.inject_spec("setup", spec)
    device.setup()
    send(("ready", time.perf_counter() - started))
    outcome = run_model(  # the process exits next: nothing to release
        spec,
        settings,
        device=device,
        on_stage=lambda r: send(("stage", r)),
        release_memory=False,
    )
    send(("peak", peak_rss_bytes()))
    send(("done", outcome.param_count))


def run_isolated(
    spec: TinySpec,
    settings: ModelSettings,
    on_stage: Callable[[StageResult], None] | None = None,
) -> ModelOutcome:
    """Run `spec` in a child process; returns one StageResult per requested stage, or raises
    `EnvironmentFault` when what went wrong was not the model (retry it; record nothing).
    `on_stage` sees each stage's result as the child reports it (progress)."""
    order = list(settings.stages)
    warm_parent()
    if Stage.LORA in order:
        warm_peft()
    spawn = fresh_interpreter(settings.device.name, settings.device.options())
    results: list[StageResult] = []
    param_count: int | None = None
    setup_s: float | None = None
    finished = False
    child_error: tuple[str, str] | None = None
    with Child(
        _model_child, (spec, settings), spawn=spawn, memory_limit=settings.memory_limit
    ) as child:
        child.deadline(settings.timeout_s)
        while (message := child.receive()) is not None:
            kind, payload = message
            if kind == "ready":
                setup_s = payload
            elif kind == "stage":
                results.append(payload)
                if on_stage is not None:
                    on_stage(payload)
            elif kind == "done":
                param_count, finished = payload, True
                break
            elif kind == "env":
                rest = order[len(results) :]
                doing = rest[0].value if rest else "its set-up"
                raise EnvironmentFault(
                    f"the model's process could not run {doing}: {payload[0]}: {payload[1]}",
                    stage=rest[0].value if rest else None,
                    cause_type=payload[0],
                )
            elif kind == "error":
                child_error = payload
                break
    elapsed = time.monotonic() - child.started
    timings = {"child_s": elapsed, "stages_s": sum(r.duration_s or 0.0 for r in results)}
    if setup_s is not None:
        timings["setup_s"] = setup_s
    peak = child.peak_rss
    if finished and len(results) == len(order):
        return ModelOutcome(
            stages=results, param_count=param_count, timings=timings, peak_host_memory_bytes=peak
        )
    rest = order[len(results) :]
    ending = child.ending
    na = not_applicable_to(spec)
    if child_error is not None:
        tail = failed_before(rest, Status.FAIL, *child_error, duration_s=elapsed, not_applicable=na)
    elif ending is not None and ending.timed_out:
        tail = failed_before(
            rest,
            Status.TIMEOUT,
            "Timeout",
            f"{rest[0].value} did not finish within {settings.timeout_s:g} s (model timeout)",
            duration_s=elapsed,
            not_applicable=na,
        )
    else:
        doing = rest[0].value
        death = ending.death(doing) if ending else containment.death_of(None, doing, None)
        if death.status is None:
            raise EnvironmentFault(death.message, stage=rest[0].value)
        tail = failed_before(
            rest,
            death.status,
            "WorkerCrashed",
            death.message,
            duration_s=elapsed,
            not_applicable=na,
        )
    return ModelOutcome(
        stages=results + tail.stages,
        param_count=param_count,
        timings=timings,
        peak_host_memory_bytes=peak,
    )
