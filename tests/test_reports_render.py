"""Renderers: number formats, charts and tables escape what they draw, the CSV keeps formulas
inert, markdown cells cannot break the table."""

from __future__ import annotations

import csv
from pathlib import Path

from reports.query import StoreQuery
from reports.render import charts, fmt, html_site, markdown, text
from reports.summary import run_report
from tests.report_store_builder import build_hand_store


def test_formats() -> None:
    assert fmt.count(1234567) == "1,234,567" and fmt.count(None) == "-"
    assert fmt.downloads(1_234_567) == "1.23M" and fmt.downloads(999) == "999"
    assert fmt.downloads(2_500_000_000) == "2.50B"
    assert fmt.pct(0.25) == "25.0%" and fmt.pct(None) == "-"
    assert fmt.of(3, 8) == "3 (37.5%)" and fmt.of(3, 0) == "3"


def test_charts_escape_labels() -> None:
    svg = charts.hbars([("<script>x</script>", (0.5, None))], series=("a&b", "c"), title="<t>")
    assert "<script>" not in svg and "&lt;script&gt;x&lt;/script&gt;" in svg
    assert "a&amp;b" in svg and "&lt;t&gt;" in svg and "50.0%" in svg
    line = charts.lines(["<r1>", "r2"], [("s", [0.1, 0.9])], title="trend")
    assert "&lt;r1&gt;" in line and "<polyline" in line
    assert "<svg" in charts.lines(["only"], [("s", [None])], title="one run, no value")


def test_text_and_markdown(tmp_path: Path) -> None:
    build_hand_store(tmp_path / "s")
    report = run_report(StoreQuery(tmp_path / "s"))
    out = text.render(report)
    assert out.splitlines()[0].startswith(
        "hfsweep report: run r2 (finished), device neuron (emulated)"
    )
    assert (
        "== Denominators ==" in out
        and "== Missing ops, ranked by the downloads they touch ==" in out
    )
    md = markdown.render(report)
    assert "> **EMULATED DEVICE" in md
    row = next(line for line in md.splitlines() if "pwned" in line)
    assert "<script>" not in row and "&lt;script&gt;" in row
    assert row.count("|") == 9  # 8 columns: no cell broke the table


def test_static_site_csv_formulas_inert(tmp_path: Path) -> None:
    from reports.store import Store
    from tests.report_store_builder import rows_for

    store = Store(tmp_path / "s")
    res, fb = rows_for("r1", "org/a-pass-clean", ["pass"] * 5)
    for r in res:
        r["model_id"] = '=HYPERLINK("http://x")'
    store.write_model_rows("r1", res, fb)
    q = StoreQuery(store)
    files = html_site.write_site(q, run_report(q), tmp_path / "site")
    names = [f.relative_to(tmp_path / "site").as_posix() for f in files]
    page = "models/" + html_site.model_file_name('=HYPERLINK("http://x")')
    assert names == ["index.html", "models.html", page, "report.json", "models.csv"]
    assert "/" not in page[len("models/") :] and page.endswith(".html")
    rows = list(csv.DictReader((tmp_path / "site" / "models.csv").open()))
    assert rows[0]["model_id"].startswith("'=")
