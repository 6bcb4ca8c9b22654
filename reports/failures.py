"""Why models did not pass: failure clusters by normalised error signature, and skips by reason."""

from __future__ import annotations

from typing import Any

from reports.coverage import share
from reports.query import IN_DTYPE, OUTCOME_FAILED, OUTCOME_PARTIAL, OUTCOME_SKIPPED, StoreQuery


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
              any_value(error_type) AS error_type,
              any_value(failing_op) AS failing_op,
              -- what users read: the real message (numbers and all) of the most downloaded
              -- model of the cluster; the signature only groups them
              arg_max(error_message, downloads) AS example_message,
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
