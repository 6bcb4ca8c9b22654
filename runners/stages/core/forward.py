"""The forward stage: one forward pass without gradients, against the CPU."""

from __future__ import annotations

import torch

from ground.schema import Stage
from runners.stages.engine import StageContext, StageRunner, check_close


class ForwardStage(StageRunner):
    """One forward pass without gradients; compared with the CPU when the device is not it."""

    name = Stage.FORWARD

    def run(self, ctx: StageContext) -> None:
        with torch.no_grad():
            outputs = ctx.model(**ctx.inputs)
            ctx.device.synchronize()
            if ctx.compare:
                expected = ctx.reference(**ctx.cpu_inputs)
                check_close(
                    "forward output",
                    expected,
                    outputs,
                    ctx,
                    again=lambda: ctx.reference(**ctx.cpu_inputs),
                )
