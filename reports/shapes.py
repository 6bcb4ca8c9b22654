"""The shape stages' rows in words: the `shapes` verdict with what to do about it, and the
recompiles each recorded (for `hfsweep check`, `lookup` and the model page)."""

from __future__ import annotations

from typing import Any

from ground.schema import SHAPE_ADVICE
from runners import stages as stage_registry

_STAGES = {s.value for s in stage_registry.group_stages("shapes")}


def shape_advice(row: dict[str, Any]) -> str | None:
    """`static: one graph per input shape; pad inputs to fixed buckets`, ... (None: no verdict)."""
    verdict = row.get("shape_verdict")
    if not verdict:
        return None
    advice = SHAPE_ADVICE.get(verdict, verdict)
    return advice.format(op=row.get("failing_op") or "an op whose output size depends on values")


def shape_detail(row: dict[str, Any]) -> str:
    """The detail a shape stage's row adds (empty for other stages)."""
    if row.get("stage") not in _STAGES:
        return ""
    parts = []
    advice = shape_advice(row)
    if advice:
        parts.append(advice)
    if row.get("recompile_count") is not None and row.get("status") == "pass":
        after = " after warm-up" if row["stage"] == "generate_compiled" else ""
        graphs = row.get("graph_count")
        parts.append(
            (f"{graphs} graphs, " if graphs is not None else "")
            + f"{row['recompile_count']} recompiles{after}"
        )
    reasons = row.get("recompile_reasons") or []
    if reasons:
        parts.append(f"first recompile: {reasons[0]}")
    return "; ".join(parts)
