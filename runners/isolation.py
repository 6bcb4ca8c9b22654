"""Run one model in a child process with a deadline, so a hang or a crash becomes a row.

The child (`runners.supervisor.Child`) streams each stage's result to the parent as soon as it
is known. If the child runs past its deadline (`--timeout` of its own time: waiting for a CPU
on a loaded machine does not count), the parent kills it and the stage in progress is
`timeout`; if it dies (a segfault), that stage is `crash`, or `oom` when the kernel's OOM
killer killed it; an allocation past the model's memory budget fails inside the stage, which
is `oom` too. Later stages are `not_run`. The parent process never runs model code itself.
The distributed stages run afterwards on this process's warm group of rank processes
(`runners.distributed.group.warm_group`), which serves every model this process runs while
its stages pass; `timings["group_starts"]` counts the groups a model's stages started.
What is not the model's doing (the device failing to set up in the child, a SIGKILL from
outside) raises `EnvironmentFault`: the task is retried and no row is written.

On Linux the child is forked from a parent that imported torch and the model libraries but ran
no op, so a child starts in milliseconds; it is spawned where the device needs an environment
variable that the parent's torch never read (MPS's CPU fallback switch). Before its first fork
the parent also imports, once, what every child would otherwise import again
(`runners.warm.warm_parent`: torch and the compile stack; `warm_model`: the model's class and
what its library imports with it, once per class).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from ground.schema import Stage, Status
from model_configs.spec import TinySpec
from runners import containment, faults
from runners import stages as stage_registry
from runners.distributed.group import group_stage_results, warm_group
from runners.outcome import ModelOutcome, StageResult, failed_before, not_applicable_to
from runners.settings import ModelSettings
from runners.supervisor import Child, Kind, Send, device_ready, fresh_interpreter, peak_rss_bytes
from runners.warm import warm_model, warm_parent, warm_peft

CHILD_MODULES = (
    "runners.stages.engine",
    *stage_registry.runner_modules(stage_registry.default_stages()),
)  # what a model's child imports: torch, the model libraries


def _model_child(send: Send, spec: TinySpec, settings: ModelSettings) -> None:
    """The child's body: set the device up (any failure until then is the environment's), then
    stream each stage's result as soon as it is known."""
    device = device_ready(send, settings, faults.spec_keys(spec))
    from runners.run_model import run_model

    outcome = run_model(  # the process exits next: nothing to release
        spec,
        settings,
        device=device,
        on_stage=lambda r: send((Kind.STAGE, r)),
        release_memory=False,
    )
    send((Kind.PEAK, peak_rss_bytes()))
    send((Kind.DONE, outcome.param_count))


def _now(child: Child, rest: list[Stage]) -> None:
    """What the child is doing once the stages before `rest` came back (for its faults)."""
    child.stage = rest[0].value if rest else None
    child.doing = rest[0].value if rest else "its set-up"


def warm_for(settings: ModelSettings) -> None:
    """What this process imports once before it forks the children of `settings`' models."""
    warm_parent(
        *CHILD_MODULES,
        compiles=stage_registry.compiles(settings.stages),
        device=settings.device.name,
    )
    if Stage.LORA in settings.stages:
        warm_peft()


def run_isolated(
    spec: TinySpec,
    settings: ModelSettings,
    on_stage: Callable[[StageResult], None] | None = None,
) -> ModelOutcome:
    """Run `spec` in a child process; returns one StageResult per requested stage, or raises
    `EnvironmentFault` when what went wrong was not the model (retry it; record nothing).
    `on_stage` sees each stage's result as the child reports it (progress)."""
    order = list(settings.stages)
    warm_for(settings)
    spawn = fresh_interpreter(settings.device.name, settings.device.options())
    if not spawn:  # a spawned child imports for itself whatever this process holds
        warm_model(spec)
    # the rank stages run afterwards, on this process's warm group of rank processes
    own = replace(settings, stages=tuple(s for s in order if s not in stage_registry.rank_stages()))
    own_order = list(own.stages)
    results: list[StageResult] = []
    param_count: int | None = None
    setup_s: float | None = None
    finished = False
    child_error: tuple[str, str] | None = None
    with Child(
        _model_child,
        (spec, own),
        spawn=spawn,
        memory_limit=settings.memory_limit,
        process="the model's process",
    ) as child:
        _now(child, own_order)
        child.deadline(settings.timeout_s)
        while (message := child.receive()) is not None:  # EnvironmentFault: not the model's
            kind, payload = message
            if kind == Kind.READY:
                setup_s = payload
            elif kind == Kind.STAGE:
                results.append(payload)
                _now(child, own_order[len(results) :])
                if on_stage is not None:
                    on_stage(payload)
            elif kind == Kind.DONE:
                param_count, finished = payload, True
                break
            elif kind == Kind.ERROR:
                child_error = payload
                break
    elapsed = time.monotonic() - child.started
    timings = {"child_s": elapsed, "stages_s": sum(r.duration_s or 0.0 for r in results)}
    if setup_s is not None:
        timings["setup_s"] = setup_s
    peak = child.peak_rss
    if finished and len(results) == len(own.stages):
        if len(own.stages) < len(order):
            starts = warm_group(settings, spawn=spawn).starts
        results += group_stage_results(spec, settings, results, spawn=spawn, on_stage=on_stage)
        if len(own.stages) < len(order):
            timings["group_starts"] = warm_group(settings, spawn=spawn).starts - starts
        return ModelOutcome(
            stages=results, param_count=param_count, timings=timings, peak_host_memory_bytes=peak
        )
    rest = [s for s in order if s.value not in {r.stage for r in results}]
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
    else:  # dead of its own doing (a death from outside raised EnvironmentFault in `receive`)
        death = ending.death if ending else None
        death = death or containment.death_of(None, rest[0].value, None)
        assert death.status is not None
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
