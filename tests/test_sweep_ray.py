"""The sweep on a real (embedded) Ray: every model gets its rows, dedup, and a slow task's
beats. A driver SIGKILLed mid-run (a task in flight, rows in the store) and resumed without
loss or duplicates is the fault matrix's `kill` section (bench/fault_matrix.py --fast, in
tests/test_fault_matrix.py)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from reports.store import Store
from sweep.commands.options import stage_list
from sweep.driver import run_sweep
from tests.conftest import write_catalog
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


def test_a_slow_task_beats_on_a_real_cluster_and_is_not_taken_for_lost(
    ray_session, tmp_path, monkeypatch
):
    """The guard counts silence, not time: a task held on its worker (until a file appears)
    stays past its guard twice over on the executor's clock, which the test moves only after
    each new beat of the worker reached the driver through Ray's key-value store; it comes
    back on its first attempt. Nothing here depends on how soon a beat comes."""
    from runners.settings import ModelSettings
    from sweep.executors import ray_cluster
    from sweep.executors.protocol import RunDone
    from sweep.executors.ray_cluster import RayExecutor
    from tests.test_executor_faults import Clock, task

    release = tmp_path / "release"

    def held(spec, settings):  # a closure: Ray pickles it with the path
        from runners.outcome import ModelOutcome, StageResult

        while not release.exists():
            time.sleep(0.05)
        return ModelOutcome([StageResult(stage=s.value, status="pass") for s in settings.stages])

    clock = Clock()
    monkeypatch.setattr(ray_cluster, "time", clock)
    ex = RayExecutor(run_fn=held)
    ex.guard_s = 7.0
    ex.submit_run(task("slow", ModelSettings(stages=stage_list("load"))))
    (job,) = ex._runs.values()
    beats: list[bytes] = []
    deadline = time.monotonic() + 600  # a guard against a hang, not a speed
    while len(beats) < 2:
        assert time.monotonic() < deadline, f"the worker beat {len(beats)} times"
        beat = (ex._beats([job.key]) or {}).get(job.key)
        if beat is not None and beat not in beats:
            beats.append(beat)
            clock.now += ex.guard_s + 1.0  # past its guard since its last sign of life
            assert ex.wait(0) == []  # alive: its new beat counts
            assert ex.running() == 1 and job.attempt == 1
        time.sleep(0.2)
    release.touch()
    events: list = []
    while not events:
        assert time.monotonic() < deadline, "the released task never came back"
        events = ex.wait(1.0)
    ex.close()
    (done,) = events
    assert isinstance(done, RunDone) and done.attempt == 1
    assert [s.status for s in done.outcome.stages] == ["pass"]
