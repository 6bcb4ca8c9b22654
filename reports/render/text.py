"""Plain-text report for terminals and logs."""

from __future__ import annotations

from typing import Any

from reports.render.sections import report_sections, title_line
from reports.render.tables import emulated_notice, text_sections


def render(report: dict[str, Any]) -> str:
    lines = [title_line(report)]
    notice = emulated_notice(report["denominators"])
    if notice:
        lines.append(notice)
    lines.append(f"store: {report['store']}")
    lines += text_sections(report_sections(report))
    return "\n".join(lines) + "\n"
