"""Can I fine-tune on the device? The training stages of one run, by models and by downloads.

- per training stage (optimizer with PyTorch's default AdamW, optimizer_fused, amp, lora):
  models and downloads that passed it, and passed with no CPU fallback, out of the run's models;
  the share that fine-tunes with no fallback is the optimizer line (default) against the
  optimizer_fused line;
- the optimizer ops that fall back (fallbacks with source `optimizer`: seen only in the
  optimizer's part of a step), ranked by the downloads of the models whose default AdamW step
  they touch, and whether `fused=True` removes them (the fused stage passed without that op);
- the median native op calls of the optimizer's part of one step, default against fused, where
  the device counts its calls (the emulated device).
"""

from __future__ import annotations

from typing import Any

from ground.schema import FallbackSource, Stage
from reports.coverage import share, stage_counts, stage_line
from reports.query import FAILED, IN_DTYPE, Scan, StoreQuery, in_dtype, same_dtype
from runners import stages as stage_registry

TRAINING = tuple(s.value for s in stage_registry.section_stages("fine_tune"))
LABELS = stage_registry.labels(TRAINING)
_FAILED_SQL = ", ".join(f"'{s}'" for s in FAILED)


def fine_tune(q: StoreQuery, run_id: str, dtype: str | None = None) -> dict[str, Any]:
    """The training stages of a run (`ran` False when the run asked for none; `dtype`: that
    dtype's rows of a run of several)."""

    def build() -> dict[str, Any]:
        counts = stage_counts(q, run_id, (Stage.BACKWARD.value, *TRAINING), dtype)
        models, downloads = counts["models"], counts["downloads"]
        backward = counts["stages"][Stage.BACKWARD.value]
        stages = {
            s: stage_line(s, counts["stages"][s], models, downloads, label=LABELS[s])
            for s in TRAINING
        }
        ran = any(v["rows"] for v in stages.values())
        default, fused = stages[Stage.OPTIMIZER.value], stages[Stage.OPTIMIZER_FUSED.value]
        return {
            "ran": ran,
            "models": models,
            "downloads": downloads,
            "backward_passed": backward["passed"],
            "backward_passed_downloads": backward["passed_downloads"],
            "stages": list(stages.values()),
            "default_no_fallback_downloads_share": default["no_fallback_downloads_share"],
            "fused_no_fallback_downloads_share": fused["no_fallback_downloads_share"],
            "lora": _lora(q, run_id, stages[Stage.LORA.value], dtype),
            "optimizer_ops": optimizer_ops(q, run_id, dtype) if ran else [],
            "step_op_calls": _step_op_calls(q, run_id, dtype) if ran else {},
        }

    return q.memo("fine_tune", run_id, build, dtype)


def _lora(
    q: StoreQuery, run_id: str, line: dict[str, Any], dtype: str | None = None
) -> dict[str, Any]:
    """LoRA's own base: the models the lora stage ran on (peft has defaults for their model
    type), the share of them that trained, and the skips by reason."""
    ran = q.fetch(
        f"""
        SELECT count(*) AS models, coalesce(sum(downloads), 0) AS downloads
        FROM model_runs WHERE run_id = $run AND {IN_DTYPE}
          AND (s_lora = 'pass' OR s_lora IN ({_FAILED_SQL}))
        """,
        {"run": run_id, "dtype": dtype},
    )[0]
    skips = q.fetch(
        f"""
        SELECT coalesce(reason, 'unknown') AS reason, count(*) AS models,
          coalesce(sum(downloads), 0) AS downloads
        FROM (SELECT DISTINCT model_id, downloads, reason FROM results_parts
              WHERE stage = $stage AND status = 'skip' AND {IN_DTYPE})
        GROUP BY ALL ORDER BY models DESC, reason
        """,
        {"stage": Stage.LORA.value, "dtype": dtype},
        scans={"results_parts": Scan("results", q.files(run_id).results)},
    )
    return {
        "ran": ran["models"],
        "ran_downloads": ran["downloads"],
        "passed": line["passed"],
        "passed_downloads": line["passed_downloads"],
        "passed_share_of_ran": share(line["passed"], ran["models"]),
        "passed_downloads_share_of_ran": share(line["passed_downloads"], ran["downloads"]),
        "skipped_by_reason": skips,
    }


def optimizer_ops(q: StoreQuery, run_id: str, dtype: str | None = None) -> list[dict[str, Any]]:
    """Ops that fell back in the optimizer's part of a step, most downloads first: with the
    default AdamW (`models` / `downloads`), with `fused=True`, and the models whose fused step
    passed without it (`removed_by_fused`)."""
    files = q.files(run_id)
    if not files.fallbacks:
        return []
    q.ensure_summaries([run_id])
    rows = q.fetch(
        f"""
        WITH f AS (
          SELECT f.model_id, f.stage, f.op, f.count
          FROM fallback_parts f
          JOIN model_runs s ON s.run_id = $run AND s.model_id = f.model_id
            AND s.part_no = list_position($parts, parse_filename(f.filename))
            AND {same_dtype("f", "s")} AND {in_dtype("s")}
          WHERE f.source = '{FallbackSource.OPTIMIZER.value}'
            AND f.stage IN ('{Stage.OPTIMIZER.value}', '{Stage.OPTIMIZER_FUSED.value}')
        ),
        per AS (
          SELECT op, model_id,
            bool_or(stage = '{Stage.OPTIMIZER.value}') AS by_default,
            bool_or(stage = '{Stage.OPTIMIZER_FUSED.value}') AS by_fused,
            sum(count) FILTER (WHERE stage = '{Stage.OPTIMIZER.value}') AS calls
          FROM f GROUP BY op, model_id
        ),
        m AS (
          SELECT model_id, downloads, s_optimizer_fused FROM model_runs
          WHERE run_id = $run AND {IN_DTYPE}
        )
        SELECT op,
          count(*) FILTER (WHERE by_default) AS models,
          coalesce(sum(downloads) FILTER (WHERE by_default), 0) AS downloads,
          coalesce(sum(calls), 0) AS calls,
          count(*) FILTER (WHERE by_fused) AS fused_models,
          coalesce(sum(downloads) FILTER (WHERE by_fused), 0) AS fused_downloads,
          count(*) FILTER (WHERE by_default AND NOT by_fused AND s_optimizer_fused = 'pass')
            AS removed_by_fused,
          coalesce(sum(downloads) FILTER (WHERE by_default AND NOT by_fused
            AND s_optimizer_fused = 'pass'), 0) AS removed_by_fused_downloads,
          list(model_id ORDER BY downloads DESC, model_id)[1:3] AS top_models
        FROM per JOIN m USING (model_id)
        GROUP BY op
        ORDER BY downloads DESC, fused_downloads DESC, op
        """,
        {"run": run_id, "dtype": dtype, "parts": q.summary_part_names(run_id)},
        scans={
            "fallback_parts": Scan(
                "fallbacks",
                files.fallbacks,
                ("model_id", "dtype", "stage", "op", "count", "source"),
                True,
            )
        },
    )
    total = q.run_downloads(run_id, dtype)
    for r in rows:
        r["downloads_share"] = share(r["downloads"], total)
        r["fused_downloads_share"] = share(r["fused_downloads"], total)
    return rows


def _step_op_calls(q: StoreQuery, run_id: str, dtype: str | None = None) -> dict[str, Any]:
    """Per optimizer stage: median native op calls of the optimizer's part of one step over
    the models that passed it, where the device counts calls (else absent)."""
    files = q.files(run_id)
    rows = q.fetch(
        f"""
        SELECT stage, count(step_op_calls) AS models, median(step_op_calls) AS median,
          min(step_op_calls) AS min, max(step_op_calls) AS max
        FROM results_parts
        WHERE stage IN ('{Stage.OPTIMIZER.value}', '{Stage.OPTIMIZER_FUSED.value}')
          AND status = 'pass' AND step_op_calls IS NOT NULL AND {IN_DTYPE}
        GROUP BY stage
        """,
        {"dtype": dtype},
        scans={"results_parts": Scan("results", files.results)},
    )
    return {r["stage"]: r for r in rows if r["models"]}
