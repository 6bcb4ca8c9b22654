"""The backward stage: a real loss, backward, gradients against the CPU's."""

from __future__ import annotations

import math
from typing import Any

from ground.schema import Stage
from model_configs import build
from model_configs.grad_coverage import grad_coverage, watch_grad_mode
from model_configs.pass_rule import grad_failure
from runners.stages.engine import StageContext, StageRunner, check_close


class BackwardStage(StageRunner):
    """A real loss, backward, finite gradients reaching the parameters (eval mode: no dropout)."""

    name = Stage.BACKWARD

    def run(self, ctx: StageContext) -> None:
        ctx.model.zero_grad(set_to_none=True)
        with watch_grad_mode(ctx.model) as watch:
            outputs = ctx.model(**ctx.inputs)
        loss = build.compute_loss(ctx.spec, ctx.model, outputs, ctx.inputs)
        if not math.isfinite(float(loss.detach().float().cpu())):
            raise FloatingPointError(f"loss is not finite: {float(loss.detach().float().cpu())}")
        loss.backward()
        ctx.device.synchronize()
        coverage = grad_coverage(ctx.model, watch)
        ctx.extra["grad_share"] = coverage.share
        failure = grad_failure(coverage.share)
        if failure is not None:
            raise RuntimeError(f"{failure} (none reached {', '.join(coverage.missed[:3])})")
        if ctx.compare:
            expected = reference_gradients(ctx)
            actual = {n: p.grad for n, p in ctx.model.named_parameters() if n in expected}
            check_close("gradients", expected, actual, ctx, again=lambda: reference_gradients(ctx))
        ctx.model.zero_grad(set_to_none=True)


def reference_gradients(ctx: StageContext) -> dict[str, Any]:
    """The CPU reference's parameter gradients of one loss, by name."""
    ctx.reference.zero_grad(set_to_none=True)
    ref_out = ctx.reference(**ctx.cpu_inputs)
    build.compute_loss(ctx.spec, ctx.reference, ref_out, ctx.cpu_inputs).backward()
    return {n: p.grad for n, p in ctx.reference.named_parameters() if p.grad is not None}
