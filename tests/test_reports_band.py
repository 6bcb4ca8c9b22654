"""Compile evidence in the reports (issue 17): coverage as a band ("lowers with evidence" and
"at most", unless the unverified ops fail), and missing ops marked by what they rest on.

A hand-built run r3 on the emulated neuron device (downloads in brackets):

| model             | dl  | compile                                        | outcome |
|-------------------|-----|------------------------------------------------|---------|
| org/a-pass-clean  | 1000| pass, evidence registered                      | passed, with evidence |
| org/b-pass-fallback| 500| pass, evidence none: aten::masked_scatter_backward | passed, at most |
| org/c-fail-compile| 300 | fail, aten::index_put, evidence raises         | failed |
| bert-x            | 200 | pass, evidence none: aten::masked_scatter_backward, aten::_fft_r2c; forward falls back on aten::_fft_r2c | passed, at most |

An older part of b (attempt 1) said compile evidence torch-mlir: the summary keeps attempt 2.
"""

from __future__ import annotations

import pytest

from reports import coverage, ops
from reports.query import StoreQuery
from reports.render import jsondoc, markdown, text
from reports.render.sections import band_section, report_sections
from reports.store import Store
from reports.summary import run_report
from tests.report_store_builder import ALL_PASS, ENCODER_PASS, _run, _write, rows_for


def _compile(rows: list[dict], **columns) -> list[dict]:
    for r in rows:
        if r["stage"] == "compile":
            r.update(columns)
    return rows


@pytest.fixture(scope="module")
def band_store(tmp_path_factory) -> Store:
    import datetime as dt

    store = Store(tmp_path_factory.mktemp("band"))
    a, fa = rows_for("r3", "org/a-pass-clean", ALL_PASS)
    b1, fb1 = rows_for("r3", "org/b-pass-fallback", ALL_PASS)
    b2, fb2 = rows_for("r3", "org/b-pass-fallback", ALL_PASS, attempt=2)
    c, fc = rows_for(
        "r3",
        "org/c-fail-compile",
        ["pass", "pass", "pass", "fail", "not_run"],
        error=(
            "compile",
            "UnlowerableOpError",
            "aten::index_put cannot be lowered",
            "sig",
            "aten::index_put",
        ),
    )
    d, fd = rows_for(
        "r3",
        "bert-x",
        ENCODER_PASS,
        reason="not_applicable",
        fallbacks={"forward": {"aten::_fft_r2c": 2}},
    )
    _compile(a, compile_evidence="registered")
    _compile(b1, compile_evidence="torch-mlir")
    _compile(b2, compile_evidence="none", unverified_ops=["aten::masked_scatter_backward"])
    _compile(c, compile_evidence="raises")
    _compile(
        d,
        compile_evidence="none",
        unverified_ops=["aten::masked_scatter_backward", "aten::_fft_r2c"],
    )
    _write(store, "r3", [(a, fa), (b1, fb1)])
    _write(store, "r3", [(b2, fb2), (c, fc), (d, fd)])
    store.write(
        "runs",
        "r3",
        [
            _run(
                "r3",
                dt.datetime(2026, 11, 2, tzinfo=dt.UTC),
                "finished",
                torch="2.14.1",
                requested=4,
            )
        ],
    )
    return store


@pytest.fixture(scope="module")
def q(band_store: Store) -> StoreQuery:
    return StoreQuery(band_store)


def test_the_band_counts_unverified_passes_in_its_upper_end_only(q: StoreQuery) -> None:
    band = coverage.band(q, "r3")
    assert band["recorded"] is True
    compile_line, every = band["lines"]
    assert (compile_line["with_evidence"], compile_line["at_most"]) == (1, 3)
    assert (compile_line["with_evidence_downloads"], compile_line["at_most_downloads"]) == (
        1000,
        1700,
    )
    assert (every["with_evidence"], every["at_most"]) == (1, 3)
    assert band["unverified_models"] == 2 and band["unverified_downloads"] == 700
    assert every["at_most_downloads_share"] == pytest.approx(1700 / 2000)


def test_the_headline_has_the_band(q: StoreQuery) -> None:
    h = coverage.headline(q, "r3")
    llama = next(a for a in h["list"] if a["architecture"] == "LlamaForCausalLM")
    assert llama["passes"] and not llama["passes_with_evidence"]  # b rests on nothing
    assert h["passing"] == 1 and h["passing_with_evidence"] == 0


def test_missing_ops_say_what_they_rest_on(q: StoreQuery) -> None:
    rows = {r["op"]: r for r in ops.missing_ops(q, "r3")}
    scatter = rows["aten::masked_scatter_backward"]
    assert scatter["evidence"] == ops.ABSENCE_OF_EVIDENCE
    assert scatter["unverified_models"] == 2 and scatter["blocked_downloads"] == 700
    assert rows["aten::index_put"]["evidence"] == ops.EVIDENCE_OF_ABSENCE  # a failure names it
    fft = rows["aten::_fft_r2c"]  # falls back eagerly, and unverified in compile
    assert fft["evidence"] == ops.EVIDENCE_OF_ABSENCE and fft["unverified_models"] == 1
    assert fft["blocked_models"] == 1


def test_every_format_shows_the_band(q: StoreQuery) -> None:
    report = run_report(q, "r3")
    section = band_section(report)
    assert section.rows[0][:2] == ["compile", "1"] and section.rows[0][4] == "3"
    assert "band" in [s.key for s in report_sections(report)]
    assert "unless those ops fail" in text.render(report)
    assert "Compile evidence band" in markdown.render(report)
    import json

    assert json.loads(jsondoc.render(report))["band"]["lines"][0]["with_evidence"] == 1


def test_a_store_without_evidence_is_no_band(tmp_path) -> None:
    store = Store(tmp_path)
    a, fa = rows_for("r9", "org/a-pass-clean", ALL_PASS)
    _write(store, "r9", [(a, fa)])
    band = coverage.band(StoreQuery(store), "r9")
    assert band["recorded"] is False
    assert band["lines"][0]["with_evidence"] == band["lines"][0]["at_most"] == 1


def test_the_dashboard_shows_the_band_and_the_marks(band_store: Store) -> None:
    from fastapi.testclient import TestClient

    from dashboard.app import create_app

    client = TestClient(create_app(band_store.uri, refresh_s=0, warm=False))
    overview = client.get("/?run=r3")
    assert overview.status_code == 200 and "Compile evidence band" in overview.text
    page = client.get("/ops?run=r3")
    assert page.status_code == 200 and "absence of evidence" in page.text
    data = client.get("/api/ops?run=r3").json()
    marks = {o["op"]: o["evidence"] for o in data["ops"]}
    assert marks["aten::masked_scatter_backward"] == "absence of evidence"
