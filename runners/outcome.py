"""Stage outcomes as plain data (no torch): what a runner returns and the driver turns into rows.

Also the outcomes of models that never reach a device: skipped before running, or failed while
being prepared (shrinking), so that every model asked for gets one row per stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ground.schema import STAGE_ORDER, SkipReason, Stage, Status
from runners.signature import error_signature, op_in_message, short_message


@dataclass
class StageResult:
    """One stage's outcome, without run/model metadata (the driver adds those)."""

    stage: str
    status: str
    reason: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    error_signature: str | None = None
    failing_op: str | None = None
    duration_s: float | None = None
    fallback_op_count: int = 0
    fallback_call_count: int = 0
    bytes_h2d: int = 0
    bytes_d2h: int = 0
    max_abs_error: float | None = None
    compile_mode: str | None = None  # the device's compile mode (raise / eager / partition)
    compile_evidence: str | None = None  # CompileEvidence of the compile verdict
    unverified_ops: list[str] | None = None  # graph ops no evidence decides
    graph_count: int | None = None
    graph_break_count: int | None = None
    recompile_count: int | None = None
    recompile_reasons: list[str] | None = None  # shapes / generate_compiled: Dynamo's guards
    shape_verdict: str | None = None  # shapes: a ShapeVerdict value
    partition_count: int | None = None
    compile_s: float | None = None
    step_s: float | None = None
    step_op_calls: int | None = None  # optimizer stages: native calls of the optimizer's part
    peak_memory_bytes: int | None = None
    # the distributed stages (`ground.schema.RESULTS_SCHEMA` says what each holds)
    world_size: int | None = None
    collectives: list[dict[str, Any]] | None = None
    rank_peak_memory_bytes: list[int | None] | None = None
    unsharded_peak_memory_bytes: int | None = None
    failed_rank: int | None = None
    sharding_evidence: str | None = None
    # the hf_training stages (`ground.schema.RESULTS_SCHEMA` says what each holds)
    trained_on: str | None = None
    hf_settings: str | None = None
    library_frame: str | None = None
    fallbacks: list[dict[str, Any]] = field(default_factory=list)  # op, count, bytes, source

    def row(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data.pop("fallbacks")
        return data


@dataclass
class AlternativeRun:
    """The model run again with one switch of its own code (`implementation`,
    `experts_implementation=batched_mm`) after its default failed: its stages, in its own
    process, and that process's wall seconds."""

    implementation: str
    stages: list[StageResult]
    wall_s: float | None = None

    @property
    def passed(self) -> bool:
        return all(
            s.status == Status.PASS.value
            or (s.status == Status.SKIP.value and s.reason == SkipReason.NOT_APPLICABLE.value)
            for s in self.stages
        )


@dataclass
class ModelOutcome:
    """Everything one model's run produced (picklable: it crosses Ray)."""

    stages: list[StageResult]
    param_count: int | None = None
    worker: str | None = None
    # where the time went outside the stages (seconds): the child process from start to join
    # (`child_s`), its set-up before the first stage (`setup_s`), the stages' own (`stages_s`)
    timings: dict[str, float] = field(default_factory=dict)
    # the peak resident host memory of the process that ran the model (None: not measured)
    peak_host_memory_bytes: int | None = None
    # after a failure: the model run again with switches of its own code (runners/alternatives)
    alternatives: list[AlternativeRun] = field(default_factory=list)


def ordered(stages: list[Stage] | list[str]) -> list[Stage]:
    wanted = {Stage(s) for s in stages}
    return [s for s in STAGE_ORDER if s in wanted]


def skipped(stages: list[Stage] | list[str], reason: str, message: str) -> ModelOutcome:
    """Every stage a skip with the same reason: the model is still counted."""
    return ModelOutcome(
        [
            StageResult(
                stage=s.value,
                status=Status.SKIP.value,
                reason=reason,
                error_message=short_message(message),
            )
            for s in ordered(stages)
        ]
    )


def not_applicable_result(stage: str, architecture: str | None = None) -> StageResult:
    """A stage that does not apply to the model: `skip` / `not_applicable` (read `n/a`)."""
    return StageResult(
        stage=stage,
        status=Status.SKIP.value,
        reason=SkipReason.NOT_APPLICABLE.value,
        error_message=f"{stage} does not apply to {architecture or 'this model'}",
    )


def not_applicable_to(spec: Any) -> frozenset[str]:
    """The stages the tiny model's spec alone says do not apply, whatever ran before them:
    generate on a model that does not generate (its row is `skip` / `not_applicable`, never
    `not_run`, so every view reads it as `n/a`)."""
    if spec is not None and not getattr(spec, "generative", True):
        return frozenset({Stage.GENERATE.value})
    return frozenset()


def failed_before(
    stages: list[Stage] | list[str],
    status: Status,
    error_type: str,
    message: str,
    *,
    duration_s: float | None = None,
    not_applicable: frozenset[str] = frozenset(),
) -> ModelOutcome:
    """The first stage has `status` (fail / timeout / crash / oom), the rest not_run (or
    not applicable: `not_applicable`, from `not_applicable_to`)."""
    order = ordered(stages)
    results = []
    for i, stage in enumerate(order):
        if i and stage.value in not_applicable:
            results.append(not_applicable_result(stage.value))
            continue
        if i == 0:
            results.append(
                StageResult(
                    stage=stage.value,
                    status=status.value,
                    error_type=error_type,
                    error_message=short_message(message),
                    error_signature=error_signature(error_type, message),
                    failing_op=op_in_message(message),
                    duration_s=duration_s,
                )
            )
        else:
            results.append(
                StageResult(
                    stage=stage.value,
                    status=Status.NOT_RUN.value,
                    error_message=f"{order[0].value} did not pass",
                )
            )
    return ModelOutcome(results)
