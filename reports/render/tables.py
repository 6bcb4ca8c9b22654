"""A titled table (`Section`), its plain-text layout, and the emulated-device notice.

The leaf every renderer shares (text, markdown, html, the op sweep's and the dashboard's pages):
it imports none of them, so the run report's sections and the op sweep's can each use it and the
run report can include the op sweep's without a circle.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from reports.render import fmt


@dataclass
class Section:
    key: str
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    indent: list[int] = field(default_factory=list)  # per row, for the denominators tree
    # per row, what a link from its first cell is made from (default: the cell's own text),
    # e.g. a failure cluster's signature while the cell shows its real error message
    keys: list[str] = field(default_factory=list)


def emulated_notice(d: dict[str, Any], what: str = "results") -> str | None:
    if not d.get("device_emulated"):
        return None
    return (
        f"EMULATED DEVICE: these {what} come from an emulated {d.get('device') or 'device'} "
        "(a stand-in that runs on the CPU), not from real hardware."
    )


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
            cell = fmt.clip(cell, widths[i]) if len(cell) > widths[i] else cell
            out.append(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]))
        return "  ".join(out).rstrip()

    out = [line(section.headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return out


def text_sections(sections: Iterable[Section]) -> list[str]:
    """Sections as plain text: a `== title ==` line, the table (or `(none)`), the notes."""
    lines: list[str] = []
    for section in sections:
        lines += ["", f"== {section.title} =="]
        lines += render_table(section) if section.rows else ["(none)"]
        lines += section.notes
    return lines
