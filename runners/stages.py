"""The stages one model goes through on a device: load, forward, backward, compile, generate,
and the training stages (`runners/training.py`: optimizer, optimizer_fused, amp, lora).

Each stage is a class with a `name` and a `run(ctx)` that raises on failure; `run_stages` turns
every outcome into a `StageResult` (status from the closed vocabulary, duration, error type,
short message, signature, fallbacks). A stage that does not pass makes the stages that build on
it `not_run` (`STAGE_NEEDS`). Stages never deal with device specifics: those live in the Device.
"""

from __future__ import annotations

import copy
import gc
import importlib
import math
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from ground.errors import is_environment_error, safe_text
from ground.schema import (
    HF_TRAINING_STAGES,
    STAGE_NEEDS,
    TRAINING_STAGES,
    SkipReason,
    Stage,
    Status,
)
from model_configs import build
from model_configs.grad_coverage import grad_coverage, watch_grad_mode
from model_configs.pass_rule import grad_failure
from model_configs.spec import TinySpec
from runners import faults
from runners.containment import out_of_memory
from runners.devices.base import Device, FallbackLog
from runners.outcome import StageResult, not_applicable_result, not_applicable_to
from runners.settings import ModelSettings
from runners.signature import error_signature, op_in_message, short_message

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
GENERATE_TOKENS = 3


class AccuracyError(Exception):
    """Outputs or gradients differ from the CPU reference beyond the dtype's tolerance."""

    def __init__(self, message: str, max_abs_error: float | None):
        super().__init__(message)
        self.max_abs_error = max_abs_error


class StageSkipped(Exception):
    """The stage does not apply to this model (a skip with a reason, not a failure)."""

    def __init__(self, reason: SkipReason, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass
class StageContext:
    """What stages share for one model on one device."""

    spec: TinySpec
    device: Device
    settings: ModelSettings  # the run's, as the CLI built them
    compare: bool  # compare against a CPU reference (devices other than the CPU)
    model: Any = None
    reference: Any = None  # the same weights on the CPU, for numerics
    # the loaded weights on the CPU, untouched by any stage: what each training stage copies
    # (kept when a training stage is asked for; a model that ran caches tensors of its own)
    pristine: Any = None
    keep_pristine: bool = False
    inputs: dict[str, Any] = field(default_factory=dict)  # on the device
    cpu_inputs: dict[str, Any] = field(default_factory=dict)
    param_count: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # per-stage metrics for the row
    # the optimizer's part of a training step, recorded apart (`FallbackSource.OPTIMIZER`)
    step_log: FallbackLog | None = None

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.settings.dtype]

    @property
    def seed(self) -> int:
        return self.settings.seed

    @property
    def compile_backend(self) -> str:
        """The run's `--compile-backend`, else the device's own."""
        return self.settings.compile_backend or self.device.compile_backend


class StageRunner(ABC):
    name: ClassVar[Stage]

    def applies(self, ctx: StageContext) -> bool:
        return True

    def prepare(self, ctx: StageContext) -> None:
        """Set-up that is not what the stage measures (fresh copies of the weights): run before
        its fallback recording starts (its time counts in the stage's); raises like `run`."""
        return None

    def own_result(self, ctx: StageContext) -> StageResult | None:
        """The whole result of a stage that runs elsewhere (the distributed stages: a group of
        rank processes); None: it runs here, `prepare` then `run`."""
        return None

    @abstractmethod
    def run(self, ctx: StageContext) -> None:
        """Do the stage; raise on failure. Metrics go to `ctx.extra`."""


def cast_inputs(inputs: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    """Floating-point inputs in the run's dtype (also inside mappings and sequences)."""

    def cast(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.to(dtype)
        if isinstance(value, dict):
            return {k: cast(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(cast(v) for v in value)
        return value

    return {k: cast(v) for k, v in inputs.items()}


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


# The stage registry: each Stage (in `Stage` order) -> its runner class, as a lazy
# "module:attr" target (the training stages build on this module's classes).
STAGES: dict[Stage, str] = {
    Stage.LOAD: "runners.stages:LoadStage",
    Stage.FORWARD: "runners.stages:ForwardStage",
    Stage.BACKWARD: "runners.stages:BackwardStage",
    Stage.COMPILE: "runners.stages:CompileStage",
    Stage.GENERATE: "runners.stages:GenerateStage",
    Stage.OPTIMIZER: "runners.training:OptimizerStage",
    Stage.OPTIMIZER_FUSED: "runners.training:FusedOptimizerStage",
    Stage.AMP: "runners.training:AmpStage",
    Stage.LORA: "runners.training:LoraStage",
    Stage.SHAPES: "runners.shape_stages:ShapesStage",
    Stage.GENERATE_COMPILED: "runners.shape_stages:GenerateCompiledStage",
    Stage.DDP: "runners.distributed.stages:DdpStage",
    Stage.FSDP: "runners.distributed.stages:FsdpStage",
    Stage.TP: "runners.distributed.stages:TpStage",
    Stage.TRAINER: "runners.hf_training:TrainerStage",
    Stage.TRAINER_COMPILED: "runners.hf_training:CompiledTrainerStage",
    Stage.SFT: "runners.hf_training:SftStage",
    Stage.ACCELERATE_DDP: "runners.distributed.accelerate_ddp:AccelerateDdpStage",
}


def stage_runner(stage: Stage) -> type[StageRunner]:
    """The runner class registered for `stage`."""
    module, _, attr = STAGES[stage].partition(":")
    runner: type[StageRunner] = getattr(importlib.import_module(module), attr)
    return runner


def check_close(
    what: str,
    expected: Any,
    actual: Any,
    ctx: StageContext,
    *,
    tol: Any = None,
    again: Callable[[], Any] | None = None,
) -> None:
    """Raise `AccuracyError` when `actual` differs from the CPU's `expected` beyond the run
    dtype's tolerance (or `tol`, a `runners.numerics.Tolerance`); the error goes to the row.

    `again` computes `expected` once more on the CPU: when they differ and the reference,
    computed again from another random state, differs from itself too (a forward that draws
    random numbers, as a sampling VAE does), the device cannot be judged against it: no
    verdict, and no `max_abs_error` (not measured)."""
    try:
        from runners.numerics import compare_tensors
    except ImportError:  # numerics not installed in this build: record nothing
        return
    result = compare_tensors(expected, actual, ctx.dtype, tol=tol)
    if not result.ok and again is not None and not _reproduces(expected, again, ctx, tol):
        ctx.extra["not_compared"] = what
        return
    ctx.extra["max_abs_error"] = max(ctx.extra.get("max_abs_error") or 0.0, result.max_abs_error)
    if not result.ok:
        raise AccuracyError(
            f"{what} differ from the CPU reference: max abs error {result.max_abs_error:.3g} "
            f"at {result.worst_name}",
            result.max_abs_error,
        )


def _reproduces(expected: Any, again: Callable[[], Any], ctx: StageContext, tol: Any) -> bool:
    """Whether the CPU reference gives `expected` again when computed from another random
    state (the caller's random state is left as it was)."""
    from runners.numerics import compare_tensors

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(ctx.seed + 1)
        second = again()
    return compare_tensors(expected, second, ctx.dtype, tol=tol).ok


def failing_op(exc: BaseException) -> str | None:
    """The op an error names (`op`), also through Dynamo's wrapper (`BackendCompilerFailed`
    keeps the backend's error as `inner_exception`) and exception chains."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        try:  # a hostile exception's attributes may raise
            op = getattr(current, "op", None)
            inner = getattr(current, "inner_exception", None)
        except Exception:
            return None
        if isinstance(op, str) and op:
            return op
        current = (inner if isinstance(inner, BaseException) else None) or current.__cause__
    return None


def _classify(exc: BaseException) -> Status:
    if isinstance(exc, AccuracyError):
        return Status.FAIL_ACCURACY
    if out_of_memory(exc):  # the model's memory budget, or the device's memory, ran out
        return Status.OOM
    return Status.FAIL


def _fallback_rows(
    log: FallbackLog, device: Device, step_log: FallbackLog | None = None
) -> list[dict[str, Any]]:
    """One row per op and source. An op that fell back only in the optimizer's part of a
    training step (`step_log`) is `optimizer`; one that also fell back outside it `eager`.
    `evidence`: what the verdict rests on where it is not the device's own word."""
    step = step_log.ops if step_log is not None else {}
    step_only = {op for op, e in step.items() if op in log.ops and log.ops[op].count == e.count}
    rows = [
        {
            "op": op,
            "count": e.count,
            "bytes_h2d": e.bytes_h2d,
            "bytes_d2h": e.bytes_d2h,
            "source": "optimizer" if op in step_only else "eager",
            "evidence": device.fallback_evidence(op),
        }
        for op, e in sorted(log.ops.items())
    ]
    rows += [
        {
            "op": op,
            "count": e.count,
            "bytes_h2d": 0,
            "bytes_d2h": 0,
            "source": "compile",
            "evidence": device.fallback_evidence(op),
        }
        for op, e in sorted(log.compile_ops.items())
    ]
    return rows


def run_stages(
    ctx: StageContext,
    stages: list[Stage],
    *,
    on_stage: Callable[[StageResult], None] | None = None,
) -> Iterator[StageResult]:
    """Run the requested stages in order, yielding one StageResult per requested stage
    (`on_stage` sees each as soon as it is known, before the next stage starts)."""
    ctx.keep_pristine = ctx.keep_pristine or any(
        s in TRAINING_STAGES or s in HF_TRAINING_STAGES for s in stages
    )
    for result in _stage_results(ctx, stages):
        if on_stage is not None:
            on_stage(result)
        yield result


def _stage_results(ctx: StageContext, stages: list[Stage]) -> Iterator[StageResult]:
    results: list[StageResult] = []
    not_passed: list[Stage] = []  # in order: what makes the stages building on them not_run
    skipped: StageResult | None = None  # a skip with a reason skips every later stage too
    wanted = set(stages)
    for stage in STAGES:
        if stage not in wanted:
            continue
        runner = stage_runner(stage)()
        blocked_by = next((s.value for s in not_passed if s in STAGE_NEEDS[stage]), None)
        if skipped is not None:
            results.append(
                StageResult(
                    stage=stage.value,
                    status=Status.SKIP.value,
                    reason=skipped.reason,
                    error_message=skipped.error_message,
                )
            )
            yield results[-1]
            continue
        if blocked_by is not None and stage.value in not_applicable_to(ctx.spec):
            results.append(
                not_applicable_result(stage.value, ctx.spec.architecture)
            )  # n/a, not not_run
            yield results[-1]
            continue
        if blocked_by is not None:
            results.append(
                StageResult(
                    stage=stage.value,
                    status=Status.NOT_RUN.value,
                    error_message=f"{blocked_by} did not pass",
                )
            )
            not_passed.append(stage)
            yield results[-1]
            continue
        if not runner.applies(ctx):
            results.append(not_applicable_result(stage.value, ctx.spec.architecture))
            yield results[-1]
            continue
        results.append(runner.own_result(ctx) or run_stage(runner, ctx))
        yield results[-1]
        if results[-1].status == Status.SKIP.value and stage is Stage.LOAD:
            skipped = results[-1]
        elif results[-1].status != Status.PASS.value:
            not_passed.append(stage)


def _skip_result(runner: StageRunner, exc: StageSkipped) -> StageResult:
    return StageResult(
        stage=runner.name.value,
        status=Status.SKIP.value,
        reason=exc.reason.value,
        error_message=str(exc),
    )


def run_stage(runner: StageRunner, ctx: StageContext) -> StageResult:
    """Run one stage here (`prepare`, then `run` under the device's fallback recording) and
    turn its outcome into a result in the closed status vocabulary."""
    ctx.extra = {}
    ctx.step_log = None
    error: BaseException | None = None
    start = time.perf_counter()  # the stage's time includes its set-up (what it costs a sweep)
    try:
        runner.prepare(ctx)
    except StageSkipped as exc:
        return _skip_result(runner, exc)
    except Exception as exc:  # a model's failure is data, never an exception
        if is_environment_error(exc):
            raise  # the machine failed, not the model: the task is retried, no row
        error = exc
    ctx.device.reset_peak_memory()
    with ctx.device.record_fallbacks() as log:
        try:
            if error is None:
                faults.inject_spec(f"stage:{runner.name.value}", ctx.spec)
                runner.run(ctx)
        except StageSkipped as exc:
            return _skip_result(runner, exc)
        except Exception as exc:  # a model's failure is data, never an exception
            if is_environment_error(exc):
                raise  # the machine failed, not the model: the task is retried, no row
            error = exc
    duration = time.perf_counter() - start
    if error is None:
        error = ctx.device.fallback_error(log)  # strict mode on devices that learn afterwards
    result = StageResult(
        stage=runner.name.value,
        status=Status.PASS.value,
        compile_mode=ctx.device.compile_mode,
        duration_s=duration,
        fallback_op_count=log.op_count,
        fallback_call_count=log.call_count,
        bytes_h2d=log.bytes_h2d,
        bytes_d2h=log.bytes_d2h,
        peak_memory_bytes=ctx.device.peak_memory_bytes(),
        fallbacks=_fallback_rows(log, ctx.device, ctx.step_log),
        **{k: v for k, v in ctx.extra.items() if k in _EXTRA_COLUMNS},
    )
    if error is not None:
        message = safe_text(error) or type(error).__name__
        result.status = _classify(error).value
        result.error_type = type(error).__name__
        result.error_message = short_message(message)
        result.error_signature = error_signature(result.error_type, message)
        result.failing_op = failing_op(error) or op_in_message(message)
        if isinstance(error, AccuracyError):
            result.max_abs_error = error.max_abs_error
    return result


_EXTRA_COLUMNS = {
    "max_abs_error",
    "graph_count",
    "graph_break_count",
    "recompile_count",
    "partition_count",
    "compile_evidence",
    "unverified_ops",
    "compile_s",
    "step_s",
    "step_op_calls",
    "recompile_reasons",
    "shape_verdict",
    "failing_op",  # the op a passing stage's verdict names (shapes: a data-dependent op)
    "world_size",
    "collectives",
    "unsharded_peak_memory_bytes",
    "sharding_evidence",
    "trained_on",
    "hf_settings",
    "library_frame",
}


def release(ctx: StageContext) -> None:
    """Drop the model and its caches so a long-lived worker does not grow."""
    ctx.model = ctx.reference = ctx.pristine = None
    ctx.inputs = ctx.cpu_inputs = {}
    ctx.step_log = None
    gc.collect()
