"""Can I shard it on the device? The distributed stages of one run, by models and by downloads.

- per distributed stage (ddp, fsdp, tp): the models and downloads that passed it, out of the
  run's models (skips stay in the base: a model with no tensor-parallel plan counts), with
  those that failed, did not run, or were skipped;
- "no tensor-parallel plan": the models (and downloads) whose library has no plan for them,
  a fact of its own;
- what stops sharding: the collective or op each failed distributed stage names (else its
  error type), ranked by the downloads of the models it blocks, with the stages it stops,
  the evidence its verdict rests on (`sharding_evidence`, the compile evidence vocabulary),
  the failing ranks' statuses and the most downloaded models;
- the world sizes the run used.
"""

from __future__ import annotations

from typing import Any

from ground.schema import SkipReason, Stage
from reports.coverage import share, stage_group
from reports.query import FAILED, IN_DTYPE, Scan, StoreQuery
from runners import stages as stage_registry

SHARDING = tuple(s.value for s in stage_registry.section_stages("sharding"))
LABELS = stage_registry.labels(SHARDING)
NO_PLAN = SkipReason.NO_TP_PLAN.value
_FAILED_SQL = ", ".join(f"'{s}'" for s in FAILED)
_STAGES_SQL = ", ".join(f"'{s}'" for s in SHARDING)


def sharding(q: StoreQuery, run_id: str, dtype: str | None = None) -> dict[str, Any]:
    """The distributed stages of a run (`ran` False when the run asked for none; `dtype`:
    that dtype's rows of a run of several)."""

    def build() -> dict[str, Any]:
        group = stage_group(q, run_id, SHARDING, LABELS, dtype)
        facts = _row_facts(q, run_id, dtype) if group["ran"] else {}
        return {
            **group,
            "world_sizes": facts.get("world_sizes", []),
            "no_plan": facts.get("no_plan", {"models": 0, "downloads": 0}),
            "no_plan_downloads_share": share(
                facts.get("no_plan", {}).get("downloads", 0), group["downloads"]
            ),
            "blockers": blockers(q, run_id, dtype) if group["ran"] else [],
        }

    return q.memo("sharding", run_id, build, dtype)


def _row_facts(q: StoreQuery, run_id: str, dtype: str | None) -> dict[str, Any]:
    scans = {"results_parts": Scan("results", q.files(run_id).results)}
    sizes = q.fetch(
        f"""
        SELECT DISTINCT world_size FROM results_parts
        WHERE stage IN ({_STAGES_SQL}) AND world_size IS NOT NULL AND {IN_DTYPE}
        ORDER BY world_size
        """,
        {"dtype": dtype},
        scans=scans,
    )
    no_plan = q.fetch(
        f"""
        SELECT count(*) AS models, coalesce(sum(downloads), 0) AS downloads,
          list(model_id ORDER BY downloads DESC NULLS LAST, model_id)[1:3] AS top_models
        FROM (SELECT DISTINCT model_id, downloads FROM results_parts
              WHERE stage = '{Stage.TP.value}' AND status = 'skip' AND reason = '{NO_PLAN}'
                AND {IN_DTYPE})
        """,
        {"dtype": dtype},
        scans=scans,
    )[0]
    return {"world_sizes": [r["world_size"] for r in sizes], "no_plan": no_plan}


def blockers(q: StoreQuery, run_id: str, dtype: str | None = None) -> list[dict[str, Any]]:
    """What stops sharding: per collective or op a failed distributed stage names (else its
    error type, in parentheses), the models and downloads it blocks, most downloads first."""
    files = q.files(run_id)
    if not files.results:
        return []
    rows = q.fetch(
        f"""
        WITH f AS (
          SELECT model_id, max(downloads) AS downloads, stage, status, failed_rank,
            coalesce(failing_op, '(' || coalesce(error_type, status) || ')') AS blocker,
            sharding_evidence
          FROM results_parts
          WHERE stage IN ({_STAGES_SQL}) AND status IN ({_FAILED_SQL}) AND {IN_DTYPE}
          GROUP BY ALL
        )
        SELECT blocker AS op,
          count(DISTINCT model_id) AS models,
          coalesce(sum(DISTINCT downloads), 0) AS downloads_upper,
          list(DISTINCT stage ORDER BY stage) AS stages,
          list(DISTINCT status ORDER BY status) AS statuses,
          list(DISTINCT sharding_evidence ORDER BY sharding_evidence)
            FILTER (WHERE sharding_evidence IS NOT NULL) AS evidence,
          list(DISTINCT model_id ORDER BY model_id) AS model_ids
        FROM f GROUP BY blocker
        """,
        {"dtype": dtype},
        scans={"results_parts": Scan("results", files.results)},
    )
    downloads = _downloads_by_model(q, run_id, dtype)
    total = q.run_downloads(run_id, dtype)
    for r in rows:
        r["evidence"] = r["evidence"] or []  # none given: the device declares nothing
        blocked = r.pop("model_ids")
        r["downloads"] = sum(downloads.get(m, 0) for m in blocked)
        r.pop("downloads_upper")
        r["downloads_share"] = share(r["downloads"], total)
        r["top_models"] = sorted(blocked, key=lambda m: (-downloads.get(m, 0), m))[:3]
    rows.sort(key=lambda r: (-r["downloads"], -r["models"], r["op"]))
    return rows


def _downloads_by_model(q: StoreQuery, run_id: str, dtype: str | None) -> dict[str, int]:
    q.ensure_summaries([run_id])
    rows = q.fetch(
        f"SELECT model_id, downloads FROM model_runs WHERE run_id = $run AND {IN_DTYPE}",
        {"run": run_id, "dtype": dtype},
    )
    return {r["model_id"]: int(r["downloads"] or 0) for r in rows}


def model_sharding(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A model's distributed stage rows, as its page and `lookup` show them."""
    out = []
    for r in stages:
        if r.get("stage") not in SHARDING:
            continue
        out.append(
            {
                "stage": r["stage"],
                "status": r["status"],
                "reason": r.get("reason"),
                "world_size": r.get("world_size"),
                "failing_op": r.get("failing_op"),
                "failed_rank": r.get("failed_rank"),
                "evidence": r.get("sharding_evidence"),
                "collectives": list(r.get("collectives") or []),
                "rank_peak_memory_bytes": list(r.get("rank_peak_memory_bytes") or []),
                "unsharded_peak_memory_bytes": r.get("unsharded_peak_memory_bytes"),
                "max_abs_error": r.get("max_abs_error"),
                "error_type": r.get("error_type"),
                "error_message": r.get("error_message"),
                "duration_s": r.get("duration_s"),
            }
        )
    return out
