"""Does Hugging Face's own training stack run on the device? The hf_training stages of one run,
by models and by downloads.

- per hf_training stage (trainer, trainer_compiled, sft, accelerate_ddp): the models and
  downloads that passed it, out of the run's models (skips stay in the base: an encoder that
  `sft` does not apply to counts), with those that failed, did not run, or were skipped;
- what stops the rest, ranked by the downloads of the models it blocks: for each failure, where
  it is (`kind`): in the device (the op or collective it names: `failing_op`), in a library's
  device path (the innermost transformers / accelerate / trl / peft / datasets frame of its
  traceback: `library_frame`), or neither (its error type); with the stages it stops and the
  most downloaded models.
"""

from __future__ import annotations

from typing import Any

from reports.coverage import share, stage_group
from reports.query import FAILED, IN_DTYPE, Scan, StoreQuery
from runners import stages as stage_registry

HF_STAGES = tuple(s.value for s in stage_registry.section_stages("hf_stack"))
LABELS = stage_registry.labels(HF_STAGES)
_FAILED_SQL = ", ".join(f"'{s}'" for s in FAILED)
_STAGES_SQL = ", ".join(f"'{s}'" for s in HF_STAGES)


def hf_stack(q: StoreQuery, run_id: str, dtype: str | None = None) -> dict[str, Any]:
    """The hf_training stages of a run (`ran` False when the run asked for none; `dtype`: that
    dtype's rows of a run of several)."""

    def build() -> dict[str, Any]:
        group = stage_group(q, run_id, HF_STAGES, LABELS, dtype)
        return {**group, "blockers": blockers(q, run_id, dtype) if group["ran"] else []}

    return q.memo("hf_stack", run_id, build, dtype)


def blockers(q: StoreQuery, run_id: str, dtype: str | None = None) -> list[dict[str, Any]]:
    """What stops the hf_training stages: per op, library frame or error type, where it is
    (`device`, `library`, `other`), the models and downloads it blocks, most downloads first."""
    files = q.files(run_id)
    if not files.results:
        return []
    rows = q.fetch(
        f"""
        WITH f AS (
          SELECT model_id, max(downloads) AS downloads, stage, status,
            coalesce(failing_op, library_frame, '(' || coalesce(error_type, status) || ')')
              AS blocker,
            CASE WHEN failing_op IS NOT NULL THEN 'device'
                 WHEN library_frame IS NOT NULL THEN 'library' ELSE 'other' END AS kind,
            any_value(error_type) AS error_type
          FROM results_parts
          WHERE stage IN ({_STAGES_SQL}) AND status IN ({_FAILED_SQL}) AND {IN_DTYPE}
          GROUP BY ALL
        )
        SELECT blocker, any_value(kind) AS kind,
          count(DISTINCT model_id) AS models,
          list(DISTINCT stage ORDER BY stage) AS stages,
          list(DISTINCT error_type ORDER BY error_type)
            FILTER (WHERE error_type IS NOT NULL) AS error_types,
          list(DISTINCT model_id ORDER BY model_id) AS model_ids
        FROM f GROUP BY blocker
        """,
        {"dtype": dtype},
        scans={"results_parts": Scan("results", files.results)},
    )
    q.ensure_summaries([run_id])
    downloads = {
        r["model_id"]: int(r["downloads"] or 0)
        for r in q.fetch(
            f"SELECT model_id, downloads FROM model_runs WHERE run_id = $run AND {IN_DTYPE}",
            {"run": run_id, "dtype": dtype},
        )
    }
    total = q.run_downloads(run_id, dtype)
    for r in rows:
        blocked = r.pop("model_ids")
        r["error_types"] = r["error_types"] or []
        r["downloads"] = sum(downloads.get(m, 0) for m in blocked)
        r["downloads_share"] = share(r["downloads"], total)
        r["top_models"] = sorted(blocked, key=lambda m: (-downloads.get(m, 0), m))[:3]
        r.update(placed(r["blocker"], r["kind"]))
    rows.sort(key=lambda r: (-r["downloads"], -r["models"], r["blocker"]))
    return rows


def placed(blocker: str, kind: str) -> dict[str, Any]:
    """Where a blocker is, in words and parts: in the device, an op or a collective (`c10d::`:
    the process group's); in a library's device path, the library, its file and function (a
    library frame is `library/path.py:function`); else neither."""
    if kind == "device":
        what = "collective" if blocker.startswith("c10d::") else "op"
        return {"where": f"in the device: the {what} {blocker}", "op": blocker,
                "library": None, "file": None, "function": None}  # fmt: skip
    if kind == "library":
        file, _, function = blocker.rpartition(":")
        library = file.split("/", 1)[0]
        return {
            "where": f"in {library}'s device path: {file}, {function}()",
            "op": None, "library": library, "file": file, "function": function,
        }  # fmt: skip
    return {"where": f"neither the device nor a library frame: {blocker.strip('()')}",
            "op": None, "library": None, "file": None, "function": None}  # fmt: skip


def model_hf_stack(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A model's hf_training rows, as its page and `lookup` show them."""
    keys = (
        "stage", "status", "reason", "trained_on", "hf_settings", "library_frame",
        "failing_op", "max_abs_error", "recompile_count", "error_type", "error_message",
        "duration_s",
    )  # fmt: skip
    return [{k: r.get(k) for k in keys} for r in stages if r.get("stage") in HF_STAGES]
