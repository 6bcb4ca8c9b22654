"""Several dtypes in one run end to end (issue 20) on real tiny models: the emulated neuron
device through the Ray driver and through the CLI with --local, a SIGKILL mid-run resumed per
(model, dtype, stage), then report and lookup of the run's dtypes side by side; check of one
of its models at both dtypes on the emulated device, and on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter

import pytest

from reports.query import StoreQuery
from reports.store import Store
from reports.summary import run_report
from sweep.commands.options import stage_list
from sweep.driver import run_sweep
from tests.cli_in_process import hfsweep_in_process
from tests.conftest import HFSWEEP, ROOT, write_catalog
from tests.kill_support import kill_while_waiting
from tests.neuron_support import forked
from tests.test_driver_faults import config
from tests.warm_fork import run_cli

pytestmark = pytest.mark.slow

STAGES = "load,forward"
DTYPES = ("fp32", "bf16")
MODELS = [
    {
        "model_id": "org/llama",
        "library_name": "transformers",
        "model_type_hint": "llama",
        "architectures_hint": "LlamaForCausalLM",
        "pipeline_tag": "text-generation",
    },
    {"model_id": "org/bert", "library_name": "transformers", "model_type_hint": "bert"},
]
# the catalog of the killed run (its last model, roberta, waits in its load stage)
KILLED = [
    {"model_id": f"org/m{i}", "library_name": "transformers", "model_type_hint": t}
    for i, t in enumerate(["llama", "gpt2", "roberta"])
]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def triples(store, run_id: str) -> Counter:
    rows = Store(store).read("results", run_id).to_pylist()
    return Counter((r["model_id"], r["dtype"], r["stage"]) for r in rows)


def test_neuron_through_ray_at_two_dtypes(tmp_path, ray_session):
    catalog = write_catalog(tmp_path / "catalog.csv", MODELS)
    store = tmp_path / "store"
    summary = run_sweep(
        config(
            store,
            catalog,
            device="neuron",
            stages=stage_list(STAGES),
            dtypes=DTYPES,
            run_id="n1",
            executor="ray",
            timeout_s=300,
        )
    )
    assert summary.tasks == 4 and summary.requested == 4
    assert triples(store, "n1") == Counter(
        {(m["model_id"], d, s): 1 for m in MODELS for d in DTYPES for s in STAGES.split(",")}
    )
    rows = Store(store).read("results", "n1").to_pylist()
    assert all(r["device"] == "neuron" and r["device_emulated"] for r in rows)
    assert Store(store).run("n1")["dtype"] == "fp32,bf16"
    report = run_report(StoreQuery(str(store)), "n1")
    assert report["dtypes"] == ["fp32", "bf16"] and set(report["by_dtype"]) == set(DTYPES)
    for d in DTYPES:
        assert report["by_dtype"][d]["denominators"]["models"] == 2


def test_cli_run_killed_mid_way_resumes_then_report_lookup(tmp_path):
    """`hfsweep run --dtype fp32,bf16 --local` on the emulated device, SIGKILLed while its last
    model waits in its load stage (a `wait` fault never released) and once rows reached the
    store, whatever the machine's speed: the same command finishes it with every (model,
    dtype, stage) once; report and lookup (reading commands, in this process) show both
    dtypes. The check that lookup's reproduce line asks for runs below, at both dtypes."""
    catalog = write_catalog(tmp_path / "catalog.csv", KILLED)
    store = tmp_path / "store"
    cmd = [
        *HFSWEEP,
        "run",
        "--catalog",
        str(catalog),
        "--top",
        "3",
        "--device",
        "neuron",
        "--dtype",
        "fp32,bf16",
        "--stages",
        STAGES,
        "--store",
        str(store),
        "--run-id",
        "k",
        "--local",
        "--no-report",
    ]
    waiting = {"at": "stage:load", "match": "roberta", "fault": "wait"}
    stored = lambda: triples(store, "k")  # noqa: E731
    kill_while_waiting(cmd, env=ENV, state=tmp_path / "faults", rule=waiting, stored=stored)
    partial = triples(store, "k")
    assert 0 < sum(partial.values()) < 3 * 2 * 2
    assert "org/m2" not in {m for m, _, _ in partial}  # the waiting model has no rows
    done = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "6 models x dtypes (3 models at fp32, bf16) asked for" in done.stderr
    want = {(m["model_id"], d, s) for m in KILLED for d in DTYPES for s in STAGES.split(",")}
    have = triples(store, "k")
    assert set(have) == want and set(have.values()) == {1}

    report = hfsweep_in_process(
        "report", "--store", str(store), "--run", "k", "--format", "json", env=ENV
    )
    doc = json.loads(report.stdout)
    assert doc["dtypes"] == ["fp32", "bf16"]
    assert {d: doc["by_dtype"][d]["denominators"]["models"] for d in DTYPES} == {
        "fp32": 3,
        "bf16": 3,
    }

    lookup = hfsweep_in_process("lookup", "org/m0", "--store", str(store), env=ENV)
    assert "at fp32:" in lookup.stdout and "at bf16:" in lookup.stdout
    assert "--dtype fp32,bf16" in lookup.stdout  # reproduce: check at the run's dtypes


@forked
def test_check_at_two_dtypes_on_neuron_and_on_cpu(tmp_path):
    """`hfsweep check` at fp32,bf16, each a process of its own forked from this warm one
    (tests/warm_fork.py): on the emulated device, one model of the killed run's catalog (what
    lookup's reproduce line runs), the JSON gives each dtype its stages and `ok` as a whole;
    on the CPU, the text prints each dtype and what differs."""
    catalog = write_catalog(tmp_path / "killed.csv", KILLED)
    check = run_cli(
        ["check", "org/m0", "--catalog", str(catalog), "--device", "neuron"]
        + ["--dtype", "fp32,bf16", "--stages", STAGES, "--format", "json"],
        env={"HF_HUB_OFFLINE": "1"},
    )
    assert check.returncode in (0, 1), check.stderr[-2000:]
    doc = json.loads(check.stdout)
    assert doc["dtypes"] == ["fp32", "bf16"]
    for d in DTYPES:
        assert {r["dtype"] for r in doc["by_dtype"][d]["stages"]} == {d}
        assert [r["stage"] for r in doc["by_dtype"][d]["stages"]] == STAGES.split(",")
    assert doc["ok"] == all(doc["by_dtype"][d]["ok"] for d in DTYPES)
    assert check.returncode == (0 if doc["ok"] else 1)

    catalog = write_catalog(tmp_path / "catalog.csv", MODELS)
    done = run_cli(
        ["check", "org/llama", "--catalog", str(catalog), "--dtype", "fp32,bf16"]
        + ["--stages", STAGES],
        env={"HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    out = done.stdout
    assert out.index("== at fp32 ==") < out.index("== at bf16 ==")
    assert "dtype fp32" in out and "dtype bf16" in out
    assert "dtypes:  fp32 passes, bf16 passes; the same result at every dtype" in out
