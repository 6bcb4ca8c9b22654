"""The whole report of one run, assembled once for every output (text, markdown, json, html,
dashboard overview)."""

from __future__ import annotations

from typing import Any

from reports import (
    coverage,
    dtypes,
    failures,
    fine_tune,
    hf_stack,
    op_sweep,
    ops,
    sharding,
    sizing,
)
from reports.query import StoreQuery
from runners import stages as stage_registry

# The stage groups' sections the reading side writes itself (each group's declaration names
# the one that counts it); any other group's section is its `stage_counts` (`stage_groups`).
OWN_SECTIONS = ("funnel", "fine_tune", "sharding", "hf_stack")


def other_groups(q: StoreQuery, run_id: str, dtype: str | None) -> dict[str, Any]:
    """The head of the section of each stage group whose declared section is none of
    `OWN_SECTIONS` (`coverage.stage_group`, titled as the group declares), by section key."""
    found: dict[str, Any] = {}
    for group in stage_registry.stage_groups():
        if group.section in OWN_SECTIONS:
            continue
        stages = tuple(d.name.value for d in group.stages)
        head = coverage.stage_group(q, run_id, stages, stage_registry.labels(stages), dtype)
        found[group.section] = {**head, "title": group.section_title or group.section}
    return found


def run_report(
    q: StoreQuery, run_id: str | None = None, *, top: int = 20, op_run_id: str | None = None
) -> dict[str, Any]:
    """Denominators, funnel, headline, fine-tuning (the training stages), sharding (the
    distributed stages), Hugging Face's training stack (the hf_training stages), breakdowns, failure clusters, skips, next steps by failure class,
    missing ops, trend, and the op sweep on the same device (`op_run_id`, else
    the newest) joined to them.

    A run of several dtypes (`dtypes`) has every figure per dtype in `by_dtype` (the missing
    ops joined to the op sweep's samples of the same dtype) and what differs between them in
    `dtype_differences`; its top-level figures are its first dtype's (`dtype`). A run of one
    dtype has them at the top level only (`by_dtype` empty, `dtype_differences` None)."""
    run_id = q.resolve_run(run_id)
    op_run = op_sweep.op_run_for_model_run(q, run_id, op_run_id)
    run_dtypes = q.run_dtypes(run_id)
    several = dtypes.several(run_dtypes)

    def figures(dtype: str | None) -> dict[str, Any]:
        return {
            "denominators": coverage.denominators(q, run_id, dtype),
            "funnel": coverage.funnel(q, run_id, dtype),
            "band": coverage.band(q, run_id, dtype),
            "headline": coverage.headline(q, run_id, dtype=dtype),
            "fine_tune": fine_tune.fine_tune(q, run_id, dtype),
            "cores_needed": sizing.cores_needed(q, run_id, dtype),
            "sharding": sharding.sharding(q, run_id, dtype),
            "hf_stack": hf_stack.hf_stack(q, run_id, dtype),
            **({"stage_groups": others} if (others := other_groups(q, run_id, dtype)) else {}),
            "breakdowns": {
                key: coverage.breakdown(q, run_id, key, limit=top, dtype=dtype)
                for key in coverage.BREAKDOWN_KEYS
            },
            "failure_clusters": failures.failure_clusters(q, run_id, limit=top, dtype=dtype),
            "failures_by_op": failures.failures_by_op(q, run_id, limit=top, dtype=dtype),
            "skip_reasons": failures.skip_reasons(q, run_id, dtype),
            "next_steps": failures.next_step_classes(q, run_id, dtype),
            "missing_ops": op_sweep.with_op_sweep(
                q, run_id, ops.missing_ops(q, run_id, limit=top, dtype=dtype), op_run, dtype
            ),
        }

    by_dtype = {d: figures(d) for d in run_dtypes} if several else {}
    main = by_dtype[run_dtypes[0]] if several else figures(None)
    return {
        "run_id": run_id,
        "store": q.store.uri,
        "run": q.run_info(run_id) or {"run_id": run_id, "status": "unknown"},
        "dtypes": run_dtypes,
        "dtype": run_dtypes[0] if run_dtypes else None,
        "stages": coverage.run_stages(q, run_id),
        **main,
        "coverage_over_runs": coverage.coverage_over_runs(q),
        "op_sweep": (
            op_sweep.op_sweep_report(q, op_sweep.op_query(q), op_run, model_run_id=run_id, top=top)
            if op_run
            else None
        ),
        "by_dtype": by_dtype,
        "dtype_differences": dtypes.dtype_differences(q, run_id, limit=top),
    }
