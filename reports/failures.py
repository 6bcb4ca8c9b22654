"""Why models did not pass: failure clusters by normalised error signature, skips by reason, and
the next step of each failure class (`ground.next_steps`), with how many models passed when
run again with a switch of their own code."""

from __future__ import annotations

from typing import Any

from ground import next_steps
from reports.coverage import share
from reports.query import (
    IN_DTYPE,
    OUTCOME_FAILED,
    OUTCOME_PARTIAL,
    OUTCOME_PASSED,
    OUTCOME_SKIPPED,
    Scan,
    StoreQuery,
)


def failure_clusters(
    q: StoreQuery, run_id: str, *, limit: int = 50, dtype: str | None = None
) -> list[dict[str, Any]]:
    """One line per error signature of a model's first failing stage: the models and downloads
    it affects, where it happens, and the most downloaded models it hits."""

    def build() -> list[dict[str, Any]]:
        q.ensure_summaries([run_id])
        total = q.run_downloads(run_id, dtype)
        rows = q.fetch(
            f"""
            SELECT coalesce(error_signature, '(no signature)') AS signature,
              count(*) AS models, coalesce(sum(downloads), 0) AS downloads,
              list(DISTINCT failed_stage ORDER BY failed_stage) AS stages,
              list(DISTINCT failed_status ORDER BY failed_status) AS statuses,
              -- what users read: the real error (type, op, message with its numbers) of the
              -- most downloaded model of the cluster, the same one each time (ties by id); the
              -- signature only groups them
              first(error_type ORDER BY downloads DESC, model_id) AS error_type,
              first(failing_op ORDER BY downloads DESC, model_id) AS failing_op,
              first(error_message ORDER BY downloads DESC, model_id) AS example_message,
              list(model_id ORDER BY downloads DESC, model_id)[1:5] AS top_models
            FROM model_runs WHERE run_id = $run AND {IN_DTYPE} AND outcome = '{OUTCOME_FAILED}'
            GROUP BY ALL ORDER BY downloads DESC, models DESC, signature LIMIT $limit
            """,
            {"run": run_id, "dtype": dtype, "limit": limit},
        )
        for r in rows:
            r["downloads_share"] = share(r["downloads"], total)
        return rows

    return q.memo("failure_clusters", run_id, build, limit, dtype)


def failures_by_op(
    q: StoreQuery, run_id: str, *, limit: int = 50, dtype: str | None = None
) -> list[dict[str, Any]]:
    """Failed models by the op their first failure names (failures that name none: by error
    type), most models first: what the overview's chart of failures shows."""

    def build() -> list[dict[str, Any]]:
        q.ensure_summaries([run_id])
        total = q.run_downloads(run_id, dtype)
        rows = q.fetch(
            f"""
            SELECT coalesce(failing_op, coalesce(error_type, failed_status) || ' (no op named)')
                AS key,
              failing_op IS NOT NULL AS is_op,
              count(*) AS models, coalesce(sum(downloads), 0) AS downloads,
              list(DISTINCT failed_stage ORDER BY failed_stage) AS stages
            FROM model_runs WHERE run_id = $run AND {IN_DTYPE} AND outcome = '{OUTCOME_FAILED}'
            GROUP BY ALL ORDER BY models DESC, downloads DESC, key LIMIT $limit
            """,
            {"run": run_id, "dtype": dtype, "limit": limit},
        )
        for r in rows:
            r["downloads_share"] = share(r["downloads"], total)
        return rows

    return q.memo("failures_by_op", run_id, build, limit, dtype)


def skip_reasons(q: StoreQuery, run_id: str, dtype: str | None = None) -> list[dict[str, Any]]:
    """Skipped models (every stage) and models with a device-skipped stage, by reason."""

    def build() -> list[dict[str, Any]]:
        q.ensure_summaries([run_id])
        total = q.run_downloads(run_id, dtype)
        rows = q.fetch(
            f"""
            SELECT coalesce(skip_reason, 'unknown') AS reason,
              CASE outcome WHEN '{OUTCOME_SKIPPED}' THEN 'model' ELSE 'stage' END AS scope,
              count(*) AS models, coalesce(sum(downloads), 0) AS downloads,
              list(model_id ORDER BY downloads DESC, model_id)[1:5] AS top_models
            FROM model_runs
            WHERE run_id = $run AND {IN_DTYPE} AND outcome IN ('{OUTCOME_SKIPPED}', '{OUTCOME_PARTIAL}')
            GROUP BY ALL ORDER BY models DESC, reason
            """,
            {"run": run_id, "dtype": dtype},
        )
        for r in rows:
            r["downloads_share"] = share(r["downloads"], total)
        return rows

    return q.memo("skip_reasons", run_id, build, dtype)


def next_step_classes(q: StoreQuery, run_id: str, dtype: str | None = None) -> list[dict[str, Any]]:
    """Every model that is not a clean pass (no CPU fallback, every compiler verdict with
    evidence), by the next-step table's class: models, downloads, the step of its most
    downloaded model, and how many of them passed with a switch of their own code (which)."""

    def build() -> list[dict[str, Any]]:
        q.ensure_summaries([run_id])
        total = q.run_downloads(run_id, dtype)
        run = q.run_info(run_id) or {}
        rows = q.fetch(
            f"""
            SELECT model_id, dtype, downloads, skip_reason, skip_message, failed_stage,
              failed_status, error_type, error_message, failing_op, failed_evidence,
              unverified, fallback_ops
            FROM model_runs WHERE run_id = $run AND {IN_DTYPE}
              AND NOT (outcome = '{OUTCOME_PASSED}' AND NOT unverified AND fallback_ops = 0)
            ORDER BY downloads DESC, model_id
            """,
            {"run": run_id, "dtype": dtype},
        )
        proven = _passing_alternatives(q, run_id, dtype)
        classes: dict[str, dict[str, Any]] = {}
        for r in rows:
            row = next_steps.summary_row(r)
            found = next_steps.classify(row)
            c = classes.get(found.failure)
            switch = proven.get((r["model_id"], r["dtype"]))
            if c is None:  # the most downloaded model of the class says its step
                step = next_steps.step_for_row(
                    row,
                    model=r["model_id"],
                    device=run.get("device") or "cpu",
                    timeout_s=run.get("timeout_s"),
                    store=q.store.uri,
                    alternatives=[next_steps.Alternative(switch, True)] if switch else [],
                )
                c = classes[found.failure] = {
                    "failure": found.failure,
                    "title": found.title,
                    "models": 0,
                    "downloads": 0,
                    "step": step.text,
                    "example": r["model_id"],
                    "proven": {},
                    "top_models": [],
                }
            c["models"] += 1
            c["downloads"] += r["downloads"] or 0
            if len(c["top_models"]) < 5:
                c["top_models"].append(r["model_id"])
            if switch:
                c["proven"][switch] = c["proven"].get(switch, 0) + 1
        out = sorted(classes.values(), key=lambda c: (-c["downloads"], -c["models"]))
        for c in out:
            c["downloads_share"] = share(c["downloads"], total)
        return out

    return q.memo("next_step_classes", run_id, build, dtype)


def _passing_alternatives(
    q: StoreQuery, run_id: str, dtype: str | None
) -> dict[tuple[str, str], str]:
    """(model, dtype) -> the first switch of its own code with which every stage passed."""
    files = q.files(run_id).alternatives
    if not files:
        return {}
    rows = q.fetch(
        f"""
        SELECT model_id, dtype, implementation, min(finished_at) AS tried_at
        FROM alternative_parts WHERE {IN_DTYPE}
        GROUP BY ALL
        HAVING bool_and(status = 'pass' OR (status = 'skip' AND reason = 'not_applicable'))
        ORDER BY tried_at
        """,
        {"dtype": dtype},
        scans={"alternative_parts": Scan("alternatives", files)},
    )
    out: dict[tuple[str, str], str] = {}
    for r in rows:
        out.setdefault((r["model_id"], r["dtype"]), r["implementation"])
    return out
