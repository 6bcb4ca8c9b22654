"""The whole report of one run, assembled once for every output (text, markdown, json, html,
dashboard overview)."""

from __future__ import annotations

from typing import Any

from reports import coverage, failures, fine_tune, op_sweep, ops
from reports.query import StoreQuery


def run_report(
    q: StoreQuery, run_id: str | None = None, *, top: int = 20, op_run_id: str | None = None
) -> dict[str, Any]:
    """Denominators, funnel, headline, fine-tuning (the training stages), breakdowns, failure
    clusters, skips, missing ops, trend, and the op sweep on the same device (`op_run_id`, else
    the newest) joined to them."""
    run_id = q.resolve_run(run_id)
    op_run = op_sweep.op_run_for_model_run(q, run_id, op_run_id)
    return {
        "run_id": run_id,
        "store": q.store.uri,
        "run": q.run_info(run_id) or {"run_id": run_id, "status": "unknown"},
        "denominators": coverage.denominators(q, run_id),
        "stages": coverage.run_stages(q, run_id),
        "funnel": coverage.funnel(q, run_id),
        "band": coverage.band(q, run_id),
        "headline": coverage.headline(q, run_id),
        "fine_tune": fine_tune.fine_tune(q, run_id),
        "breakdowns": {
            key: coverage.breakdown(q, run_id, key, limit=top) for key in coverage.BREAKDOWN_KEYS
        },
        "failure_clusters": failures.failure_clusters(q, run_id, limit=top),
        "failures_by_op": failures.failures_by_op(q, run_id, limit=top),
        "skip_reasons": failures.skip_reasons(q, run_id),
        "missing_ops": op_sweep.with_op_sweep(
            q, run_id, ops.missing_ops(q, run_id, limit=top), op_run
        ),
        "coverage_over_runs": coverage.coverage_over_runs(q),
        "op_sweep": (
            op_sweep.op_sweep_report(q, op_sweep.op_query(q), op_run, model_run_id=run_id, top=top)
            if op_run
            else None
        ),
    }
