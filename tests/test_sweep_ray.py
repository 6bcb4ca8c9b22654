"""The sweep on a real (embedded) Ray: every model gets its rows, dedup, resume after SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter

import pytest

from reports.store import Store
from sweep.commands.options import stage_list
from sweep.driver import run_sweep
from tests.conftest import HFSWEEP, ROOT, write_catalog
from tests.test_driver_faults import config

pytestmark = pytest.mark.slow

STAGES = "load,forward,backward"
MODELS = [
    {
        "model_id": "org/llama-a",
        "library_name": "transformers",
        "model_type_hint": "llama",
        "architectures_hint": "LlamaForCausalLM",
        "pipeline_tag": "text-generation",
    },
    {
        "model_id": "org/llama-b",
        "library_name": "transformers",
        "model_type_hint": "llama",
        "architectures_hint": "LlamaForCausalLM",
        "pipeline_tag": "text-generation",
    },
    {"model_id": "org/bert", "library_name": "sentence-transformers", "model_type_hint": "bert"},
    {
        "model_id": "org/remote",
        "library_name": "transformers",
        "model_type_hint": "llama",
        "custom_code": True,
    },
    {"model_id": "org/gguf", "library_name": "gguf"},
    {"model_id": "org/unknown", "library_name": "transformers", "model_type_hint": "nope_type"},
    {"model_id": "org/gpt2", "library_name": "transformers", "model_type_hint": "gpt2"},
]


def test_sweep_writes_one_row_per_model_and_stage(tmp_path, ray_session):
    catalog = write_catalog(tmp_path / "catalog.csv", MODELS)
    store = tmp_path / "store"
    summary = run_sweep(
        config(
            store, catalog, stages=stage_list(STAGES), run_id="r1", executor="ray", timeout_s=300
        )
    )
    assert summary.requested == len(MODELS)
    assert summary.skipped == 3 and summary.tasks == 3 and summary.models_run == 4
    rows = Store(store).read("results", "r1").to_pylist()
    assert Counter((r["model_id"], r["stage"]) for r in rows) == Counter(
        {(m["model_id"], s): 1 for m in MODELS for s in STAGES.split(",")}
    )
    by_model = {r["model_id"]: r for r in rows if r["stage"] == "load"}
    assert by_model["org/remote"]["reason"] == "remote_code"
    assert by_model["org/gguf"]["reason"] == "unsupported_library"
    assert by_model["org/unknown"]["reason"] == "unknown_model_type"
    assert by_model["org/llama-b"]["dedup_of"] == "org/llama-a"
    assert by_model["org/llama-a"]["status"] == "pass"
    assert by_model["org/llama-a"]["config_source"] == "transformers_default"
    run = Store(store).run("r1")
    assert run["status"] == "finished" and run["models_requested"] == len(MODELS)
    assert run["torch_version"] and run["transformers_version"]

    # the same command again: nothing to do, nothing doubled
    again = run_sweep(
        config(
            store, catalog, stages=stage_list(STAGES), run_id="r1", executor="ray", timeout_s=300
        )
    )
    assert again.already_done == len(MODELS) and again.tasks == 0
    assert Store(store).read("results", "r1").num_rows == len(rows)


def _part_count(store) -> int:
    return len(list((store / "results").rglob("part-*.parquet")))


def test_killed_driver_resumes_without_loss_or_duplicates(tmp_path):
    many = [  # 24 models run one by one (--no-dedup, 1 CPU): long enough to be killed mid-run
        {"model_id": f"org/m{i}", "library_name": "transformers", "model_type_hint": t}
        for i, t in enumerate(
            2
            * [
                "llama",
                "gpt2",
                "bert",
                "mistral",
                "qwen2",
                "opt",
                "roberta",
                "gpt_neo",
                "phi",
                "electra",
                "t5",
                "bart",
            ]
        )
    ]
    catalog = write_catalog(tmp_path / "catalog.csv", many)
    store = tmp_path / "store"
    cmd = [
        *HFSWEEP,
        "run",
        "--catalog",
        str(catalog),
        "--top",
        "24",
        "--store",
        str(store),
        "--run-id",
        "killme",
        "--stages",
        STAGES,
        "--num-cpus",
        "1",
        "--no-dedup",
        "--no-report",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while _part_count(store) < 1 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, "the sweep finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = Store(store).read("results", "killme").num_rows
    assert 0 < partial < 24 * 3
    assert Store(store).run("killme")["status"] == "running"  # no clean shutdown happened

    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = Store(store).read("results", "killme").to_pylist()
    counts = Counter((r["model_id"], r["stage"]) for r in rows)
    assert len(counts) == 24 * 3 and set(counts.values()) == {1}
    assert Store(store).run("killme")["status"] == "finished"


def slow_pass(spec, settings):
    """A model task that takes 12 s on its worker, then passes."""
    from runners.outcome import ModelOutcome, StageResult

    time.sleep(12)
    return ModelOutcome([StageResult(stage=s.value, status="pass") for s in settings.stages])


def test_a_slow_task_beats_on_a_real_cluster_and_is_not_taken_for_lost(ray_session):
    """The guard counts silence, not time: with a guard of 7 s, a 12 s task whose worker beats
    every 5 s through Ray's key-value store comes back on its first attempt."""
    from runners.settings import ModelSettings
    from sweep.executors.protocol import RunDone
    from sweep.executors.ray_cluster import RayExecutor
    from tests.test_executor_faults import task

    ex = RayExecutor(run_fn=slow_pass)
    ex.guard_s = 7.0
    ex.submit_run(task("slow", ModelSettings(stages=stage_list("load"))))
    events: list = []
    deadline = time.monotonic() + 120
    while not events and time.monotonic() < deadline:
        events = ex.wait(1.0)
    ex.close()
    (done,) = events
    assert isinstance(done, RunDone) and done.attempt == 1
    assert [s.status for s in done.outcome.stages] == ["pass"]
