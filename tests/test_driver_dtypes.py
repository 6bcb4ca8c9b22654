"""Several dtypes in one run (issue 20), the driver's side: a task per (shrunk config, dtype) run
with the settings at its dtype, rows that say their dtype, the run row naming every dtype, a
resume per (model, dtype, stage), the resume check comparing the dtype set, and reuse by a task
key that includes the dtype. The driver is what is tested: model tasks are stand-ins here (the
real emulated device runs in tests/test_dtypes_end_to_end.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from ground.errors import UsageError
from reports.store import Store
from runners.outcome import ModelOutcome, StageResult
from sweep.commands.run import run_line
from sweep.driver import run_sweep
from tests.conftest import write_catalog
from tests.test_driver_faults import STAGES, config

MODELS = [
    {"model_id": "org/llama-a", "library_name": "transformers", "model_type_hint": "llama"},
    {"model_id": "org/llama-b", "library_name": "transformers", "model_type_hint": "llama"},
    {"model_id": "org/gpt2", "library_name": "transformers", "model_type_hint": "gpt2"},
    {"model_id": "org/gguf", "library_name": "gguf"},  # skipped at planning
]
IDS = [m["model_id"] for m in MODELS]


class Recorder:
    """A model task stand-in: passes at fp32, fails forward at bf16 naming an op; records
    (model type, dtype) of every call, and stops the driver (like Ctrl-C) at call `stop_at`."""

    def __init__(self, stop_at: int | None = None):
        self.calls: list[tuple[str, str]] = []
        self.stop_at = stop_at

    def __call__(self, spec, settings) -> ModelOutcome:
        self.calls.append((spec.model_type, settings.dtype))
        if self.stop_at is not None and len(self.calls) == self.stop_at:
            raise KeyboardInterrupt
        bad = settings.dtype == "bf16"
        stages = []
        for s in settings.stages:
            if bad and s.value == "forward":
                stages.append(
                    StageResult(
                        stage="forward",
                        status="fail_error",
                        error_type="RuntimeError",
                        error_message="no bf16 kernel",
                        failing_op="aten::histc",
                    )
                )
            else:
                stages.append(StageResult(stage=s.value, status="pass"))
        return ModelOutcome(stages, 1)


@pytest.fixture
def catalog(tmp_path):
    return write_catalog(tmp_path / "catalog.csv", MODELS)


def rows_of(store, run_id: str = "r") -> list[dict]:
    return Store(store).read("results", run_id).to_pylist()


def triples(store, run_id: str = "r") -> Counter:
    return Counter((r["model_id"], r["dtype"], r["stage"]) for r in rows_of(store, run_id))


def every(dtypes: tuple[str, ...]) -> Counter:
    return Counter({(m, d, s): 1 for m in IDS for d in dtypes for s in STAGES.split(",")})


def test_one_run_sweeps_each_model_at_each_dtype(tmp_path, catalog):
    store, fn = tmp_path / "store", Recorder()
    summary = run_sweep(config(store, catalog, dtypes=("fp32", "bf16")), run_fn=fn)
    assert triples(store) == every(("fp32", "bf16"))
    # dedup per (shrunk config, dtype): llama-b shares llama-a's task at each dtype
    assert sorted(fn.calls) == sorted(
        [("llama", "fp32"), ("llama", "bf16"), ("gpt2", "fp32"), ("gpt2", "bf16")]
    )
    assert summary.tasks == 4 and summary.requested == 8 and summary.skipped == 2
    rows = rows_of(store)
    forward = {(r["model_id"], r["dtype"]): r for r in rows if r["stage"] == "forward"}
    assert forward["org/llama-b", "bf16"]["dedup_of"] == "org/llama-a"
    assert forward["org/llama-b", "bf16"]["failing_op"] == "aten::histc"
    assert forward["org/llama-b", "fp32"]["status"] == "pass"
    assert Store(store).run("r")["dtype"] == "fp32,bf16"
    assert summary.dtypes == ["fp32", "bf16"]
    assert "8 models x dtypes (4 models at fp32, bf16) asked for" in run_line(summary, "s")


def test_a_run_of_one_dtype_is_as_before(tmp_path, catalog):
    store, fn = tmp_path / "store", Recorder()
    summary = run_sweep(config(store, catalog, dtype="bf16"), run_fn=fn)
    assert triples(store) == every(("bf16",))
    assert Store(store).run("r")["dtype"] == "bf16"
    assert summary.requested == 4 and "4 models asked for" in run_line(summary, "s")


def test_an_interrupted_run_resumes_per_model_dtype_and_stage(tmp_path, catalog):
    """Stopped at its 2nd task (llama at bf16, after llama at fp32 was written): the resume
    runs llama at bf16 only, then the rest, and doubles nothing."""
    store = tmp_path / "store"
    first = Recorder(stop_at=2)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(config(store, catalog, dtypes=("fp32", "bf16"), dedup=False), run_fn=first)
    assert first.calls == [("llama", "fp32"), ("llama", "bf16")]
    have = triples(store)
    assert have[("org/llama-a", "fp32", "load")] == 1
    assert not any(k[:2] == ("org/llama-a", "bf16") for k in have)

    again = Recorder()
    summary = run_sweep(config(store, catalog, dtypes=("fp32", "bf16"), dedup=False), run_fn=again)
    assert again.calls[0] == ("llama", "bf16")  # llama-a: only the dtype it lacked
    assert ("llama", "fp32") in again.calls  # llama-b (no dedup) at both
    assert again.calls.count(("llama", "fp32")) == 1
    assert triples(store) == every(("fp32", "bf16"))
    assert summary.already_done == len(have) // 2 and summary.requested == 8
    assert Store(store).run("r")["status"] == "finished"


def test_a_resume_compares_the_dtype_set(tmp_path, catalog):
    store = tmp_path / "store"
    run_sweep(config(store, catalog, top=2, dtypes=("fp32", "bf16")), run_fn=Recorder())
    with pytest.raises(UsageError, match=r"dtype=fp32,bf16 \(now fp32\)"):
        run_sweep(config(store, catalog, dtype="fp32"), run_fn=Recorder())
    with pytest.raises(UsageError, match=r"dtype=fp32,bf16 \(now fp32,fp16\)"):
        run_sweep(config(store, catalog, dtypes=("fp32", "fp16")), run_fn=Recorder())
    fn = Recorder()  # the same set in another order is the same run
    run_sweep(config(store, catalog, dtypes=("bf16", "fp32")), run_fn=fn)
    assert triples(store) == every(("fp32", "bf16"))
    assert sorted(fn.calls) == [("gpt2", "bf16"), ("gpt2", "fp32")]


def test_an_old_run_row_of_one_dtype_resumes_as_that_dtype(tmp_path, catalog):
    """A run row written before runs had several dtypes holds one: it reads as a set of one."""
    store = tmp_path / "store"
    run_sweep(config(store, catalog, top=2, dtype="bf16"), run_fn=Recorder())
    row = Store(store).run("r")
    assert row["dtype"] == "bf16"
    run_sweep(config(store, catalog, dtype="bf16"), run_fn=Recorder())
    assert triples(store) == every(("bf16",))


def test_reuse_copies_a_task_only_at_the_dtype_it_ran(tmp_path, catalog):
    """The task key includes the dtype: a run of fp32,bf16 reusing an fp32 run copies the fp32
    tasks and runs the bf16 ones."""
    store = tmp_path / "store"
    run_sweep(config(store, catalog, run_id="a", dtype="fp32"), run_fn=Recorder())
    fn = Recorder()
    summary = run_sweep(
        config(store, catalog, run_id="b", dtypes=("fp32", "bf16"), reuse="latest"), run_fn=fn
    )
    assert sorted(fn.calls) == [("gpt2", "bf16"), ("llama", "bf16")]
    assert triples(store, "b") == every(("fp32", "bf16"))
    reused = {
        (r["dtype"], r["reused_from"]) for r in rows_of(store, "b") if r["shrunk_config_hash"]
    }
    assert reused == {("fp32", "a"), ("bf16", None)}
    keys = {(r["model_id"], r["dtype"]): r["task_key"] for r in rows_of(store, "b")}
    assert keys["org/gpt2", "fp32"] != keys["org/gpt2", "bf16"]
    assert summary.reused == 3  # llama-a, llama-b and gpt2 at fp32


def test_cli_dtype_list(tmp_path):
    """`--dtype` takes one dtype or several; a wrong one is one clear error."""
    import argparse

    from sweep.commands import options

    p = argparse.ArgumentParser()
    options.add_device_arguments(p)
    options.add_model_arguments(p)
    options.add_limit_arguments(p, timeout=1.0, per="model")
    args = p.parse_args(["--dtype", "fp32, bf16,fp32"])
    assert options.dtypes(args) == ("fp32", "bf16")
    assert options.model_settings(args).dtype == "fp32"
    with pytest.raises(UsageError, match="unknown dtype 'fp8'"):
        options.dtypes(p.parse_args(["--dtype", "fp32,fp8"]))
    with pytest.raises(UsageError, match="names no dtype"):
        options.dtypes(p.parse_args(["--dtype", ","]))


def test_nightly_takes_the_dtype_list():
    """`hfsweep nightly` takes every option of run, --dtype fp32,bf16 included."""
    import argparse

    from sweep.commands import nightly
    from sweep.commands import run as run_command

    p = argparse.ArgumentParser()
    nightly.add_arguments(p)
    args = p.parse_args(["--dtype", "fp32,bf16", "--local"])
    run = run_command.settings_from(args)
    assert run.dtypes == ("fp32", "bf16") and run.task.dtype == "fp32"
    assert run.at("bf16").dtype == "bf16" and run.at("bf16").stages == run.task.stages
