"""What one model's stage rows add up to, in words: the verdict line of `hfsweep check`
("fails at compile: aten::X", "passes every stage ..."), and the next step to take (the
next-step table of `ground.next_steps`: a device option that runs the graph eagerly, the `pip install` a missing
package needs, a longer timeout, "passes with experts_implementation='batched_mm'").

Pure functions over row dicts (the results schema's columns): no torch, nothing run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ground import fmt, next_steps
from ground.next_steps import NextStep, check_command
from ground.schema import FAILED_STATUSES, SkipReason, Status

__all__ = [
    "NextStep",
    "check_command",
    "error_line",
    "first_failure",
    "next_step",
    "passed",
    "verdict",
]

_FAILED = {s.value for s in FAILED_STATUSES}
_NA = SkipReason.NOT_APPLICABLE.value
_NOT_A_STOP = next_steps.NOT_A_STOP


def first_failure(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first stage row (in stage order) whose status is a failure."""
    return next((r for r in rows if r["status"] in _FAILED), None)


def passed(rows: list[dict[str, Any]]) -> bool:
    """Every stage passed or does not apply to the model."""
    return all(
        r["status"] == Status.PASS.value
        or (r["status"] == Status.SKIP.value and r["reason"] in _NOT_A_STOP)
        for r in rows
    )


def error_line(row: dict[str, Any], limit: int = 300) -> str:
    """`ErrorType: message` of a failed row, its first line cut at a word boundary."""
    message = fmt.clip(fmt.first_line(row.get("error_message")), limit)
    kind = row.get("error_type")
    if kind and message:
        return f"{kind}: {message}"
    return kind or message


def verdict(rows: list[dict[str, Any]], fallbacks: Sequence[dict[str, Any]] = ()) -> str:
    """One line: how far the model got, and what stopped it (`fallbacks`: the fallbacks table's
    rows of the model, each naming an `op`)."""
    failed = first_failure(rows)
    if failed is not None:
        where = f"fails at {failed['stage']}"
        if failed["status"] != Status.FAIL.value:
            where += f" ({failed['status']})"
        what = failed.get("failing_op") or error_line(failed, 160)
        return f"{where}: {what}" if what else where
    skips = [r for r in rows if r["status"] == Status.SKIP.value and r["reason"] not in _NOT_A_STOP]
    if skips and len(skips) == len(rows):
        first = skips[0]
        return f"skipped ({first['reason']}): {fmt.clip(first.get('error_message'), 200)}"
    if skips:
        names = ", ".join(f"{r['stage']} ({r['reason']})" for r in skips)
        return f"no stage failed, but not every stage ran: {names} skipped"
    ran = [r["stage"] for r in rows if r["status"] == Status.PASS.value]
    na = [r["stage"] for r in rows if r["status"] == Status.SKIP.value and r["reason"] == _NA]
    no_plan = [r["stage"] for r in rows if r["reason"] == SkipReason.NO_TP_PLAN.value]
    text = f"passes every stage ({', '.join(ran)}"
    text += f"; {', '.join(na)} does not apply" if na else ""
    text += f"; {', '.join(no_plan)}: no tensor-parallel plan)" if no_plan else ")"
    ops = sorted({fb["op"] for fb in fallbacks if fb.get("op")})
    counted = max((r.get("fallback_op_count") or 0 for r in rows), default=0)
    if ops:
        shown = ", ".join(ops[:3]) + (", ..." if len(ops) > 3 else "")
        return text + f", with CPU fallbacks ({fmt.counted(len(ops), 'op')}: {shown})"
    if counted:
        return text + f", with CPU fallbacks ({fmt.counted(counted, 'op')})"
    return text + ", with no CPU fallback"


def next_step(
    rows: list[dict[str, Any]],
    *,
    model: str,
    device: str,
    timeout_s: float | None = None,
    **known: Any,
) -> NextStep:
    """What to do next about these rows: the next-step table's step for their failure class
    (`ground.next_steps`; `known`: what else it may use, such as the fallbacks, the shrunk
    config and the alternatives tried)."""
    return next_steps.next_step(rows, model=model, device=device, timeout_s=timeout_s, **known)
