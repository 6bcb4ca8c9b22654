"""The shape stages (docs/stages-shapes.md): what a static-shape compiler means for a model.

- `shapes`: the forward compiled with the device's compile options (`dynamic` as the device
  says: False on neuron) and run at its inputs, at a sequence twice and three times as long
  and at twice the batch (`model_configs.input_shapes`; a variant the model refuses eagerly
  is left out). It records the graphs compiled, the recompiles with Dynamo's reasons (its
  guard failures) and a verdict (`ShapeVerdict`): `static` when a third sequence length
  compiles a graph again (one graph per input shape), `dynamic` when it reuses one,
  `data_dependent` when the graph breaks at an op whose output size depends on values (the
  op named), `rejected` when the device's compiler refuses a later shape (the stage fails
  with its error: the emulated neuron device's static-shape error, as TorchNeuron's);
- `generate_compiled`: greedy `generate` with a static KV cache and the forward compiled by
  the device's backend, the library's own way (`Adapter.compiled_generate`; transformers':
  `cache_implementation="static"` and a `CompileConfig`), twice: the first call warms up, the second's recompiles are recorded (0
  for a model whose static cache works); its tokens must equal eager greedy decoding's on
  the same weights (else `fail_accuracy`). Fallbacks are recorded as in every stage.
What differs between devices (backend, `dynamic`, what the compiler reports and raises) comes
from the Device (`compile_options`, `compiling`); no device is named here.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import torch

from ground.schema import ShapeVerdict, SkipReason, Stage
from model_configs import build
from model_configs.input_shapes import larger_batch, longer_sequence
from runners.stages.core.compile import RecompileWatch
from runners.stages.core.generate import GENERATE_TOKENS
from runners.stages.engine import (
    AccuracyError,
    StageContext,
    StageRunner,
    StageSkipped,
    cast_inputs,
)

MAX_REASONS = 8  # recompile reasons kept per row
# Dynamo's graph-break messages for an op whose output size or value depends on its input's
# values (not data-dependent branching, which is control flow, not a shape)
_DATA_DEPENDENT = re.compile(
    r"Dynamic shape operator|Data dependent operator|depends on input Tensor data|"
    r"Tensor\.item\(\)|Tensor\.tolist\(\)",
)
_OP = re.compile(r"aten\.([A-Za-z0-9_]+)(?:\.([A-Za-z0-9_]+))?")


def _compile(ctx: StageContext) -> tuple[Any, RecompileWatch]:
    """The forward compiled with the run's backend and the device's `dynamic`."""
    watch = RecompileWatch(ctx.compile_backend)
    options = ctx.device.compile_options()
    dynamic = options.dynamic if ctx.compile_backend == options.backend else None
    return torch.compile(ctx.model, backend=watch, dynamic=dynamic), watch


def recompile_reasons() -> list[str]:
    """Dynamo's guard failures since its last reset, each once (frame ids dropped)."""
    from torch._dynamo.utils import guard_failures

    seen: dict[str, None] = {}
    for reasons in guard_failures.values():
        for reason in reasons:
            seen[str(reason).split(": ", 1)[-1]] = None
    return list(seen)[:MAX_REASONS]


def data_dependent_op(break_reasons: list[str]) -> str | None:
    """The op (`aten::name.overload`) a data-dependent graph break names (the first that names
    one), "" when such breaks name none (`Tensor.item()`), None when no break is one."""
    found: str | None = None
    for reason in break_reasons:
        if _DATA_DEPENDENT.search(reason):
            op = _OP.search(reason)
            if op is not None:
                name, overload = op.groups()
                return f"aten::{name}" + (f".{overload}" if overload else "")
            found = ""
    return found


def _variants(inputs: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None]]:
    return [
        ("sequence x2", longer_sequence(inputs, 2)),
        ("sequence x3", longer_sequence(inputs, 3)),
        ("batch x2", larger_batch(inputs, 2)),
    ]


class ShapesStage(StageRunner):
    """The compiled forward at new input shapes: graphs, recompiles, the compile rule."""

    name: ClassVar[Stage] = Stage.SHAPES

    def run(self, ctx: StageContext) -> None:
        import torch._dynamo as dynamo
        from torch._dynamo.utils import counters

        shapes: list[tuple[str, dict[str, Any]]] = [("as loaded", ctx.inputs)]
        left_out = []
        with torch.no_grad():
            for label, variant in _variants(ctx.inputs):
                if variant is None:
                    continue
                try:  # the model itself must take the shape (eagerly) for it to count
                    ctx.model(**variant)
                except Exception:
                    left_out.append(label)
                    continue
                shapes.append((label, variant))
        if len(shapes) == 1:
            raise StageSkipped(
                SkipReason.NOT_APPLICABLE,
                f"the model takes no other input shape eagerly ({', '.join(left_out) or 'none'}"
                " tried)",
            )
        dynamo.reset()
        counters.clear()
        compiled, watch = _compile(ctx)
        done: list[str] = []
        seen: dict[str, Any] = {}
        third_recompiled = False
        try:
            with ctx.device.compiling() as seen, torch.no_grad():
                for label, inputs in shapes:
                    before = watch.recompiles
                    try:
                        compiled(**inputs)
                    except Exception as exc:
                        if done:  # the first shape compiled: the compiler refused a later one
                            ctx.extra["shape_verdict"] = ShapeVerdict.REJECTED.value
                        inner = getattr(exc, "inner_exception", None)  # the backend's own
                        if isinstance(exc, dynamo.exc.BackendCompilerFailed) and isinstance(
                            inner, Exception
                        ):
                            raise inner from exc
                        raise
                    ctx.device.synchronize()
                    if label == "sequence x3":
                        third_recompiled = watch.recompiles > before
                    done.append(label)
        finally:
            breaks = [str(r) for r in counters["graph_break"]]
            ctx.extra.update(
                {k: v for k, v in seen.items() if k in ("partition_count", "compile_evidence")}
            )
            ctx.extra["graph_count"] = int(counters["stats"].get("unique_graphs", 0))
            ctx.extra["graph_break_count"] = int(sum(counters["graph_break"].values()))
            ctx.extra["recompile_count"] = watch.recompiles
            ctx.extra["recompile_reasons"] = recompile_reasons() or None
            dynamo.reset()
        op = data_dependent_op(breaks)
        if op is not None:
            ctx.extra["shape_verdict"] = ShapeVerdict.DATA_DEPENDENT.value
            ctx.extra["failing_op"] = op or None
        else:  # a third length tells; without one, a recompile per new shape is static
            static = (
                third_recompiled if "sequence x3" in done else watch.recompiles >= len(done) - 1
            )
            verdict = ShapeVerdict.STATIC if static else ShapeVerdict.DYNAMIC
            ctx.extra["shape_verdict"] = verdict.value


class GenerateCompiledStage(StageRunner):
    """Greedy generation with a static KV cache and the compiled forward, against eager."""

    name: ClassVar[Stage] = Stage.GENERATE_COMPILED

    def applies(self, ctx: StageContext) -> bool:
        return ctx.spec.generative and callable(getattr(ctx.model, "generate", None))

    def run(self, ctx: StageContext) -> None:
        import torch._dynamo as dynamo
        from torch._dynamo.utils import counters

        from model_configs.libraries.base import NoCompiledGenerate

        watch = RecompileWatch(ctx.compile_backend)
        options = ctx.device.compile_options()
        dynamic = options.dynamic if ctx.compile_backend == options.backend else None
        try:
            compiled_options = build.compiled_generate(
                ctx.spec, ctx.model, backend=watch, dynamic=dynamic
            )
        except NoCompiledGenerate as exc:
            raise StageSkipped(SkipReason.NOT_APPLICABLE, str(exc)) from exc
        host_model = ctx.reference if ctx.reference is not None else ctx.model
        cpu_inputs = cast_inputs(
            build.make_inputs(ctx.spec, host_model, seed=ctx.seed, purpose="generate"), ctx.dtype
        )
        inputs = ctx.device.to_device(cpu_inputs)
        greedy = {
            "max_new_tokens": GENERATE_TOKENS,
            "min_new_tokens": GENERATE_TOKENS,
            "do_sample": False,
        }
        with torch.no_grad():
            eager = _sequences(ctx.model.generate(**inputs, **greedy))
        dynamo.reset()
        counters.clear()
        compiled_run = {**greedy, **compiled_options}
        seen: dict[str, Any] = {}
        try:
            with ctx.device.compiling() as seen, torch.no_grad():
                _sequences(ctx.model.generate(**inputs, **compiled_run))  # warm-up
                warm_graphs = int(counters["stats"].get("unique_graphs", 0))
                warm_recompiles = watch.recompiles
                compiled = _sequences(ctx.model.generate(**inputs, **compiled_run))
            ctx.device.synchronize()
        finally:
            ctx.extra.update(
                {k: v for k, v in seen.items() if k in ("partition_count", "compile_evidence")}
            )
            ctx.extra["recompile_reasons"] = recompile_reasons() or None
            dynamo.reset()
        if warm_graphs == 0:
            raise RuntimeError(
                "generate ran without compiling the forward (its cache was not a static one)"
            )
        ctx.extra["graph_count"] = warm_graphs
        ctx.extra["recompile_count"] = watch.recompiles - warm_recompiles  # after warm-up
        ctx.extra["graph_break_count"] = int(sum(counters["graph_break"].values()))
        if compiled.shape != eager.shape or not torch.equal(compiled.cpu(), eager.cpu()):
            differ = _first_difference(eager.cpu(), compiled.cpu())
            raise AccuracyError(
                f"compiled greedy decoding with a static cache gives other tokens than eager "
                f"greedy decoding ({differ})",
                None,
            )


def _sequences(out: Any) -> torch.Tensor:
    sequences = out if isinstance(out, torch.Tensor) else getattr(out, "sequences", None)
    if sequences is None or sequences.shape[-1] < 1:
        raise RuntimeError("generate returned no tokens")
    return sequences


def _first_difference(a: torch.Tensor, b: torch.Tensor) -> str:
    if a.shape != b.shape:
        return f"shapes {tuple(a.shape)} and {tuple(b.shape)}"
    where = (a != b).nonzero()
    row, col = (int(x) for x in where[0])
    return f"first at sequence {row}, position {col}: {int(a[row, col])} vs {int(b[row, col])}"
