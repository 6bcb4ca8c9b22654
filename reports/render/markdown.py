"""Markdown report (for a nightly job summary or a pull request comment)."""

from __future__ import annotations

from typing import Any

from reports.render.sections import emulated_notice, report_sections, title_line


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
    for section in report_sections(report):
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
    return "\n".join(lines)
