"""Turn one model's outcome into store rows (results + per-op fallbacks + the alternatives it was
run again with + its config pair), and its full-size config's sizing into the sizing table's
rows (`sizing.rows`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ground.schema import ALTERNATIVES_SCHEMA
from reports.store import utcnow
from runners.outcome import ModelOutcome
from sweep.plan import Planned, changes_json, config_json


@dataclass(frozen=True)
class RunContext:
    """What every row of a run repeats: the run, the device and the dtype."""

    run_id: str
    device: str
    device_emulated: bool
    device_profile: str | None
    device_profile_hash: str | None
    dtype: str
    device_profile_torch: str | None = None
    device_torch: str | None = None

    @classmethod
    def of(cls, run_id: str, device: Any, dtype: str) -> RunContext:
        """What the rows of run `run_id` on the built `device` repeat."""
        return cls(run_id=run_id, dtype=dtype, **device.identity())


def _base(
    run: RunContext,
    planned: Planned,
    outcome: ModelOutcome,
    *,
    attempt: int,
    dedup_of: str | None,
    task_key: str | None,
    reused_from: str | None,
) -> dict[str, Any]:
    """What every stage row of one model repeats (the results table's columns)."""
    entry, spec = planned.entry, planned.spec
    return {
        "run_id": run.run_id,
        "model_id": entry.model_id,
        "rank": entry.rank,
        "downloads": entry.downloads,
        "library": entry.library or planned.library,
        "pipeline_tag": entry.pipeline_tag,
        "model_type": (spec.model_type if spec else None)
        or planned.model_type
        or (entry.model_type_hint or None),
        "architecture": (spec.architecture if spec else None)
        or (entry.architectures_hint[0] if entry.architectures_hint else None),
        "config_source": (spec.config_source if spec else None) or planned.config_source,
        "quantization": planned.quantization,
        "config_hash": planned.config_hash,
        "shrunk_config_hash": spec.hash if spec else None,
        "param_count": outcome.param_count,
        "wall_s": outcome.timings.get("child_s"),  # set-up, every stage and compile
        "peak_host_memory_bytes": outcome.peak_host_memory_bytes,
        "device": run.device,
        "device_emulated": run.device_emulated,
        "device_profile": run.device_profile,
        "device_profile_hash": run.device_profile_hash,
        "device_profile_torch": run.device_profile_torch,
        "device_torch": run.device_torch,
        "dtype": run.dtype,
        "dedup_of": dedup_of,
        "task_key": task_key,
        "reused_from": reused_from,
        "attempt": attempt,
        "worker": outcome.worker,
        "finished_at": utcnow(),
    }


def model_rows(
    run: RunContext,
    planned: Planned,
    outcome: ModelOutcome,
    *,
    attempt: int = 1,
    dedup_of: str | None = None,
    task_key: str | None = None,
    reused_from: str | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    entry = planned.entry
    base = _base(
        run, planned, outcome, attempt=attempt, dedup_of=dedup_of, task_key=task_key,
        reused_from=reused_from,
    )  # fmt: skip
    results, fallbacks = [], []
    for stage in outcome.stages:
        results.append({**base, **stage.row()})
        for fb in stage.fallbacks:
            fallbacks.append(
                {
                    "run_id": run.run_id,
                    "model_id": entry.model_id,
                    "stage": stage.stage,
                    "device": run.device,
                    "dtype": run.dtype,
                    "downloads": entry.downloads,
                    **fb,
                }
            )
    return results, fallbacks


def alternative_rows(
    run: RunContext,
    planned: Planned,
    outcome: ModelOutcome,
    *,
    attempt: int = 1,
    dedup_of: str | None = None,
    task_key: str | None = None,
    reused_from: str | None = None,
) -> list[dict[str, Any]]:
    """The `alternatives` table's rows of one model: a row per stage of each switch of its
    own code it was run again with (none for a model that passed or was skipped)."""
    if not outcome.alternatives:
        return []
    columns = set(ALTERNATIVES_SCHEMA.names)
    whole = _base(
        run, planned, outcome, attempt=attempt, dedup_of=dedup_of, task_key=task_key,
        reused_from=reused_from,
    )  # fmt: skip
    base = {k: v for k, v in whole.items() if k in columns}
    return [
        {
            **base,
            **{k: v for k, v in stage.row().items() if k in columns},
            "implementation": alt.implementation,
            "wall_s": alt.wall_s,
        }
        for alt in outcome.alternatives
        for stage in alt.stages
    ]


def config_row(run: RunContext, planned: Planned) -> dict[str, Any] | None:
    """The configs row of a model's (original, shrunk) config pair: what its dedup group shares,
    written once per run instead of on every stage row (None for a model never shrunk)."""
    spec = planned.spec
    if spec is None:
        return None
    return {
        "run_id": run.run_id,
        "config_hash": planned.config_hash,
        "shrunk_config_hash": spec.hash,
        "library": spec.library,
        "architecture": spec.architecture,
        "shrink_changes": changes_json(spec),
        "shrunk_config": config_json(spec),
    }


def sizing_rows(
    run: RunContext,
    planned: Planned,
    *,
    context: int | None = None,
    batch: int | None = None,
) -> list[dict[str, Any]]:
    """The sizing rows of a model's full-size config on the run's device (`sizing.rows`).
    None planned: no rows."""
    from sizing.rows import sizing_rows as rows_of

    size = planned.size
    if size is None or planned.config_hash is None:
        return []
    return rows_of(
        size,
        run_id=run.run_id,
        device=run.device,
        config_hash=planned.config_hash,
        config_source=(planned.spec.config_source if planned.spec else None)
        or planned.config_source,
        context=context,
        batch=batch,
    )
