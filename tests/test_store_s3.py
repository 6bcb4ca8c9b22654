"""The store on an object store: a local S3-compatible server (moto's server mode) that the tests
start themselves, reached through the standard AWS variables, as a cluster would reach S3.

Every reader and writer is exercised on an `s3://` URI: the store's own reads and writes, the
reports (compared with the same store on disk), the dashboard, and `hfsweep run` / resume and
`hfsweep ops` (with its resume) as processes of their own that know the server only from the
environment (forked from a warm one, tests/warm_fork.py, not interpreters importing torch again);
`report` / `lookup` / `diff` read it from the environment too, through the CLI's function in
this process (tests/cli_in_process.py: a fresh process adds nothing the runs do not show)."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from dashboard.app import create_app
from reports import coverage, ops
from reports.models import model_detail
from reports.query import StoreQuery
from reports.store import Store
from tests.cli_in_process import hfsweep_in_process
from tests.conftest import HFSWEEP, ROOT, write_catalog
from tests.neuron_support import forked
from tests.report_store_builder import build_hand_store
from tests.s3_support import BUCKET, local_s3, s3_objects
from tests.store_readers import rows_per_table
from tests.store_writes import completed_models, write_model_rows
from tests.warm_fork import Finished, run_cli


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    with local_s3() as env:
        yield env


def hfsweep(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*HFSWEEP, *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, **env, "HF_HUB_OFFLINE": "1"},
    )


def sweep(*args: str, env: dict[str, str]) -> Finished:
    """A sweep (`hfsweep run` / `ops`) in a process of its own forked from the `@forked` test's
    warm one (tests/warm_fork.py): its exit status and output, the server known only from the
    environment, without a fresh interpreter importing torch again."""
    return run_cli(list(args), env={**env, "HF_HUB_OFFLINE": "1", "HFSWEEP_TEST_FAULTS": None})


def read(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """A reading command (report, lookup, diff) in this process, in the same environment."""
    return hfsweep_in_process(*args, env={**os.environ, **env, "HF_HUB_OFFLINE": "1"})


def test_parts_are_written_and_read_through_s3(s3_env) -> None:
    store = Store(f"s3://{BUCKET}/plain")
    assert not store.local
    result = {
        "model_id": "a/b",
        "stage": "load",
        "status": "pass",
        "config_source": "local",
        "device": "cpu",
        "device_emulated": False,
        "dtype": "fp32",
    }
    fallback = {
        "model_id": "a/b",
        "stage": "load",
        "device": "cpu",
        "op": "aten::add.Tensor",
        "count": 2,
        "source": "eager",
    }
    write_model_rows(store, "r1", [result], [fallback], [{"shrunk_config_hash": "s1"}])
    # a driver killed between the writes: the orphans never count
    store.write("fallbacks", "r1", [{**fallback, "model_id": "x/y"}])
    store.write("configs", "r1", [{"shrunk_config_hash": "s2"}])
    assert store.read("results", "r1").column("model_id").to_pylist() == ["a/b"]
    assert store.read("fallbacks", "r1").column("model_id").to_pylist() == ["a/b"]
    assert store.read("configs", "r1").column("shrunk_config_hash").to_pylist() == ["s1"]
    assert completed_models(store, "r1") == {"a/b"}
    # what other tools see: plain objects in a hive-partitioned layout
    keys = [k for k in s3_objects("plain/results/") if k.endswith(".parquet")]
    assert len(keys) == 1 and keys[0].startswith("plain/results/run_id=r1/part-")


@pytest.mark.slow
def test_reports_and_dashboard_read_s3_as_they_read_a_folder(s3_env, tmp_path) -> None:
    uri = f"s3://{BUCKET}/hand"
    build_hand_store(uri)
    build_hand_store(tmp_path / "local")
    on_s3, on_disk = StoreQuery(uri), StoreQuery(tmp_path / "local")
    assert on_s3.run_ids() == on_disk.run_ids() == ["r2", "r1"]
    for run in ("r1", "r2"):
        assert coverage.denominators(on_s3, run) == coverage.denominators(on_disk, run)
        assert coverage.funnel(on_s3, run) == coverage.funnel(on_disk, run)
        assert ops.missing_ops(on_s3, run) == ops.missing_ops(on_disk, run)
    m = model_detail(on_s3, "org/b-pass-fallback")
    local = model_detail(on_disk, "org/b-pass-fallback")
    # the next step's command names the store it was read from; the rest is the same
    assert m["next_step"].pop("command") == f"hfsweep report --store {uri}"
    assert local["next_step"].pop("command") == f"hfsweep report --store {tmp_path / 'local'}"
    assert m == local
    assert m["shrink_changes"] == {"hidden_size": [4096, 64], "num_hidden_layers": [32, 2]}
    assert [f["op"] for f in m["fallbacks"]] == ["aten::histc", "aten::histc"]

    client = TestClient(create_app(uri, refresh_s=0, warm=False))
    page = client.get("/")
    assert page.status_code == 200 and "EMULATED" in page.text.upper()
    api = client.get("/api/models/org/b-pass-fallback").json()
    assert api["shrink_changes"] == m["shrink_changes"]
    assert client.get("/api/ops").status_code == 200


@pytest.mark.slow
@forked
def test_run_resume_report_lookup_and_diff_on_s3(s3_env, tmp_path: Path) -> None:
    os.environ.update(s3_env)  # this (forked, throwaway) test process reads the store too
    models = [
        {
            "model_id": f"org/llama-{c}",
            "library_name": "transformers",
            "model_type_hint": "llama",
            "architectures_hint": "LlamaForCausalLM",
        }
        for c in "ab"
    ] + [
        {"model_id": "org/bert", "library_name": "transformers", "model_type_hint": "bert"},
        {"model_id": "org/remote", "library_name": "transformers", "custom_code": True},
    ]
    catalog = write_catalog(tmp_path / "catalog.csv", models)
    uri = f"s3://{BUCKET}/sweep"
    common = ["--catalog", str(catalog), "--stages", "load,forward", "--store", uri, "--local"]
    p = sweep("run", *common, "--top", "4", "--run-id", "s3a", env=s3_env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "models asked for" in p.stderr and "4 models" in p.stdout  # the report at the end
    rows = Store(uri).read("results", "s3a").to_pylist()
    assert Counter((r["model_id"], r["stage"]) for r in rows) == Counter(
        {(m["model_id"], s): 1 for m in models for s in ("load", "forward")}
    )
    by_model = {r["model_id"]: r for r in rows if r["stage"] == "load"}
    assert by_model["org/llama-b"]["dedup_of"] == "org/llama-a"
    # the dedup group's shrunk config is stored once, not on each of its rows
    configs = Store(uri).read("configs", "s3a").to_pylist()
    assert sorted(c["architecture"] for c in configs) == ["BertForMaskedLM", "LlamaForCausalLM"]
    # nothing fell back on the CPU, and every table is there for a reader outside the project
    counts = rows_per_table(uri)
    assert counts["results"] == len(rows) and counts["fallbacks"] == 0
    assert counts["ops"] == counts["op_summary"] == counts["op_runs"] == 0

    # the same command again resumes: nothing to do, nothing doubled
    p = sweep("run", *common, "--top", "4", "--run-id", "s3a", "--no-report", env=s3_env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "4 already done" in p.stderr
    assert Store(uri).read("results", "s3a").num_rows == len(rows)

    p = sweep("run", *common, "--top", "2", "--run-id", "s3b", "--no-report", env=s3_env)
    assert p.returncode == 0, p.stderr[-3000:]

    p = read("report", "--store", uri, "--run", "s3a", "--format", "json", env=s3_env)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["denominators"]["models"] == 4 and report["denominators"]["skipped"] == 1

    p = read("lookup", "org/llama-b", "--store", uri, env=s3_env)
    assert p.returncode == 0, p.stderr
    assert "hidden_size: 4096 -> 64" in p.stdout  # joined back from the configs table

    p = read("diff", "s3a", "s3b", "--store", uri, env=s3_env)
    assert p.returncode == 0, p.stderr
    assert "s3a" in p.stdout and "s3b" in p.stdout


@pytest.mark.slow
@forked
def test_op_sweep_writes_resumes_and_reports_on_s3(s3_env) -> None:
    os.environ.update(s3_env)  # this (forked, throwaway) test process reads the store too
    # PyTorch's OpInfo database, imported once here for both sweeps forked from this process
    import torch.testing._internal.common_methods_invocations  # noqa: F401

    uri = f"s3://{BUCKET}/ops"
    args = ["ops", "--ops", "add,sum", "--dtypes", "fp32", "--device", "cpu", "--local"]
    args += ["--store", uri, "--run-id", "ops-s3"]
    p = sweep(*args, env=s3_env)
    assert p.returncode == 0, p.stderr[-3000:]
    store = Store(uri)
    rows = store.read("ops", "ops-s3").to_pylist()
    assert {r["opinfo"] for r in rows} == {"add", "sum"}
    assert {r["status"] for r in rows} <= {"pass", "skip"}  # cpu: the self-check
    summary = store.read("op_summary", "ops-s3").to_pylist()
    assert "aten::add" in {r["op"] for r in summary}
    assert [r["status"] for r in store.read("op_runs", "ops-s3").to_pylist()][-1] == "finished"
    counts = rows_per_table(uri)  # the op tables, and the model tables with no rows
    assert counts["ops"] == len(rows) and counts["op_summary"] == len(summary)
    assert counts["results"] == counts["fallbacks"] == counts["runs"] == 0
    assert any(k.startswith("ops/ops/run_id=ops-s3/part-") for k in s3_objects("ops/ops/"))
    # resume: nothing again, nothing doubled; the summary is replaced, not added to
    p = sweep(*args, env=s3_env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "2 OpInfo x dtype already done, 0 rows written" in p.stderr
    assert store.read("ops", "ops-s3").num_rows == len(rows)
    assert store.read("op_summary", "ops-s3").num_rows == len(summary)
    p = read("report", "--store", uri, "--format", "json", env=s3_env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "ops-s3" in p.stdout
    client = TestClient(create_app(uri, refresh_s=0, warm=False))
    page = client.get("/api/ops/aten::add")
    assert page.status_code == 200, page.text[:500]
    assert page.json()["op_run_id"] == "ops-s3"
    assert client.get("/op-sweep").status_code == 200


def test_unreachable_bucket_is_one_clear_error(s3_env) -> None:
    p = hfsweep("report", "--store", "s3://no-such-bucket-hfsweep/x", env=s3_env)
    assert p.returncode == 2
    assert p.stderr.startswith("error: ") and "Traceback" not in p.stderr
    assert "no-such-bucket-hfsweep" in p.stderr
