"""Markdown report (for a nightly job summary or a pull request comment)."""

from __future__ import annotations

from typing import Any

from reports.render.sections import report_sections, title_line
from reports.render.tables import emulated_notice


def _cell(text: str) -> str:
    return (
        text.replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\n", " ")
    )


def render(report: dict[str, Any]) -> str:
    lines = [f"# {_cell(title_line(report))}", ""]
    notice = emulated_notice(report["denominators"])
    if notice:
        lines += [f"> **{notice}**", ""]
    return "\n".join(lines + _sections(report_sections(report)))


def render_sections(data: dict[str, Any]) -> str:
    """An op-sweep report alone (a store without model runs)."""
    from reports.render import op_sections

    d = data["denominators"]
    lines = [f"# hfsweep op sweep: run {_cell(d['run_id'])}, device {_cell(d['device_label'])}", ""]
    notice = op_sections.emulated_notice(d)
    if notice:
        lines += [f"> **{notice}**", ""]
    return "\n".join(lines + _sections(op_sections.op_sweep_sections(data)))


def _sections(sections: list[Any]) -> list[str]:
    lines: list[str] = []
    for section in sections:
        lines += [f"## {section.title}", ""]
        if section.rows:
            lines.append("| " + " | ".join(_cell(h) for h in section.headers) + " |")
            lines.append("|" + "|".join(["---"] + ["---:"] * (len(section.headers) - 1)) + "|")
            for i, row in enumerate(section.rows):
                level = section.indent[i] if i < len(section.indent) else 0
                first = "&nbsp;&nbsp;" * level + _cell(row[0])
                lines.append("| " + " | ".join([first, *(_cell(c) for c in row[1:])]) + " |")
        else:
            lines.append("(none)")
        lines.append("")
        lines += [f"_{_cell(n)}_" for n in section.notes]
        if section.notes:
            lines.append("")
    return lines
