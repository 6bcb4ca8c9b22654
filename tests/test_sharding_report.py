"""The Sharding section on a hand-built store: the share of downloads passing ddp, fsdp and tp,
the collectives and ops that stop sharding ranked by the downloads they block, "no
tensor-parallel plan" as its own line, in the report, the dashboard (overview and model page),
`lookup`, and `check`'s lines.

Run "rs", device neuron (emulated), world size 2; every model but d ran load, forward, backward:

| model  | dl   | ddp  | fsdp                                   | tp                 |
|--------|------|------|----------------------------------------|--------------------|
| org/a  | 1000 | pass | pass                                   | pass               |
| org/b  |  500 | pass | fail: c10d::all_gather_single (rank 0) | skip: no_tp_plan   |
| org/e  |  200 | pass | pass                                   | skip: no_tp_plan   |
| org/c  |  300 | backward failed: not_run                                        |
| org/d  |  100 | skipped (remote_code) everywhere                                 |
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from reports.query import StoreQuery
from reports.store import Store

T0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
ALLREDUCE = {"op": "c10d::allreduce", "calls": 2, "bytes": 4096, "evidence": "registered"}
GATHER = {"op": "c10d::all_gather_single", "calls": 1, "bytes": 2048, "evidence": "raises"}


def _row(model: str, downloads: int, stage: str, status: str, **extra: Any) -> dict[str, Any]:
    distributed = stage in ("ddp", "fsdp", "tp") and status not in ("not_run",)
    return {
        "run_id": "rs",
        "model_id": model,
        "rank": 1,
        "downloads": downloads,
        "library": "transformers",
        "model_type": "llama",
        "architecture": "LlamaForCausalLM",
        "config_source": "none" if extra.get("reason") == "remote_code" else "hub",
        "device": "neuron",
        "device_emulated": True,
        "dtype": "fp32",
        "stage": stage,
        "status": status,
        "duration_s": 1.0,
        "attempt": 1,
        "finished_at": T0,
        "world_size": 2 if distributed else None,
        **extra,
    }


def _model(model: str, downloads: int, plan: dict[str, tuple[str, dict]]) -> list[dict]:
    rows = [_row(model, downloads, s, "pass") for s in ("load", "forward", "backward")]
    return rows + [
        _row(model, downloads, s, status, **extra) for s, (status, extra) in plan.items()
    ]


PASS = (
    "pass",
    {
        "collectives": [ALLREDUCE],
        "sharding_evidence": "registered",
        "rank_peak_memory_bytes": [1 << 20, 1 << 20],
    },
)
NO_PLAN = (
    "skip",
    {"reason": "no_tp_plan", "error_message": "transformers has no tensor-parallel plan for x"},
)
FSDP_FAIL = (
    "fail",
    {
        "collectives": [GATHER],
        "failing_op": "c10d::all_gather_single",
        "sharding_evidence": "raises",
        "failed_rank": 0,
        "error_type": "CollectiveNotImplemented",
        "error_message": "rank 0 of 2: ProcessGroupNeuron.all_gather_single: ...",
        "error_signature": "CollectiveNotImplemented: all_gather_single",
        "unsharded_peak_memory_bytes": 3 << 20,
        "rank_peak_memory_bytes": [1 << 19, 1 << 19],
    },
)


def build_store(root: Path) -> Store:
    store = Store(root)
    rows = [
        *_model("org/a", 1000, {"ddp": PASS, "fsdp": PASS, "tp": PASS}),
        *_model("org/b", 500, {"ddp": PASS, "fsdp": FSDP_FAIL, "tp": NO_PLAN}),
        *_model("org/e", 200, {"ddp": PASS, "fsdp": PASS, "tp": NO_PLAN}),
        _row("org/c", 300, "load", "pass"),
        _row("org/c", 300, "forward", "pass"),
        _row("org/c", 300, "backward", "fail", error_type="RuntimeError", error_message="x"),
        *[_row("org/c", 300, s, "not_run") for s in ("ddp", "fsdp", "tp")],
        *[
            _row("org/d", 100, s, "skip", reason="remote_code")
            for s in ("load", "forward", "backward", "ddp", "fsdp", "tp")
        ],
    ]
    store.write("results", "rs", rows)
    store.write(
        "runs",
        "rs",
        [
            {
                "run_id": "rs",
                "status": "finished",
                "started_at": T0,
                "updated_at": T0,
                "device": "neuron",
                "device_emulated": True,
                "dtype": "fp32",
                "stages": "load,forward,backward,ddp,fsdp,tp",
                "world_size": 2,
                "models_requested": 5,
            }
        ],
    )
    return store


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sharding") / "store"
    build_store(path)
    return path


@pytest.fixture(scope="module")
def report(root: Path) -> dict[str, Any]:
    from reports.summary import run_report

    return run_report(StoreQuery(Store(root)), "rs")


def test_the_share_of_downloads_passing_each_distributed_stage(report):
    sh = report["sharding"]
    assert sh["ran"] and sh["models"] == 5 and sh["downloads"] == 2100
    lines = {line["stage"]: line for line in sh["stages"]}
    assert (lines["ddp"]["passed"], lines["ddp"]["passed_downloads"]) == (3, 1700)
    assert lines["ddp"]["passed_downloads_share"] == pytest.approx(1700 / 2100)
    assert (lines["fsdp"]["passed"], lines["fsdp"]["failed"]) == (2, 1)
    # skipped: b and e (no plan); d, skipped whole, is the run's skip, not the stage's
    assert (lines["tp"]["passed"], lines["tp"]["skipped"], lines["tp"]["not_run"]) == (1, 2, 1)
    assert lines["ddp"]["skipped"] == 0
    assert sh["world_sizes"] == [2]


def test_no_tensor_parallel_plan_is_a_line_of_its_own(report):
    no_plan = report["sharding"]["no_plan"]
    assert (no_plan["models"], no_plan["downloads"]) == (2, 700)
    assert no_plan["top_models"] == ["org/b", "org/e"]


def test_what_stops_sharding_ranked_by_the_downloads_it_blocks(report):
    (blocker,) = report["sharding"]["blockers"]
    assert blocker["op"] == "c10d::all_gather_single"
    assert (blocker["models"], blocker["downloads"], blocker["stages"]) == (1, 500, ["fsdp"])
    assert blocker["evidence"] == ["raises"]


def test_a_model_without_a_plan_that_passes_the_rest_has_passed(root):
    from reports.models import model_detail

    e = model_detail(StoreQuery(Store(root)), "org/e", "rs")
    assert e["summary"]["outcome"] == "passed"


def test_the_report_text_has_the_sharding_sections(report):
    from reports.render.text import render

    text = render(report)
    assert "== Sharding: can I train or split it across ranks of the device? ==" in text
    assert "no tensor-parallel plan (tp skipped)" in text
    assert "== What stops sharding, ranked by downloads ==" in text
    assert "c10d::all_gather_single" in text


def test_the_dashboard_shows_the_sharding_card_and_the_model_page_section(root):
    from dashboard.app import create_app, model_url

    client = TestClient(create_app(str(root), refresh_s=0, warm=False))
    overview = client.get("/").text
    assert 'id="sharding-card"' in overview and "81.0% / 57.1% / 47.6%" in overview
    page = client.get(model_url("org/b", "rs")).text
    assert '<table id="sharding">' in page
    assert "c10d::all_gather_single" in page and "[raises]" in page
    assert "c10d::allreduce &times;2" in page
    api = client.get("/api" + model_url("org/b", "rs")).json()
    assert [t["stage"] for t in api["sharding"]] == ["ddp", "fsdp", "tp"]


def test_lookup_prints_the_sharding_lines(root):
    from reports.models import model_detail
    from sweep.commands.lookup import render_text

    text = render_text(model_detail(StoreQuery(Store(root)), "org/b", "rs"))
    assert "Sharding:" in text
    assert (
        "fsdp  fail           2 ranks  stopped by c10d::all_gather_single [raises] on rank 0"
        in text
    )
    assert "c10d::allreduce x2 4.00 KiB [registered]" in text
    assert "peak device memory per rank: 512.0 KiB / 512.0 KiB (unsharded step 3.00 MiB)" in text
    assert "tp    skip           2 ranks  no tensor-parallel plan" in text


def test_check_prints_the_sharding_lines(capsys):
    from types import SimpleNamespace

    from ground.schema import RESULTS_SCHEMA
    from sweep.commands.check import _print_text

    rows = [{name: None for name in RESULTS_SCHEMA.names} for _ in range(4)]
    for row, (stage, status) in zip(
        rows, [("load", "pass"), ("ddp", "pass"), ("fsdp", "fail"), ("tp", "skip")], strict=True
    ):
        row.update(stage=stage, status=status, dtype="fp32", config_source="hub", duration_s=1.0)
    rows[1].update(world_size=2, collectives=[ALLREDUCE], sharding_evidence="registered")
    rows[2].update(world_size=2, **FSDP_FAIL[1])
    rows[3].update(world_size=2, **NO_PLAN[1])
    planned = SimpleNamespace(
        entry=SimpleNamespace(model_id="org/b", downloads=500, rank=2), resolved=None, spec=None
    )
    _print_text(planned, rows, [], SimpleNamespace(name="neuron", emulated=True))
    out = capsys.readouterr().out
    assert "\nSharding:\n" in out
    assert "ddp   pass           2 ranks" in out
    assert (
        "fsdp  fail           2 ranks  stopped by c10d::all_gather_single [raises] on rank 0" in out
    )
    assert "tp    skip           2 ranks  no tensor-parallel plan" in out
