"""The plain-text report fits a terminal of a stated width (`TEXT_WIDTH`, 120): notes wrap, a
wide table puts its headers on two lines, prints long detail (an error, the most downloaded
models, the op sweep's verdict) under its row and narrows the rest, and says what it left out
and where the whole of it is. On a store shaped like the demo's, a run of several dtypes and an
op sweep alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.op_sweep import op_sweep_section_data
from reports.query import StoreQuery
from reports.render import text
from reports.render.op_sections import render_op_text
from reports.render.tables import TEXT_WIDTH, Section, render_table, text_sections
from reports.summary import run_report
from tests.dtype_store_builder import build_dtype_store
from tests.op_store_builder import build_op_run
from tests.page_store_builder import LONG_FAILURES, build_pages_store


def too_long(out: str, width: int = TEXT_WIDTH) -> list[str]:
    return [
        line for line in out.splitlines() if len(line) > width and not line.startswith("store: ")
    ]


@pytest.mark.parametrize("build", [build_pages_store, build_dtype_store])
def test_the_report_fits_its_width(tmp_path: Path, build) -> None:
    build(tmp_path / "s")
    out = text.render(run_report(StoreQuery(tmp_path / "s")))
    assert too_long(out) == []
    assert out.count("== ") >= 10  # every section is there
    narrow = text.render(run_report(StoreQuery(tmp_path / "s")), width=100)
    assert too_long(narrow, 100) == []


def test_long_detail_goes_under_its_row_whole(tmp_path: Path) -> None:
    build_pages_store(tmp_path / "s")
    out = text.render(run_report(StoreQuery(tmp_path / "s")))
    lines = out.splitlines()
    failures = lines[lines.index("== Failure clusters (first failing stage, by error) ==") :]
    # the error under its row, wrapped, not cut to a column; the models under it
    joined = " ".join(line.strip() for line in failures[:40])
    assert "ValueError: offs must be divisible by 128: the per-expert routing offsets" in joined
    assert f"most downloaded: {LONG_FAILURES[0][0]}" in joined
    ops = lines[lines.index("== Missing ops, ranked by the downloads they touch ==") :]
    assert any(line.startswith("    op sweep pass rate: 100.0% (correct") for line in ops)
    notes = " ".join(ops[:60])
    assert "Not shown here: 'fell back in', 'failure names it', 'no evidence in'" in notes
    assert "--format markdown" in notes


def test_the_op_sweep_alone_fits(tmp_path: Path) -> None:
    build_op_run(tmp_path / "s")
    out = render_op_text(op_sweep_section_data(StoreQuery(tmp_path / "s"), None))
    assert "EMULATED DEVICE" in out and too_long(out) == []


def test_a_wide_table_is_narrowed_and_says_where_the_rest_is() -> None:
    section = Section(
        "wide",
        "A wide table",
        ["name", "a figure with a long header", "text"],
        [["aten::a_long_op_name_here", "12", "a long explanation " * 5]],
        ["a note " * 20],
    )
    table = render_table(section, 60)
    assert max(len(line) for line in table) <= 60
    assert table[0].split() == ["a", "figure", "with"] and table[1].split()[:3] == [
        "name",
        "a",
        "long",
    ]  # the long header on two lines
    assert table[-1].startswith("aten::a_long_op_name_here") and table[-1].endswith("…")
    lines = text_sections([section], 60)
    assert max(len(line) for line in lines) <= 60
    assert "Text cut to fit (…) is whole in" in " ".join(lines)
    # a table that fits is laid out as it was: one header line, nothing cut, no pointer
    small = Section("s", "Small", ["op", "models"], [["aten::add", "3"]])
    assert render_table(small) == ["op         models", "---------  ------", "aten::add       3"]
    assert text_sections([small])[-1] == "aten::add       3"
