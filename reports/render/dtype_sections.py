"""A run of several dtypes as titled tables: every section of the one-dtype report built once per
dtype and put side by side (a column group per dtype, rows matched by their label), or stacked
with a dtype column where rows are a ranking of their own; then what differs between the dtypes.

Which sections go side by side, and with which columns, is `SIDE_BY_SIDE` (by section key); a
section not named there is stacked, and a section that is the same for every dtype (coverage over
runs) is shown once. A run of one dtype never comes here: it looks as it always did.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ground import fmt
from reports.dtypes import KINDS, missing_ops_side_by_side, problem
from reports.render.tables import Section

Builder = Callable[[dict[str, Any]], Section]

# section key -> (columns shown once, columns repeated per dtype); column 0 is the row label
SIDE_BY_SIDE: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "denominators": ((), (1, 2)),
    "funnel": ((), (1, 3, 5)),  # passed, % downloads, % downloads with no fallback
    "headline": ((1,), (3, 4, 5)),  # models; passes, no fallback, first problem
    "band": ((), (1, 3, 4, 6)),  # with evidence, its % dl; at most, its % dl
    "fine_tune": ((), (1, 3, 5)),  # passed, % downloads, % dl no fallback
    "sharding": ((), (1, 3, 4)),  # passed, % downloads, failed
    "hf_stack": ((), (1, 3, 4)),  # passed, % downloads, failed
    **{
        f"by_{key}": ((1, 2), (5, 7, 8))  # models, downloads; passed, % dl, % dl no fallback
        for key in ("library", "pipeline_tag", "model_type", "architecture")
    },
}
SAME_FOR_EVERY_DTYPE = frozenset({"runs"})


def dtype_view(report: dict[str, Any], dtype: str) -> dict[str, Any]:
    """The report as one dtype's: its figures in place of the top level's."""
    return {**report, **report["by_dtype"][dtype], "dtype": dtype}


def sections_by_dtype(report: dict[str, Any], builders: Sequence[Builder]) -> list[Section]:
    """Each builder's section per dtype, combined; the dtype comparison after the funnel and the
    missing ops of each dtype side by side."""
    dtypes = list(report["by_dtype"])
    views = {d: dtype_view(report, d) for d in dtypes}
    out: list[Section] = []
    for build in builders:
        per = {d: build(views[d]) for d in dtypes}
        key = next(iter(per.values())).key
        if key == "ops":
            out.append(ops_section(report))
        elif key in SAME_FOR_EVERY_DTYPE:
            out.append(per[dtypes[0]])
        elif key in SIDE_BY_SIDE:
            shared, each = SIDE_BY_SIDE[key]
            out.append(side_by_side(per, shared=shared, each=each))
        else:
            out.append(stacked(per))
        if key == "funnel":
            out += comparison_sections(report)
    return out


def side_by_side(
    per: dict[str, Section], *, shared: Sequence[int] = (), each: Sequence[int]
) -> Section:
    """One table from one section per dtype: the label, the `shared` columns once (from the
    first dtype that has the row), then the `each` columns of every dtype. Rows are matched by
    their label and the labels above them (a tree's indent); a row one dtype lacks is '-'."""
    dtypes = list(per)
    first = per[dtypes[0]]
    keyed = {d: _keyed_rows(s) for d, s in per.items()}
    order: list[tuple[str, ...]] = []
    for d in dtypes:  # the union of the rows, each dtype's new rows after their predecessor
        cursor = -1
        for key in keyed[d]:
            if key in order:
                cursor = order.index(key)
            else:
                cursor += 1
                order.insert(cursor, key)
    rows, indent = [], []
    for key in order:
        found = next(keyed[d][key] for d in dtypes if key in keyed[d])
        row = [found[1][0], *(found[1][i] for i in shared)]
        for d in dtypes:
            mine = keyed[d].get(key)
            row += [mine[1][i] if mine else "-" for i in each]
        rows.append(row)
        indent.append(found[0])
    headers = [
        first.headers[0],
        *(first.headers[i] for i in shared),
        *(f"{d} {first.headers[i]}".strip() for d in dtypes for i in each),
    ]
    return Section(
        first.key,
        first.title,
        headers,
        rows,
        _notes(per),
        indent if first.indent else [],
    )


def stacked(per: dict[str, Section]) -> Section:
    """One table from one section per dtype: each dtype's rows in turn, a dtype column after
    the first."""
    first = next(iter(per.values()))
    rows = [[row[0], d, *row[1:]] for d, s in per.items() for row in s.rows]

    def moved(i: int) -> int:  # a column's place once the dtype column is in
        return i if i == 0 else i + 1

    return Section(
        first.key,
        first.title,
        [first.headers[0], "dtype", *first.headers[1:]],
        rows,
        _notes(per),
        keys=[k for s in per.values() for k in (s.keys or [row[0] for row in s.rows])],
        text_columns=(
            None
            if first.text_columns is None
            else (0, 1, *(moved(i) for i in first.text_columns if i))
        ),
        text_below={moved(i): label for i, label in first.text_below.items()},
    )


def _keyed_rows(section: Section) -> dict[tuple[str, ...], tuple[int, list[str]]]:
    """Rows by their label path (the labels of the rows above them in the tree, and theirs)."""
    out: dict[tuple[str, ...], tuple[int, list[str]]] = {}
    path: list[str] = []
    for i, row in enumerate(section.rows):
        level = section.indent[i] if i < len(section.indent) else 0
        path = [*path[:level], row[0]]
        key = tuple(path)
        while key in out:  # the same label twice under one parent
            key = (*key, "'")
        out[key] = (level, row)
    return out


def _notes(per: dict[str, Section]) -> list[str]:
    """Notes every dtype shares once; a note of some dtypes only, prefixed with them."""
    notes: dict[str, list[str]] = {}
    for d, s in per.items():
        for n in s.notes:
            notes.setdefault(n, []).append(d)
    return [n if len(ds) == len(per) else f"{', '.join(ds)}: {n}" for n, ds in notes.items()]


# ---- what only a run of several dtypes has ---------------------------------------------------


def comparison_sections(report: dict[str, Any]) -> list[Section]:
    """Per other dtype against the first, models passing in both / one / neither; then the
    models whose rows differ, with the op or error that differs."""
    diff = report.get("dtype_differences")
    if not diff:
        return []
    rows: list[list[str]] = []
    indent: list[int] = []
    for p in diff["pairs"]:
        a, b = p["a"], p["b"]
        rows.append([f"{a} and {b}", fmt.count(p["models"]), fmt.downloads(p["downloads"]), ""])
        indent.append(0)
        for what, label in (("passed", "passes every stage"), ("on_device", "with no fallback")):
            for name, where in (
                ("both", "in both"),
                ("only_a", f"in {a} only"),
                ("only_b", f"in {b} only"),
                ("neither", "in neither"),
            ):
                cell = p[what][name]
                rows.append(
                    [
                        f"{label} {where}",
                        fmt.count(cell["models"]),
                        fmt.downloads(cell["downloads"]),
                        fmt.pct(cell["downloads_share"]),
                    ]
                )
                indent.append(1)
    compared = Section(
        "dtypes",
        "Dtypes compared: models passing in one dtype and not another",
        ["", "models", "downloads", "% dl"],
        rows,
        [
            "Models with rows at both dtypes (skipped ones included); '% dl' is of their "
            "downloads. 'with no fallback': passes every stage with no op falling back to the "
            "CPU.",
        ],
        indent,
    )
    dtypes = diff["dtypes"]
    listed = [
        [
            m["model_id"],
            fmt.downloads(m["downloads"]),
            *(_outcome_cell(m["by_dtype"].get(d)) for d in dtypes),
            m["cause"],
        ]
        for m in diff["models"]
    ]
    kinds = ", ".join(f"{fmt.count(n)} {KINDS[k]}" for k, n in diff["by_kind"].items() if n)
    differing = Section(
        "dtype_differences",
        "Models that differ between dtypes",
        ["model", "downloads", *dtypes, "what differs"],
        listed,
        [
            f"{fmt.count(diff['differing'])} models ({fmt.pct(diff['differing_downloads_share'])} "
            f"of downloads) differ between {', '.join(dtypes)}" + (f": {kinds}." if kinds else ".")
            + (f" The {len(listed)} most downloaded are listed." if len(listed) < diff["differing"]
               else ""),
            "'what differs': each dtype's first failure (stage, status, and the op it names or "
            "its error), and the ops that fall back at one dtype only.",
        ],
        text_below={2 + len(dtypes): "what differs"},
    )  # fmt: skip
    return [compared, differing]


def _outcome_cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    if r.get("outcome") == "passed":
        n = r.get("fallback_ops") or 0
        return "passes" + (f" ({n} op{'s fall' if n != 1 else ' falls'} back)" if n else "")
    return problem(r)


def ops_section(report: dict[str, Any]) -> Section:
    """The missing ops of each dtype side by side: the models each touches at each dtype, its
    only-obstacle count, and the op sweep's results at that dtype."""
    dtypes = list(report["by_dtype"])
    merged = missing_ops_side_by_side({d: report["by_dtype"][d]["missing_ops"] for d in dtypes})
    rows = []
    for item in merged:
        row = [item["op"]]
        for d in dtypes:
            r = item["by_dtype"][d]
            row += (
                [
                    fmt.count(r["blocked_models"]),
                    fmt.pct(r["blocked_downloads_share"]),
                    fmt.count(r["sole_models"]),
                    fmt.op_sweep_cell(r.get("op_sweep")),
                ]
                if r
                else ["-", "-", "-", "-"]
            )
        rows.append(row)
    return Section(
        "ops",
        "Missing ops per dtype, ranked by the downloads they touch",
        [
            "op",
            *(
                f"{d} {h}"
                for d in dtypes
                for h in ("models", "% dl", "only obstacle", "op sweep pass rate")
            ),
        ],
        rows,
        [
            "Per dtype: the models the op touches at that dtype (it fell back, or a failure names "
            "it), their share of downloads, the models it alone keeps from running entirely on "
            "the device, and the op's own results over PyTorch's OpInfo samples of that dtype "
            "(`hfsweep ops`; '-' when no op-sweep run covers it). Each dtype's top ops are "
            "merged: '-' where the op is not among that dtype's.",
        ],
        # in text, each dtype's op sweep result goes under the row
        text_below={4 * n + 4: f"{d} op sweep pass rate" for n, d in enumerate(dtypes)},
    )
