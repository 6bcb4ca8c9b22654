"""The neuron profile against the torch it runs on (issue 35): the profile names the torch it
was written for (the snapshot's pyproject), `torch-skew.json` says what differs from the
torch installed here, and a verdict about a name newer than the profile's torch is unverified
(`newer_than_profile`: in a band's upper bound, apart in the missing-ops ranking), never a fact
about the device. The process group's renamed collectives run on real groups in
tests/test_distributed_group.py and tests/test_distributed_stages.py."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reports import coverage, ops
from reports.query import StoreQuery
from reports.render import text
from reports.store import Store
from reports.summary import run_report
from runners.devices.neuron.skew import DATA_FILE as DATA
from tests.report_store_builder import ALL_PASS, _run, _write, rows_for

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = Path("/work/.mirror/parmoham-aws+test-repo-parmoham/repo")
# a torch 2.10 wheel (`pip download --no-deps torch==2.10.0`), for rerunning the script
OLD_WHEEL = Path(os.environ.get("HFSWEEP_TORCH_210_WHEEL", "/nonexistent"))
INSTALLED = importlib.metadata.version("torch").split("+", 1)[0]


def test_the_profile_names_the_torch_of_its_source() -> None:
    from runners.devices.neuron import skew

    found = json.loads(DATA.read_text())["profile_torch"]
    assert found["requirement"] == "torch~=2.10" and found["where"] == "pyproject.toml:8"
    assert found["source"]["commit"].startswith("98154b8")
    assert skew.profile_torch() == "2.10"


def test_the_inventory_describes_the_installed_torch() -> None:
    """Rerun scripts/extract_torch_skew.py when the lock moves torch: the inventory compares
    the profile's torch with the torch the rows run on."""
    from runners.devices.neuron import skew

    assert skew.data_torch() == INSTALLED and skew.applies()
    data = json.loads(DATA.read_text())
    assert data["old"]["version"].startswith("2.10.")
    assert data["old"]["read_from"] == "wheel" and len(data["old"]["sha256"]) == 64
    equivalent = {k: v["stands_for"] for k, v in data["process_group"]["equivalent"].items() if v}
    assert equivalent == {
        "all_gather_single": "_allgather_base",
        "reduce_scatter_single": "_reduce_scatter_base",
        "all_to_all_single": "alltoall_base",
    }


@pytest.mark.skipif(
    not (SNAPSHOT.is_dir() and OLD_WHEEL.is_file()),
    reason="needs the TorchNeuron snapshot's mirror and a torch 2.10 wheel",
)
def test_the_inventory_is_what_the_script_extracts(tmp_path) -> None:
    import shutil

    for name in ("native-ops.txt", "autocast-policy.txt"):
        shutil.copy(DATA.parent / name, tmp_path / name)
    data = json.loads(DATA.read_text())
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "extract_torch_skew.py"),
            "--old",
            str(OLD_WHEEL),
            "--snapshot",
            str(SNAPSHOT),
            "--commit",
            data["profile_torch"]["source"]["commit"],
            "--out",
            str(tmp_path),
        ],
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
    )
    assert json.loads((tmp_path / "torch-skew.json").read_text()) == data


def test_every_row_of_the_emulated_device_names_both_torches() -> None:
    from runners.devices import get_device

    identity = get_device("neuron").identity()
    assert identity["device_emulated"] is True
    assert identity["device_profile_torch"] == "2.10"
    assert identity["device_torch"] == INSTALLED
    cpu = get_device("cpu").identity()
    assert cpu["device_profile_torch"] is None and cpu["device_torch"] == INSTALLED


def test_a_fallback_or_a_graph_op_newer_than_the_profile_is_unverified() -> None:
    from ground.schema import CompileEvidence
    from runners.devices import get_device
    from runners.devices.neuron import evidence, skew

    device = get_device("neuron")
    newer = "aten::_foreach_clone"  # registered by torch 2.14, not by torch 2.10
    assert skew.newer_op(newer) and not skew.newer_op("aten::histc")
    assert device.fallback_evidence(newer) == "newer_than_profile"
    assert device.fallback_evidence("aten::histc") is None  # the snapshot's own word
    found = evidence.verdict(newer, None, evidence.evidence_sets())
    assert found is not None and found.lowers is None
    assert found.evidence is CompileEvidence.NEWER_THAN_PROFILE


# ---- the reports: a hand-built run of three models on the emulated device ------------------


@pytest.fixture(scope="module")
def skew_store(tmp_path_factory) -> Store:
    """org/a-pass-clean: fsdp-like pass resting on a collective newer than the profile;
    org/b-pass-fallback: its only fallback is an op newer than the profile;
    org/c-fail-compile: a fallback the profile's own source leaves out."""
    store = Store(tmp_path_factory.mktemp("skew"))
    a, fa = rows_for("s1", "org/a-pass-clean", ALL_PASS)
    b, fb = rows_for("s1", "org/b-pass-fallback", ALL_PASS, fallbacks={"forward": {"aten::x": 1}})
    c, fc = rows_for("s1", "org/c-fail-compile", ALL_PASS, fallbacks={"forward": {"aten::y": 2}})
    for r in a:
        if r["stage"] == "compile":
            r.update(sharding_evidence="newer_than_profile")
    for row in fb:
        row.update(op="aten::_foreach_clone", evidence="newer_than_profile")
    _write(store, "s1", [(a, fa), (b, fb), (c, fc)])
    run = _run(
        "s1", dt.datetime(2026, 12, 7, tzinfo=dt.UTC), "finished", torch="2.14.1", requested=3
    )
    run.update(device_profile_torch="2.10", device_torch="2.14.1")
    store.write("runs", "s1", [run])
    return store


def test_a_pass_resting_on_a_newer_name_is_in_the_band_only(skew_store: Store) -> None:
    q = StoreQuery(skew_store)
    q.ensure_summaries(["s1"])
    rows = {r["model_id"]: r for r in q.fetch("SELECT model_id, unverified FROM model_runs")}
    assert rows["org/a-pass-clean"]["unverified"] is True
    assert rows["org/c-fail-compile"]["unverified"] is False
    band = coverage.band(q, "s1")
    every = band["lines"][-1]
    assert every["at_most"] - every["with_evidence"] == 1  # a: at most, not with evidence


def test_the_missing_ops_keep_newer_ops_apart(skew_store: Store) -> None:
    q = StoreQuery(skew_store)
    rows = {r["op"]: r for r in ops.missing_ops(q, "s1")}
    assert rows["aten::_foreach_clone"]["evidence"] == ops.NEWER_THAN_PROFILE
    assert rows["aten::y"]["evidence"] == ops.EVIDENCE_OF_ABSENCE


def test_every_emulated_page_and_report_names_both_torches(skew_store: Store) -> None:
    q = StoreQuery(skew_store)
    report = text.render(run_report(q, "s1"))
    assert "its profile for torch 2.10, run on torch 2.14.1" in report


def test_an_op_page_says_an_op_is_newer_than_the_profile(skew_store: Store) -> None:
    from reports.op_sweep import op_page

    q = StoreQuery(skew_store)
    page = op_page(q, "aten::_foreach_clone", model_run_id="s1")
    assert page["newer_than_profile"] == ["aten::_foreach_clone"]
    assert op_page(q, "aten::y", model_run_id="s1")["newer_than_profile"] == []
