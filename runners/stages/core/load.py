"""The load stage: the model built from its shrunk config through its library's adapter,
saved and loaded back the library's way, moved to the device."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import torch

from ground.schema import SkipReason, Stage
from model_configs import build
from runners.stages.engine import StageContext, StageRunner, StageSkipped, cast_inputs


def load_on_host(ctx: StageContext) -> Any:
    """The model as users load it, on the CPU: built from the shrunk config through its
    library's adapter from the run's seed, saved and loaded back the library's way, in the
    run's dtype, in eval mode, with the run's switch of the model's own code if it has one (a
    package it needs missing: a skip)."""
    torch.manual_seed(ctx.seed)
    try:
        built = build.build_model(ctx.spec)
    except ImportError as exc:
        package = build.missing_package(exc)
        if package is None:
            raise
        raise StageSkipped(
            SkipReason.MISSING_PACKAGE,
            f"{ctx.spec.architecture} needs the {package} package, which is not installed",
        ) from exc
    with tempfile.TemporaryDirectory(prefix="hfsweep-load-") as tmp:
        loaded = build.save_and_load(ctx.spec, built, Path(tmp))
    del built
    if ctx.settings.implementation:  # a switch run as an alternative
        from runners.switches import training_switch

        if training_switch(ctx.settings.implementation) is None:  # the model's own code's
            build.set_implementation(ctx.spec, loaded, ctx.settings.implementation)
    return build.to_dtype(ctx.spec, loaded, ctx.dtype).eval()


class LoadStage(StageRunner):
    """Build from the shrunk config through the spec's library adapter, save and load back the
    way that library does (safetensors), move to the device."""

    name = Stage.LOAD

    def run(self, ctx: StageContext) -> None:
        loaded = load_on_host(ctx)
        if ctx.keep_pristine:
            try:
                ctx.pristine = copy.deepcopy(loaded)
            except Exception as exc:  # the training stages say so; loading did not fail
                ctx.pristine = exc
        ctx.param_count = sum(p.numel() for p in loaded.parameters())
        ctx.cpu_inputs = cast_inputs(
            build.make_inputs(ctx.spec, loaded, seed=ctx.seed, purpose="train"), ctx.dtype
        )
        if ctx.compare:
            ctx.reference = loaded
            ctx.model = ctx.device.prepare_model(copy.deepcopy(loaded))
        else:
            ctx.model = ctx.device.prepare_model(loaded)
        ctx.inputs = ctx.device.to_device(ctx.cpu_inputs)
        ctx.device.synchronize()
