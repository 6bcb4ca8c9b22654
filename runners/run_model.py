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
from ground.schema import SkipReason, Status
from model_configs.spec import TinySpec
from runners.outcome import ModelOutcome, StageResult, failed_before, not_applicable_to, skipped
from runners.settings import ModelSettings

if TYPE_CHECKING:
    from runners.devices.base import Device


def quiet_libraries() -> None:
    """Model libraries print progress bars and advice per model; a sweep wants rows instead."""
    import logging
    import os
    import sys
    import warnings

    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no compile pool per model
    warnings.filterwarnings("ignore")
    for name in ("transformers", "diffusers", "huggingface_hub"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
    # diffusers takes its loggers' level from this variable when it is first imported (by its
    # adapter, which also turns its progress bars off): importing it here only to quiet it cost
    # 1.9 s of CPU in every process that never builds a diffusers model.
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    if "diffusers" in sys.modules:
        from diffusers.utils import logging as diffusers_logging

        diffusers_logging.set_verbosity_error()
        diffusers_logging.disable_progress_bar()
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    import torch._dynamo

    # Dynamo keeps the user stack of every side effect it replays only to log it; extracting
    # those stacks (source lines read from disk) cost 0.3 s of a first compile (measured).
    torch._dynamo.config.side_effect_replay_policy = "silent"


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
