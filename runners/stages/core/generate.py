"""The generate stage: a few greedy tokens, for generative models only."""

from __future__ import annotations

import torch

from ground.schema import Stage
from model_configs import build
from runners.stages.engine import StageContext, StageRunner, cast_inputs

GENERATE_TOKENS = 3


class GenerateStage(StageRunner):
    """A few greedy tokens, for generative models only."""

    name = Stage.GENERATE

    def applies(self, ctx: StageContext) -> bool:
        return ctx.spec.generative and callable(getattr(ctx.model, "generate", None))

    def run(self, ctx: StageContext) -> None:
        # inputs are built on the host: some recipes run the model (image token counts), so
        # they get the CPU copy when there is one
        host_model = ctx.reference if ctx.reference is not None else ctx.model
        cpu_inputs = cast_inputs(
            build.make_inputs(ctx.spec, host_model, seed=ctx.seed, purpose="generate"), ctx.dtype
        )
        inputs = ctx.device.to_device(cpu_inputs)
        with torch.no_grad():
            out = ctx.model.generate(
                **inputs, max_new_tokens=GENERATE_TOKENS, min_new_tokens=1, do_sample=False
            )
        ctx.device.synchronize()
        sequences = out if isinstance(out, torch.Tensor) else getattr(out, "sequences", None)
        if sequences is None or sequences.shape[-1] < 1:
            raise RuntimeError("generate returned no tokens")
