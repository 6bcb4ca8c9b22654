"""The op sweep's reading side on hand-built runs: denominators, verdicts, the join to the model
sweep, the report and static site, the dashboard pages and their escaping."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from urllib.parse import quote

import pytest

from reports import op_sweep
from reports.query import StoreQuery
from reports.summary import run_report
from tests.op_store_builder import EVIL_SAMPLE, OP_RUN, build_op_run
from tests.report_store_builder import build_hand_store


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    build_hand_store(root)
    build_op_run(root)
    return root


def test_denominators_in_torchneuron_form(store: Path) -> None:
    oq = op_sweep.OpSweepQuery(StoreQuery(store).store)
    d = oq.denominators(OP_RUN)
    t = d["total"]
    assert t["total"] == 15
    assert (t["skipped_pytorch"], t["skipped_device"], t["skipped_device_no_lowering"]) == (2, 2, 1)
    assert (t["passed"], t["passed_native"], t["passed_fallback"]) == (6, 3, 3)
    assert (t["failed"], t["failed_error"], t["failed_timeout"], t["wrong"], t["not_run"]) == (
        3,
        2,
        1,
        1,
        1,
    )
    # the tree adds up
    assert t["total"] == t["skipped_pytorch"] + t["skipped_device"] + t["run_on_device"]
    assert t["run_on_device"] == t["passed"] + t["failed"] + t["wrong"] + t["not_run"]
    assert d["by_dtype"]["fp32"]["total"] == 12 and d["by_dtype"]["bf16"]["total"] == 3
    assert d["dtypes"] == ["fp32", "bf16"]
    reasons = {r["reason"]: r for r in d["skip_reasons"]}
    assert reasons["device_declared"]["no_native_lowering"] == 1
    assert reasons["dtype_not_supported"]["group"] == "pytorch"


def test_per_op_verdicts_and_pass_rates(store: Path) -> None:
    oq = op_sweep.OpSweepQuery(StoreQuery(store).store)
    ops = oq.summary_by_op(OP_RUN)
    assert ops["aten::histc"]["verdict"] == "correct_not_native"
    assert ops["aten::histc"]["pass_rate"] == 1.0
    assert ops["aten::nonzero"]["verdict"] == "fails"
    assert ops["aten::nonzero"]["pass_rate"] == 0.5
    add = ops["aten::add"]  # add.Tensor under its base name
    assert (add["samples"], add["passed"], add["wrong"], add["skipped"]) == (3, 1, 1, 1)
    assert add["verdict"] == "wrong" and add["overloads"] == ["aten::add.Tensor"]
    assert ops["aten::sort"]["verdict"] == "skipped"
    assert "aten::zeta" not in ops  # op-level PyTorch skips dispatch nothing
    bf16 = oq.summary_by_op(OP_RUN, "bf16")
    assert set(bf16) == {"aten::add"} and bf16["aten::add"]["pass_rate"] is None


def test_stored_summary_matches_live_one(store: Path) -> None:
    from sweep.op_driver import write_summary

    q = StoreQuery(store)
    write_summary(q.store, OP_RUN)
    write_summary(q.store, OP_RUN)  # a resumed run replaces its summary
    assert len(q.store.part_files("op_summary", OP_RUN)) == 1
    stored = sorted(
        q.store.read("op_summary", OP_RUN).to_pylist(), key=lambda r: (r["op"], r["dtype"])
    )
    live = op_sweep.OpSweepQuery(q.store).summary(OP_RUN)
    assert [(r["op"], r["dtype"], r["passed"], r["failed"]) for r in stored] == [
        (r["op"], r["dtype"], r["passed"], r["failed"]) for r in live
    ]
    assert all(r["device"] == "neuron" and r["device_emulated"] for r in stored)


def test_join_to_the_model_sweep(store: Path) -> None:
    q = StoreQuery(store)
    assert op_sweep.op_run_for_model_run(q, "r2") == OP_RUN
    joined = op_sweep.joined_ops(q, "r2", OP_RUN)
    assert joined["named_ops"] == 2  # histc and nonzero (the orphan part stays invisible)
    assert joined["by_verdict"]["correct_not_native"] == 1
    assert joined["by_verdict"]["fails"] == 1
    [cheap] = joined["correct_not_native"]
    assert cheap["op"] == "aten::histc" and cheap["models"] == 2 and cheap["downloads"] == 800
    report = run_report(q, "r2")
    by_op = {r["op"]: r for r in report["missing_ops"]}
    assert by_op["aten::histc"]["op_sweep"]["pass_rate"] == 1.0
    assert by_op["aten::nonzero"]["op_sweep"]["verdict"] == "fails"
    assert report["op_sweep"]["op_run_id"] == OP_RUN


def test_no_op_run_on_another_device(tmp_path: Path) -> None:
    root = tmp_path / "store"
    build_hand_store(root)
    q = StoreQuery(root)
    assert op_sweep.op_run_for_model_run(q, "r2") is None
    report = run_report(q, "r2")
    assert report["op_sweep"] is None
    assert all(r["op_sweep"] is None for r in report["missing_ops"])


def test_models_by_op(store: Path) -> None:
    q = StoreQuery(store)
    m = op_sweep.op_models(q, "r2", "aten::histc.default")
    assert [r["model_id"] for r in m["models"]] == ["org/b-pass-fallback", "org/c-fail-compile"]
    assert m["downloads"] == 800 and m["total"] == 2
    assert op_sweep.op_models(q, "r2", "aten::sin")["total"] == 0


def test_text_report_and_static_site(store: Path, tmp_path: Path, capsys) -> None:
    from sweep.commands import report

    args = argparse.Namespace(store=str(store), run="r2", format="text", out=None, top=10)
    assert report.run(args) == 0
    text = capsys.readouterr().out
    assert "Op sweep: denominators (run o1, neuron (emulated))" in text
    assert "op sweep pass rate" in text
    assert "correct but not native" in text
    site = tmp_path / "site"
    args = argparse.Namespace(store=str(store), run="r2", format="html", out=str(site), top=10)
    assert report.run(args) == 0
    assert (site / "op-sweep.html").is_file()
    page = (site / "ops" / "aten__histc.html").read_text()
    assert "org/b-pass-fallback" in page and "correct not native" in page
    evil = (site / "ops" / "aten__evil.html").read_text()
    assert EVIL_SAMPLE not in evil and "&lt;script&gt;" in evil
    assert "<script" not in (site / "op-sweep.html").read_text()
    data = json.loads((site / "report.json").read_text())
    assert data["op_sweep"]["denominators"]["total"]["total"] == 15


def test_op_file_names_stay_in_their_folder() -> None:
    from reports.render.op_site import op_file_name

    for hostile in ("../../etc/passwd", "aten::x/../../y", "a\\b", "..", "kernel:histogram_cpu"):
        name = op_file_name(hostile)
        assert "/" not in name and "\\" not in name and name not in (".", "..")


def test_dashboard_op_pages(store: Path) -> None:
    from fastapi.testclient import TestClient

    from dashboard.app import create_app

    client = TestClient(create_app(str(store), refresh_s=0, warm=False))
    page = client.get("/ops/" + quote("aten::histc", safe=""))
    assert page.status_code == 200
    assert "org/b-pass-fallback" in page.text and "correct not native" in page.text
    assert 'data-emulated="true"' in page.text
    api = client.get("/api/ops/aten::nonzero.out").json()
    assert api["op"] == "aten::nonzero" and api["op_run_id"] == OP_RUN
    assert {r["dtype"]: r["failed"] for r in api["sweep"]["by_dtype"]} == {"fp32": 1}
    assert [m["model_id"] for m in api["models"]["models"]] == ["org/c-fail-compile"]
    evil = client.get("/ops/aten::evil")
    assert evil.status_code == 200 and EVIL_SAMPLE not in evil.text
    assert "&lt;script&gt;alert(&#39;op&#39;)&lt;/script&gt;" in evil.text
    assert client.get("/ops/aten::never_seen").status_code == 404
    bad = client.get("/api/ops/" + quote("aten::x'; DROP TABLE ops; --", safe=""))
    assert bad.status_code == 400 and "ATen op name" in bad.json()["error"]
    assert client.get("/ops/aten::histc?op_run=nope").status_code == 404
    assert client.get("/ops/aten::histc?op_run=../x").status_code == 400
    sweep = client.get("/op-sweep")
    assert sweep.status_code == 200 and "Every ATen op dispatched" in sweep.text
    assert 'href="/ops/aten%3A%3Ahistc' in sweep.text
    listing = client.get("/api/op-sweep").json()
    assert listing["op_run_id"] == OP_RUN and listing["model_run_id"] == "r2"
    missing = client.get("/ops?run=r2")
    assert missing.status_code == 200 and "op sweep pass rate" in missing.text
    assert '100.0%<div class="meta">correct not native</div>' in missing.text
    assert client.get("/api/ops?run=r2").json()["ops"][0]["op_sweep"] is not None
