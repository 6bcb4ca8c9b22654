"""The engine that runs a model's stages: the context they share (`StageContext`), the runner
interface (`StageRunner`), a stage's outcome as a `StageResult` in the closed status vocabulary
(`run_stage`, `_classify`: status, duration, error type, short message, signature, fallbacks),
the stages in run order with their needs (`run_stages`: a stage that does not pass makes the
stages that build on it `not_run`), and the comparison with the CPU reference (`check_close`).
Which stages there are, and what each needs, is the registry's (`runners/stages/__init__.py`).
Stages never deal with device specifics: those live in the Device.
"""

from __future__ import annotations

import gc
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import torch

from ground.errors import is_environment_error, safe_text
from ground.schema import SkipReason, Stage, Status
from model_configs.spec import TinySpec
from runners import faults
from runners import stages as registry
from runners.containment import out_of_memory
from runners.devices.base import Device, FallbackLog
from runners.outcome import StageResult, not_applicable_result, not_applicable_to
from runners.signature import error_signature, op_in_message, short_message

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


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


class StageSettings(Protocol):
    """What the stages read of their task's settings (`runners.settings.ModelSettings`, which
    the stage registry's declarations shape: the stages import neither)."""

    @property
    def dtype(self) -> str: ...

    @property
    def seed(self) -> int: ...

    @property
    def compile_backend(self) -> str | None: ...

    @property
    def implementation(self) -> str | None: ...

    @property
    def world_size(self) -> int | None: ...


@dataclass
class StageContext:
    """What stages share for one model on one device."""

    spec: TinySpec
    device: Device
    settings: StageSettings  # the run's, as the CLI built them
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
    # how this process runs a stage on a group of ranks (`own_result` of a stage declared
    # `on_ranks`): `run_model`'s runs it on a fresh group; None in a rank
    on_ranks: Callable[[TinySpec, Any, Stage], StageResult] | None = None

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


def stage_runner(stage: Stage) -> type[StageRunner]:
    """The runner class the registry declares for `stage` (imported on first use)."""
    target = registry.declarations()[stage].runner
    runner: type[StageRunner] = registry.load_target(target)  # type: ignore[assignment]
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
    ctx.keep_pristine = ctx.keep_pristine or registry.copies_weights(stages)
    for result in _stage_results(ctx, stages):
        if on_stage is not None:
            on_stage(result)
        yield result


def _stage_results(ctx: StageContext, stages: list[Stage]) -> Iterator[StageResult]:
    results: list[StageResult] = []
    not_passed: list[Stage] = []  # in order: what makes the stages building on them not_run
    skipped: StageResult | None = None  # a skip with a reason skips every later stage too
    wanted = set(stages)
    needs = registry.stage_needs()
    for stage in registry.stage_order():
        if stage not in wanted:
            continue
        runner = stage_runner(stage)()
        blocked_by = next((s.value for s in not_passed if s in needs[stage]), None)
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
        **{k: v for k, v in ctx.extra.items() if k in registry.extra_columns()},
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


def release(ctx: StageContext) -> None:
    """Drop the model and its caches so a long-lived worker does not grow."""
    ctx.model = ctx.reference = ctx.pristine = None
    ctx.inputs = ctx.cpu_inputs = {}
    ctx.step_log = None
    gc.collect()
