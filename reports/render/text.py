"""Plain-text report for terminals and logs."""

from __future__ import annotations

from typing import Any

from reports.render.sections import report_sections, title_line
from reports.render.tables import TEXT_WIDTH, emulated_notice, text_sections, wrap


def render(report: dict[str, Any], width: int = TEXT_WIDTH) -> str:
    """The report in lines of at most `width` characters (a store path longer than that aside):
    notes wrapped, wide tables narrowed, and what a table leaves out named with where it is."""
    lines = wrap(title_line(report), width)
    notice = emulated_notice(report["denominators"])
    if notice:
        lines += wrap(notice, width)
    lines.append(f"store: {report['store']}")
    lines += text_sections(report_sections(report), width)
    return "\n".join(lines) + "\n"
