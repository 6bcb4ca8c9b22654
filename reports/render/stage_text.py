"""A model's stages as text lines: the table `hfsweep check` and `hfsweep lookup` print, then
its Sharding and Hugging Face training stack parts."""

from __future__ import annotations

from typing import Any

from ground import fmt
from reports.hf_stack import model_hf_stack
from reports.render.hf_stack_text import hf_stack_lines
from reports.render.sharding_text import sharding_lines
from reports.shapes import shape_detail
from reports.sharding import model_sharding

HEADER = f"{'stage':<18}{'status':<15}{'seconds':>9}{'fallback ops':>14}  detail"
INDENT = " " * 10  # an error's or a shape's line under its stage
MESSAGE_CHARS = 200  # an error's first line, cut beyond


def model_stage_lines(stages: list[dict[str, Any]]) -> tuple[list[str], bool]:
    """The stage table, then the distributed and hf_training parts, and whether an error was
    cut (the caller says where the whole of it is)."""
    lines, clipped = stage_table(stages)
    lines += sharding_lines(model_sharding(stages))
    lines += hf_stack_lines(model_hf_stack(stages))
    return lines, clipped


def stage_table(stages: list[dict[str, Any]]) -> tuple[list[str], bool]:
    """A line per stage (status, seconds, ops that fell back, a detail), its error's first line
    and its shape detail on lines of their own; and whether an error was cut. A model skipped
    at every stage for one reason is one line; a stage that did not apply reads `n/a`; a stage
    not run says which stage it needed; ops that fell back read `-` where the stage does not
    count them."""
    lines = [HEADER]
    whole = {(r["status"], r.get("reason"), r.get("error_message")) for r in stages}
    if len(stages) > 1 and len(whole) == 1 and stages[0]["status"] == "skip":
        r = stages[0]
        message = fmt.clip(fmt.first_line(r.get("error_message")), MESSAGE_CHARS)
        detail = (r.get("reason") or "") + (f": {message}" if message else "")
        lines.append(f"{'every stage':<18}{'skip':<15}{'-':>9}{'0':>14}  {detail}".rstrip())
        return lines, message.endswith("…")
    clipped = False
    for r in stages:
        na = r["status"] == "skip" and r.get("reason") == "not_applicable"
        status = "n/a" if na else r["status"]
        if na:
            detail = "does not apply to this model"
        elif r["status"] == "not_run":
            detail = fmt.first_line(r.get("error_message"))
        else:  # the reason, the op it names, what a compile verdict rests on
            parts = [r.get("reason"), r.get("failing_op") and f"op {r['failing_op']}"]
            parts.append(r.get("compile_evidence") and f"evidence {r['compile_evidence']}")
            if r.get("unverified_ops"):
                unverified = ", ".join(r["unverified_ops"][:4])
                parts.append(f"unverified (no evidence either way): {unverified}")
            detail = "; ".join(p for p in parts if p)
        secs = "-" if r.get("duration_s") is None else f"{r['duration_s']:.2f}"
        lines.append(
            f"{r['stage']:<18}{status:<15}{secs:>9}{fmt.count(r.get('fallback_op_count')):>14}"
            f"  {detail.strip()}".rstrip()
        )
        shape = r.get("shape_detail") or shape_detail(r)
        if shape:
            lines.append(f"{INDENT}{shape}")
        if r.get("error_message") and r["status"] not in ("pass", "not_run") and not na:
            kind = f"{r['error_type']}: " if r.get("error_type") else ""
            message = fmt.clip(kind + fmt.first_line(r["error_message"]), MESSAGE_CHARS)
            clipped = clipped or message.endswith("…")
            lines.append(f"{INDENT}{message}")
    return lines, clipped
