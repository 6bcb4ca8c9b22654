"""A model's hf_training stages as text lines (`hfsweep lookup`, `hfsweep check`)."""

from __future__ import annotations

from typing import Any


def hf_stack_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The Hugging Face training stack part of a model's text: per hf_training stage its
    status, where it trained, what the libraries picked, the difference from the CPU trainer,
    and where a failure is (a library frame or an op). Empty when none ran."""
    if not rows:
        return []
    lines = ["", "Hugging Face training stack:"]
    for r in rows:
        head = f"  {r['stage']:<17}{r['status']:<15}"
        if r.get("reason"):
            head += f"({r['reason']})"
        if r.get("failing_op"):
            head += f"  stopped by {r['failing_op']} (the device)"
        elif r.get("library_frame"):
            head += f"  stopped in {r['library_frame']} (a library's device path)"
        lines.append(head.rstrip())
        if r.get("trained_on"):
            lines.append(f"{'':<8}trained on {r['trained_on']}")
        if r.get("hf_settings"):
            lines.append(f"{'':<8}{r['hf_settings']}")
        if r.get("max_abs_error") is not None:
            lines.append(f"{'':<8}max abs error against the CPU trainer: {r['max_abs_error']:.3g}")
        if r.get("recompile_count") is not None:
            lines.append(f"{'':<8}recompiles after the first step: {r['recompile_count']}")
    return lines
