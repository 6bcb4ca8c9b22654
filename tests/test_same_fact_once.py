"""The same fact said one way (issue 39, item 7), on hand-built stores (no sweep): the headline's
architectures as is and with a switch the run's alternatives proved, each with its condition;
a stage that does not apply is `n/a` in models.csv as in the table; a model that shares its
tiny model says so beside its time."""

from __future__ import annotations

import csv
import datetime as dt

import pytest

from reports.query import StoreQuery
from reports.render import html_site
from reports.render.text import render as render_text
from reports.store import Store
from reports.summary import run_report
from tests.report_store_builder import ALL_PASS, T0, build_hand_store, configs_for, rows_for

FAILED_COMPILE = ["pass", "pass", "pass", "fail", "not_run"]


@pytest.fixture(scope="module")
def switched(tmp_path_factory) -> StoreQuery:
    """Llama passes as is; Mixtral fails at compile and passes every stage with a switch; Qwen2
    fails, and its switch fails too."""
    root = tmp_path_factory.mktemp("switch")
    results, fallbacks = [], []
    for model_id, statuses in (
        ("org/a-pass-clean", ALL_PASS),
        ("org/c-fail-compile", FAILED_COMPILE),
        ("org/g-timeout", FAILED_COMPILE),
    ):
        res, fbs = rows_for("r", model_id, statuses)
        results += res
        fallbacks += fbs
    # org/b-pass-fallback shares org/a-pass-clean's tiny model: its rows say so
    res, _ = rows_for("r", "org/b-pass-fallback", ALL_PASS)
    for row in res:
        row.update(dedup_of="org/a-pass-clean", wall_s=3.5)
    results += res
    alternatives = [
        {
            "run_id": "r", "model_id": model_id, "device": "neuron", "device_emulated": True,
            "dtype": "fp32", "implementation": "experts_implementation=batched_mm",
            "stage": stage, "status": status, "attempt": 1,
            "finished_at": T0 + dt.timedelta(minutes=i),
        }
        for model_id, last in (("org/c-fail-compile", "pass"), ("org/g-timeout", "fail"))
        for i, (stage, status) in enumerate(
            zip(["load", "forward", "backward", "compile", "generate"],
                ["pass", "pass", "pass", last, "pass" if last == "pass" else "not_run"],
                strict=True)
        )
    ]  # fmt: skip
    Store(root).write_parts(
        "r",
        {
            "fallbacks": fallbacks,
            "configs": configs_for(results),
            "alternatives": alternatives,
            "results": results,
        },
    )
    return StoreQuery(str(root))


@pytest.fixture(scope="module")
def site(switched, tmp_path_factory):
    out = tmp_path_factory.mktemp("switch-site")
    html_site.write_site(switched, run_report(switched, "r"), out)
    return out


def test_the_headline_says_as_is_and_with_the_proven_switch(switched, site):
    report = run_report(switched, "r")
    h = report["headline"]
    # Llama (a, b), Mixtral (c), Qwen2 (g): Llama passes as is, Mixtral with the switch
    assert (h["architectures"], h["passing"], h["passing_with_switch"]) == (3, 1, 2)
    assert h["switches"] == ["experts_implementation=batched_mm"]
    text = render_text(report)
    assert "1 pass every stage as is" in text
    assert "With experts_implementation=batched_mm: 2 of 3 (66.7%)" in text
    index = (site / "index.html").read_text()
    assert (
        'pass as is; <span id="headline-switch">2 of 3 with experts_implementation=batched_mm'
        in index
    )


def test_a_model_sharing_a_tiny_model_says_so_beside_its_time(site):
    table = (site / "models.html").read_text()
    assert "title=\"measured on org/a-pass-clean, which shares this model's tiny model" in table
    assert table.count('<div class="meta shared">shared</div>') == 1


def test_models_csv_says_n_a_where_the_table_does(tmp_path):
    build_hand_store(tmp_path / "s")
    path = html_site._write_csv(StoreQuery(tmp_path / "s"), "r2", tmp_path / "models.csv")
    rows = {r["model_id"]: r for r in csv.DictReader(path.open())}
    assert rows["bert-x"]["s_generate"] == "n/a"  # an encoder: generate does not apply
    assert rows["org/e-remote"]["s_generate"] == "skip"  # skipped: remote_code
    assert rows["org/a-pass-clean"]["s_generate"] == "pass"
