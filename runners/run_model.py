"""Run one tiny model through the requested stages on one device, in this process.

`run_model` never raises for a model's failure: it returns one StageResult per stage. Callers
that need protection from hangs and crashes use `runners.isolation.run_isolated`, which runs
this in a child process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ground.errors import is_environment_error, safe_text
from ground.schema import SkipReason, Stage, Status
from model_configs.spec import TinySpec
from runners.outcome import ModelOutcome, StageResult, failed_before, not_applicable_to, skipped
from runners.quiet import quiet_libraries
from runners.settings import ModelSettings

if TYPE_CHECKING:
    from runners.devices.base import Device


def on_fresh_ranks(spec: TinySpec, settings: ModelSettings, stage: Stage) -> StageResult:
    """A stage declared `on_ranks`, asked for in this process: on a group of fresh processes
    (this one may have set a device up already, which a forked rank could not use), ended
    with it."""
    from runners.distributed.group import run_group

    return run_group(spec, settings, stage, spawn=True)


def run_model(
    spec: TinySpec,
    settings: ModelSettings,
    *,
    device: Device | None = None,
    compare: bool | None = None,
    on_stage: Callable[[StageResult], None] | None = None,
    release_memory: bool = True,
) -> ModelOutcome:
    """Run `spec` through `settings.stages`. `device`: the settings' device, already set up
    (None: built and set up here). `release_memory=False` skips dropping the model and
    collecting garbage at the end (a full collection costs 0.2-0.4 s), for a child process
    that exits right after."""

    from runners.stages.engine import DTYPES, StageContext, release, run_stages

    quiet_libraries()
    order = list(settings.stages)
    if device is None:
        device = settings.device.build()
        device.setup()
    if not device.supports_dtype(DTYPES[settings.dtype]):
        outcome = skipped(
            order,
            SkipReason.DEVICE_UNSUPPORTED_FEATURE.value,
            f"{device.name} does not support dtype {settings.dtype}",
        )
        for r in outcome.stages:
            if on_stage:
                on_stage(r)
        return outcome
    ctx = StageContext(
        spec=spec,
        device=device,
        settings=settings,
        compare=(device.name != "cpu") if compare is None else compare,
        on_ranks=on_fresh_ranks,
    )
    results: list[StageResult] = []
    start = time.perf_counter()
    try:
        for result in run_stages(ctx, order, on_stage=on_stage):
            results.append(result)
    except Exception as exc:  # a bug outside any stage: still rows, never an exception
        if is_environment_error(exc):
            raise  # the machine failed, not the model (the caller retries the task)
        done = {r.stage for r in results}
        rest = [s for s in order if s.value not in done]
        tail = failed_before(
            rest,
            Status.FAIL,
            type(exc).__name__,
            safe_text(exc),
            duration_s=time.perf_counter() - start,
            not_applicable=not_applicable_to(spec),
        ).stages
        for r in tail:
            if on_stage:
                on_stage(r)
        results += tail
    finally:
        param_count = ctx.param_count
        if release_memory:
            release(ctx)
    return ModelOutcome(stages=results, param_count=param_count)
