"""Plain-text report for terminals and logs."""

from __future__ import annotations

from typing import Any

from reports.render.sections import Section, emulated_notice, report_sections, title_line


def render_table(section: Section) -> list[str]:
    labels = [
        "  " * (section.indent[i] if i < len(section.indent) else 0) + row[0]
        for i, row in enumerate(section.rows)
    ]
    rows = [[labels[i], *row[1:]] for i, row in enumerate(section.rows)]
    widths = [len(h) for h in section.headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    widths = [min(w, 70) for w in widths]

    def line(cells: list[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            cell = cell if len(cell) <= widths[i] else cell[: widths[i] - 1] + "…"
            out.append(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]))
        return "  ".join(out).rstrip()

    out = [line(section.headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return out


def render(report: dict[str, Any]) -> str:
    lines = [title_line(report)]
    notice = emulated_notice(report["denominators"])
    if notice:
        lines.append(notice)
    lines.append(f"store: {report['store']}")
    for section in report_sections(report):
        lines += ["", f"== {section.title} =="]
        if section.rows:
            lines += render_table(section)
        else:
            lines.append("(none)")
        lines += section.notes
    return "\n".join(lines) + "\n"
