"""Charts as inline SVG, drawn on the server: no JavaScript library, nothing fetched, the same
picture in the dashboard and the static site. Every label is escaped."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from markupsafe import Markup, escape

from ground import fmt

COLORS = ("#2563eb", "#16a34a", "#f59e0b", "#dc2626", "#7c3aed", "#0891b2")
CHAR_W = 6.2  # px per character of an 11 px label, a little over the average (system-ui)


def hbars(
    rows: Sequence[tuple[str, Sequence[float | None]]],
    *,
    series: Sequence[str],
    title: str,
    as_percent: bool = True,
    width: int = 640,
) -> Markup:
    """Horizontal grouped bars: one group per row label, one bar per series (values 0..1 when
    `as_percent`, else counts scaled to the largest). The label column is as wide as the
    longest label needs, up to a third of the chart plus a bit; longer labels are cut at a word
    boundary (the full label is the bar's tooltip)."""
    longest = max((len(label) for label, _ in rows), default=0)
    needed = longest * CHAR_W + 14
    label_w = math.ceil(min(max(needed, 120), width * 0.52))
    label_chars = longest if needed <= label_w else int((label_w - 14) / CHAR_W)
    bar_h, gap = 12, 8
    group_h = bar_h * len(series) + gap
    legend_h = 42
    height = legend_h + group_h * len(rows) + 10
    top = max((v or 0 for _, vals in rows for v in vals), default=0) or 1
    scale = 1.0 if as_percent else float(top)
    plot_w = width - label_w - 70
    parts = [_svg_open(width, height, title)]
    for i, name in enumerate(series):
        x = label_w + i * 170
        parts.append(
            f'<rect x="{x}" y="24" width="10" height="10" fill="{COLORS[i % len(COLORS)]}"/>'
            f'<text x="{x + 14}" y="33" class="legend">{escape(name)}</text>'
        )
    for r, (label, vals) in enumerate(rows):
        y0 = legend_h + r * group_h
        parts.append(
            f'<text x="{label_w - 6}" y="{y0 + group_h / 2 + 2:.0f}" text-anchor="end" '
            f'class="label">{escape(fmt.clip(label, label_chars))}</text>'
        )
        for i, v in enumerate(vals):
            w = 0.0 if v is None else max(0.0, min(1.0, v / scale)) * plot_w
            y = y0 + i * bar_h
            text = "-" if v is None else (f"{100 * v:.1f}%" if as_percent else f"{v:,.0f}")
            parts.append(
                f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h - 2}" '
                f'fill="{COLORS[i % len(COLORS)]}"><title>{escape(label)}: {escape(text)}'
                f"</title></rect>"
                f'<text x="{label_w + w + 4:.1f}" y="{y + bar_h - 3}" class="value">'
                f"{escape(text)}</text>"
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def lines(
    xlabels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    *,
    title: str,
    width: int = 640,
    height: int = 240,
) -> Markup:
    """A line chart of shares (0..1) over runs."""
    left, right, top, bottom = 44, 16, 46, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    n = len(xlabels)
    parts = [_svg_open(width, height, title)]
    for i, (name, _) in enumerate(series):
        x = left + i * 200
        parts.append(
            f'<rect x="{x}" y="24" width="10" height="10" fill="{COLORS[i % len(COLORS)]}"/>'
            f'<text x="{x + 14}" y="33" class="legend">{escape(name)}</text>'
        )
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        y = top + plot_h * (1 - tick)
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" class="value">'
            f"{int(tick * 100)}%</text>"
        )

    def xpos(i: int) -> float:
        return left + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    step = max(1, -(-n * 120 // plot_w))  # labels at least 120 px apart
    for i, label in enumerate(xlabels):
        if (n - 1 - i) % step == 0:  # counted back from the newest run, which always shows
            anchor = "start" if i == 0 and n > 1 else "end" if i == n - 1 and n > 1 else "middle"
            parts.append(
                f'<text x="{xpos(i):.1f}" y="{top + plot_h + 16}" text-anchor="{anchor}" '
                f'class="value">{escape(fmt.clip(label, 16))}</text>'
            )
    for s, (name, values) in enumerate(series):
        color = COLORS[s % len(COLORS)]
        pts = [(xpos(i), top + plot_h * (1 - v)) for i, v in enumerate(values) if v is not None]
        if len(pts) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>'
            )
        present = [(i, v) for i, v in enumerate(values) if v is not None]
        for (px, py), (idx, val) in zip(pts, present, strict=True):
            parts.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{color}"><title>'
                f"{escape(name)} {escape(xlabels[idx])}: {100 * (val or 0):.1f}%</title></circle>"
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def funnel_chart(funnel: list[dict[str, Any]]) -> Markup:
    return hbars(
        [(f["line"], (f["passed_share"], f["passed_downloads_share"])) for f in funnel],
        series=("share of models", "share of downloads"),
        title="Funnel: models that passed each stage",
    )


def funnel_by_dtype_chart(funnels: dict[str, list[dict[str, Any]]]) -> Markup:
    """The funnel of each dtype side by side: per line, a bar per dtype (share of downloads)."""
    dtypes = list(funnels)
    first = funnels[dtypes[0]]
    share = {d: {f["line"]: f["passed_downloads_share"] for f in funnels[d]} for d in dtypes}
    return hbars(
        [(f["line"], tuple(share[d].get(f["line"]) for d in dtypes)) for f in first],
        series=[f"{d}: share of downloads" for d in dtypes],
        title="Funnel per dtype: models that passed each stage",
    )


def by_dtype_chart(
    per: dict[str, list[dict[str, Any]]], *, label: str, title: str, limit: int = 12
) -> Markup:
    """Models per label (a reason, a stage, a signature), a bar per dtype; the labels with the
    most models at any dtype first."""
    dtypes = list(per)
    counts: dict[str, dict[str, float]] = {}
    for d in dtypes:
        for r in per[d]:
            counts.setdefault(str(r[label]), {})[d] = float(r["models"])
    top = sorted(counts, key=lambda k: (-max(counts[k].values()), k))[:limit]
    return hbars(
        [(k, tuple(counts[k].get(d, 0.0) for d in dtypes)) for k in top],
        series=dtypes,
        title=title,
        as_percent=False,
    )


def trend_chart(trend: list[dict[str, Any]]) -> Markup:
    return lines(
        [
            str(r["run_id"])[:15] + (f" {r.get('dtype')}" if (r.get("dtypes") or 1) > 1 else "")
            for r in trend
        ],
        [
            ("passed, by downloads", [r["passed_downloads_share"] for r in trend]),
            ("no CPU fallback, by downloads", [r["on_device_downloads_share"] for r in trend]),
            ("passed, by models", [r["passed_share"] for r in trend]),
        ],
        title="Coverage over runs",
    )


def reasons_chart(rows: list[dict[str, Any]], *, label: str, title: str, limit: int = 12) -> Markup:
    top = rows[:limit]
    return hbars(
        [(str(r[label]), (float(r["models"]),)) for r in top],
        series=("models",),
        title=title,
        as_percent=False,
    )


def _svg_open(width: int, height: int, title: str) -> str:
    return (
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {width} '
        f'{height}" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(title)}</title>"
        f'<text x="8" y="14" class="chart-title">{escape(title)}</text>'
    )
