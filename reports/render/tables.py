"""A titled table (`Section`), its plain-text layout, and the emulated-device notice.

The leaf every renderer shares (text, markdown, html, the op sweep's and the dashboard's pages):
it imports none of them, so the run report's sections and the op sweep's can each use it and the
run report can include the op sweep's without a circle.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ground import fmt

TEXT_WIDTH = 120  # the plain-text report's lines fit a terminal this wide
CELL_MAX = 70  # no text cell is wider, however long its text
CELL_MIN = 6  # a column narrowed to fit is never narrower (nor than its header's longest word)
FIRST_MIN = 16  # nor is the row's name


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
    # the plain-text layout (`render_table`): the columns it shows (None: all but those below)
    # and the columns it prints under each row instead, as `label: value` ("" label: the value
    # alone); markdown, JSON and the pages show every column as a column
    text_columns: tuple[int, ...] | None = None
    text_below: dict[int, str] = field(default_factory=dict)


def emulated_notice(d: dict[str, Any], what: str = "results") -> str | None:
    if not d.get("device_emulated"):
        return None
    pairing = fmt.profile_pairing(d)
    return (
        f"EMULATED DEVICE: these {what} come from an emulated {d.get('device') or 'device'} "
        "(a stand-in that runs on the CPU), not from real hardware"
        + (f"; its {pairing}." if pairing else ".")
    )


def render_table(section: Section, width: int = TEXT_WIDTH) -> list[str]:
    """The section's table in plain text, no line over `width`: the columns `text_columns` shows
    (default all but `text_below`); while too wide, headers on two lines, then the widest column
    narrowed (its cells cut with "…"), the row's name last; under each row, the `text_below`
    columns that have a value, as indented lines."""
    return _layout(section, width)[0]


def _layout(section: Section, width: int) -> tuple[list[str], bool]:
    """The table's lines, and whether a cell was cut to fit."""
    below = section.text_below
    shown = (
        list(section.text_columns)
        if section.text_columns is not None
        else [i for i in range(len(section.headers)) if i not in below]
    )
    rows = []
    for n, row in enumerate(section.rows):
        level = section.indent[n] if n < len(section.indent) else 0
        picked = [row[i] for i in shown]
        if shown and shown[0] == 0:
            picked[0] = "  " * level + picked[0]
        rows.append(picked)
    cells = [min(max([len(r[c]) for r in rows], default=0), CELL_MAX) for c in range(len(shown))]
    headers = [[section.headers[i]] for i in shown]
    gaps = 2 * (len(shown) - 1)

    def widths_now() -> list[int]:
        return [max([w, *(len(h) for h in hs)]) for w, hs in zip(cells, headers, strict=True)]

    # too wide: headers go onto two lines, the one that gives the most room first
    while sum(widths_now()) + gaps > width:
        now = widths_now()
        gains = [
            (now[c] - max([cells[c], *(len(h) for h in _two_lines(hs[0]))]), c)
            for c, hs in enumerate(headers)
            if len(hs) == 1
        ]
        gain, c = max(gains, default=(0, -1))
        if gain <= 0:
            break
        headers[c] = _two_lines(headers[c][0])
    widths = widths_now()
    floors = [max([len(w) for h in hs for w in h.split()] + [CELL_MIN]) for hs in headers]
    if shown:
        floors[0] = max(floors[0], min(widths[0], FIRST_MIN))
    while sum(widths) + gaps > width:
        # the widest column that can give, the row's name only when no other can
        give = [c for c in range(len(shown)) if widths[c] > floors[c]]
        if not give:
            break
        others = [c for c in give if c > 0] or give
        widths[max(others, key=lambda c: (widths[c], c))] -= 1
    cut = False

    def line(texts: list[str]) -> str:
        nonlocal cut
        out = []
        for c, cell in enumerate(texts):
            if len(cell) > widths[c]:
                cell, cut = fmt.clip(cell, widths[c]), True
            out.append(cell.ljust(widths[c]) if c == 0 else cell.rjust(widths[c]))
        return "  ".join(out).rstrip()

    depth = max((len(h) for h in headers), default=1)
    out = [
        line([(hs if len(hs) == depth else ["", *hs])[k] for hs in headers]) for k in range(depth)
    ]
    out.append(line(["-" * w for w in widths]))
    for n, picked in enumerate(rows):
        out.append(line(picked))
        for i, label in below.items():
            value = section.rows[n][i]
            if value and value != "-":
                out += textwrap.wrap(
                    f"{label}: {value}" if label else value,
                    width,
                    initial_indent="    ",
                    subsequent_indent="      ",
                    break_on_hyphens=False,
                )
    return out, cut


def _two_lines(header: str) -> list[str]:
    """A header on two lines, split at the space that makes its longer line shortest (one line
    when it has no space)."""
    words = header.split()
    if len(words) < 2:
        return [header]
    splits = [[" ".join(words[:k]), " ".join(words[k:])] for k in range(1, len(words))]
    return min(splits, key=lambda s: (max(len(s[0]), len(s[1])), len(s[0])))


def text_sections(sections: Iterable[Section], width: int = TEXT_WIDTH) -> list[str]:
    """Sections as plain text: a `== title ==` line, the table (or `(none)`), the notes, each
    line at most `width` wide; a section whose text leaves columns out or cuts cells says so,
    and where the whole of it is."""
    lines: list[str] = []
    for section in sections:
        lines += ["", *wrap(f"== {section.title} ==", width)]
        notes = list(section.notes)
        if section.rows:
            table, cut = _layout(section, width)
            lines += table
            left_out = [
                h
                for i, h in enumerate(section.headers)
                if section.text_columns is not None
                and i not in section.text_columns
                and i not in section.text_below
            ]
            if left_out or cut:
                notes.append(
                    (
                        "Not shown here: " + ", ".join(f"'{h}'" for h in left_out) + ". "
                        if left_out
                        else ""
                    )
                    + ("Text cut to fit (…) is whole " if cut else "Every column is ")
                    + "in `hfsweep report --format markdown` or `--format json`, and on the "
                    "dashboard."
                )
        else:
            lines.append("(none)")
        for note in notes:
            lines += wrap(note, width)
    return lines


def wrap(text: str, width: int = TEXT_WIDTH) -> list[str]:
    """A paragraph as lines of at most `width` characters (a word longer than that, a path or
    a URL, on a line of its own)."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]
