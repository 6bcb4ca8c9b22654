"""Renderers: number formats, charts and tables escape what they draw, the CSV keeps formulas
inert, markdown cells cannot break the table."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from ground import fmt
from reports.query import StoreQuery
from reports.render import charts, html_site, markdown, text
from reports.summary import run_report
from tests.report_store_builder import build_hand_store
from tests.store_writes import write_model_rows


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
    write_model_rows(store, "r1", res, fb)
    q = StoreQuery(store)
    files = html_site.write_site(q, run_report(q), tmp_path / "site")
    names = [f.relative_to(tmp_path / "site").as_posix() for f in files]
    page = "models/" + html_site.model_file_name('=HYPERLINK("http://x")')
    assert names == [
        "index.html",
        "models.html",
        page,
        "glossary.html",
        "report.json",
        "models.csv",
    ]
    assert "/" not in page[len("models/") :] and page.endswith(".html")
    rows = list(csv.DictReader((tmp_path / "site" / "models.csv").open()))
    assert rows[0]["model_id"].startswith("'=")


def test_static_site_a_page_per_model_and_op_linked_both_ways(tmp_path: Path) -> None:
    import base64
    import hashlib
    import html as html_lib
    from urllib.parse import unquote, urlsplit

    from tests.report_store_builder import EVIL_ID

    build_hand_store(tmp_path / "s")
    q = StoreQuery(tmp_path / "s")
    site = tmp_path / "site"
    files = html_site.write_site(q, run_report(q), site)
    pages = {f.relative_to(site).as_posix() for f in files}
    model_page = {m: "models/" + html_site.model_file_name(m) for m in (
        "org/b-pass-fallback", "org/c-fail-compile", EVIL_ID, "bert-x")}  # fmt: skip
    assert set(model_page.values()) <= pages
    assert len([p for p in pages if p.startswith("models/")]) == 8  # every model of the run
    assert {p for p in pages if p.startswith("ops/")} == {
        "ops/aten__histc.html",
        "ops/aten__nonzero.html",
    }
    # links both ways: a model page to its ops, an op page to its models
    c = (site / model_page["org/c-fail-compile"]).read_text()
    assert 'href="../ops/aten__nonzero.html">aten::nonzero</a>' in c
    assert 'href="../ops/aten__histc.html">aten::histc</a>' in c
    assert "hfsweep check org/c-fail-compile --device neuron" in c  # the repro command
    assert 'href="https://huggingface.co/org/c-fail-compile"' in c
    nonzero = (site / "ops/aten__nonzero.html").read_text()
    assert f'href="../{model_page["org/c-fail-compile"]}"' in nonzero  # its failure names it
    assert "hfsweep check org/c-fail-compile --device neuron" in nonzero
    histc = (site / "ops/aten__histc.html").read_text()
    assert f'href="../{model_page["org/b-pass-fallback"]}"' in histc  # it falls back on it
    index = (site / "index.html").read_text()
    assert '<a href="ops/aten__histc.html">aten::histc</a>' in index  # missing ops, linked
    listing = (site / "models.html").read_text()
    assert f'href="{model_page["org/c-fail-compile"]}"' in listing
    assert '<a class="op" href="ops/aten__nonzero.html">aten::nonzero</a>' in listing
    # every link of every page leads to a file of the site, or out to the Hub
    for page in (p for p in pages if p.endswith(".html")):
        html = (site / page).read_text()
        for href in re.findall(r'href="([^"]*)"', html):
            if href.startswith("https://huggingface.co/"):
                continue
            target = urlsplit(href)
            assert not target.scheme and not target.netloc, (page, href)
            path = (site / page).parent / unquote(target.path)
            assert path.resolve().is_file() and site in path.resolve().parents, (page, href)
        assert 'rel="stylesheet"' not in html and " src=" not in html
        # self-contained: the policy lets no request out, and no script but the search
        found = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', html)
        assert found, page
        policy = html_lib.unescape(found.group(1))  # as the browser reads the attribute
        assert "default-src 'none'" in policy, page
        scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
        if page == "models.html":
            assert len(scripts) == 1 and len(scripts[0]) < 2000
            digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
            assert f"script-src 'sha256-{digest}'" in policy
        else:
            assert scripts == [] and "script-src 'none'" in policy, page
            assert "<script" not in html.replace("&lt;script", ""), page
    evil = (site / model_page[EVIL_ID]).read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in evil and "huggingface.co" not in evil
    assert all("<" not in p and ">" not in p for p in pages)


def test_chart_labels_are_not_cut_when_they_fit() -> None:
    op = "aten::_native_batch_norm_legit_no_training"
    svg = charts.hbars([(op, (3.0,)), ("TimeoutError (no op named)", (1.0,))], series=("models",),
                       title="t", as_percent=False)  # fmt: skip
    assert f">{op}</text>" in svg and ">TimeoutError (no op named)</text>" in svg
    long = "RuntimeError: " + "many words in a very long label " * 5
    svg = charts.hbars([(long, (1.0,))], series=("models",), title="t", as_percent=False)
    label = re.search(r'class="label">([^<]*)</text>', svg).group(1)
    assert label.endswith("…") and long.startswith(label[:-1]) and label[-2] != " "


def test_time_taken_says_which_stages_ran_outside_the_model_process() -> None:
    """A wall shorter than the stages' sum reads as what it is: the distributed stages' ranks
    ran in processes of their own."""
    from ground import fmt

    assert (
        fmt.time_taken(0.4, 2.5)
        == "stages 0.40 s; model process 2.50 s (wall: set-up, stages, exit)"
    )
    rows = [
        {"stage": "load", "duration_s": 0.2},
        {"stage": "ddp", "duration_s": 1.5},
        {"stage": "fsdp", "duration_s": 1.4},
    ]
    assert fmt.ranks_seconds(rows, ("ddp", "fsdp", "tp")) == pytest.approx(2.9)
    assert fmt.ranks_seconds(rows[:1], ("ddp", "fsdp", "tp")) is None
    assert fmt.time_taken(3.1, 0.69, 2.9) == (
        "stages 3.10 s (2.90 s of them in the distributed stages' rank processes, outside the "
        "model process); model process 0.69 s (wall: set-up, the other stages, exit)"
    )
