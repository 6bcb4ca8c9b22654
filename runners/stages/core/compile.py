"""The compile stage: a training step through `torch.compile` with the device's backend,
and the Dynamo backend that counts recompiles (the shape stages use it too)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from ground.schema import Stage
from model_configs import build
from runners.stages.engine import StageContext, StageRunner


class CompileStage(StageRunner):
    """`torch.compile` with the device's backend: a training step compiled, then one steady.

    The device's compile options decide `dynamic` (a device may force `dynamic=False`: a new
    shape is then a new graph, a recompile, counted) and its compile mode what a graph op its
    compiler cannot lower does; every row says which mode ran. What the device's compiler
    reports (partitions, the evidence its verdicts rest on) goes into the row."""

    name = Stage.COMPILE

    def run(self, ctx: StageContext) -> None:
        import torch._dynamo as dynamo
        from torch._dynamo.utils import counters

        dynamo.reset()
        counters.clear()
        watch = RecompileWatch(ctx.compile_backend)
        options = ctx.device.compile_options()
        dynamic = options.dynamic if ctx.compile_backend == options.backend else None
        compiled = torch.compile(ctx.model, backend=watch, dynamic=dynamic)

        def step() -> None:
            ctx.model.zero_grad(set_to_none=True)
            outputs = compiled(**ctx.inputs)
            build.compute_loss(ctx.spec, ctx.model, outputs, ctx.inputs).backward()
            ctx.device.synchronize()

        seen: dict[str, Any] = {}
        try:
            with ctx.device.compiling() as seen:  # what the device's compiler reports
                start = time.perf_counter()
                step()
                ctx.extra["compile_s"] = time.perf_counter() - start
                start = time.perf_counter()
                step()
                ctx.extra["step_s"] = time.perf_counter() - start
        except dynamo.exc.BackendCompilerFailed as exc:
            # the backend's own error (it names the op), not Dynamo's wrapper around it
            inner = getattr(exc, "inner_exception", None)
            if isinstance(inner, Exception):
                raise inner from exc
            raise
        finally:
            ctx.extra["recompile_count"] = watch.recompiles
            ctx.extra.update(seen)
        ctx.extra["graph_count"] = int(counters["stats"].get("unique_graphs", 0))
        ctx.extra["graph_break_count"] = int(sum(counters["graph_break"].values()))
        ctx.model.zero_grad(set_to_none=True)
        dynamo.reset()


class RecompileWatch:
    """A Dynamo backend that counts recompiles (a frame compiled again because its guards
    failed, e.g. a new input shape under `dynamic=False`), then hands the graph on."""

    def __init__(self, backend: str | Callable[..., Any]):
        from torch._dynamo.backends.registry import lookup_backend

        self.inner = lookup_backend(backend) if isinstance(backend, str) else backend
        self.frames: set[tuple[int, int]] = set()
        self.recompiles = 0

    def __repr__(self) -> str:  # Dynamo names the backend in its messages
        return getattr(self.inner, "__name__", type(self.inner).__name__)

    def __call__(self, gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        compile_id = torch._guards.CompileContext.current_compile_id()
        if compile_id is not None and compile_id.frame_id is not None:
            frame = (compile_id.frame_id, compile_id.frame_compile_id or 0)
            if frame[1] > 0 and frame not in self.frames:
                self.recompiles += 1
            self.frames.add(frame)
        return self.inner(gm, example_inputs, **kwargs)
