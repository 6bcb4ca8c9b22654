"""What one model's stage rows add up to, in words: the verdict line of `hfsweep check`
("fails at compile: aten::X", "passes every stage ..."), and the next step to take where one
exists (`--compile-mode eager`, the `pip install` a missing package needs, a longer timeout).

Pure functions over row dicts (the results schema's columns): no torch, nothing run.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reports.render import fmt
from reports.schema import FAILED_STATUSES, SkipReason, Status

_FAILED = {s.value for s in FAILED_STATUSES}
_NA = SkipReason.NOT_APPLICABLE.value
# skips that say there is nothing to run there (a tp stage without a plan), not a stop
_NOT_A_STOP = frozenset({_NA, SkipReason.NO_TP_PLAN.value})
_PIP = re.compile(r"pip install (?:'[^']+'|\"[^\"]+\"|\S+)")


@dataclass(frozen=True)
class NextStep:
    """A command to run next and why."""

    command: str
    why: str


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
        return text + f", with CPU fallbacks ({len(ops)} ops: {shown})"
    if counted:
        return text + f", with CPU fallbacks ({counted} ops)"
    return text + ", with no CPU fallback"


def check_command(model: str, device: str, *extra: str) -> str:
    return " ".join(
        ["hfsweep", "check", shlex.quote(model), "--device", shlex.quote(device), *extra]
    )


def next_step(
    rows: list[dict[str, Any]], *, model: str, device: str, timeout_s: float | None = None
) -> NextStep | None:
    """What to run next, where the rows say of something to do (None: nothing to suggest)."""
    failed = first_failure(rows)
    if failed is not None:
        if (
            failed["stage"] == "compile"
            and failed["status"] == Status.FAIL.value
            and failed.get("compile_mode") == "raise"
            and failed.get("failing_op")
        ):
            return NextStep(
                check_command(model, device, "--compile-mode", "eager"),
                "runs the graph op by op on the device instead of raising on an op the compiler "
                "cannot lower (TorchNeuron's TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0); the "
                "ops that then fall back are recorded",
            )
        if failed["status"] == Status.TIMEOUT.value and timeout_s:
            return NextStep(
                check_command(model, device, "--timeout", f"{timeout_s * 2:g}"),
                f"{failed['stage']} did not finish in {timeout_s:g} s",
            )
        if failed.get("error_type") == "FallbackDisallowed":  # --strict refused a fallback
            return NextStep(
                check_command(model, device),
                "without --strict, to see every op that falls back to the CPU",
            )
        return None
    for r in rows:
        if r["status"] == Status.SKIP.value and r["reason"] == SkipReason.MISSING_PACKAGE.value:
            found = _PIP.search(r.get("error_message") or "")
            if found:
                return NextStep(found.group(0), "installs the package these models need")
    return None
