"""Result reuse by content (`hfsweep run --reuse`): a task whose key an earlier run has is copied,
rows and fallbacks, with `reused_from`, and is not run; a new key runs. Planning is real (tiny
configs on disk, as `catalog refresh` leaves them); the model task is a stand-in that records
what ran, except in the end-to-end tests (the CLI locally, and through Ray on the s3:// store)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ground.errors import UsageError
from reports.store import Store
from runners.outcome import ModelOutcome, StageResult
from sweep import reuse
from sweep.commands.options import stage_list
from sweep.driver import run_sweep
from sweep.reuse import KeyContext
from tests.cli_in_process import hfsweep_in_process
from tests.conftest import write_catalog
from tests.neuron_support import forked
from tests.s3_support import BUCKET, local_s3
from tests.test_driver_faults import config as driver_config
from tests.warm_fork import Finished, run_cli

STAGES = "load,forward"
LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "vocab_size": 1000,
}
CONFIGS = {  # model -> its config.json; org/d is a fine-tune of org/a's config (a dedup member)
    "org/a": LLAMA,
    "org/b": {**LLAMA, "num_key_value_heads": 2},  # GQA: another tiny model
    "org/c": {**LLAMA, "tie_word_embeddings": True},
    "org/d": {**LLAMA, "_name_or_path": "org/a"},
}
RAN: list[str] = []  # the models whose task ran (the stand-in's lead), in order
STATUS: dict[str, str] = {}  # model -> the status the stand-in gives its forward stage


def stand_in(spec: Any, settings: Any) -> ModelOutcome:
    """A model task that runs nothing: every stage passes (forward: STATUS of the model its
    config names), forward falls back on one op, and it says what ran."""
    name = spec.config.get("_hfsweep_test_name", "?")
    RAN.append(name)
    forward = StageResult(
        stage="forward",
        status=STATUS.get(name, "pass"),
        duration_s=0.25,
        fallback_op_count=1,
        fallback_call_count=3,
        fallbacks=[
            {"op": "aten::argmax", "count": 3, "bytes_h2d": 8, "bytes_d2h": 64, "source": "eager"}
        ],
    )
    stages = [StageResult(stage="load", status="pass", duration_s=0.5), forward]
    return ModelOutcome(
        [s for s in stages if s.stage in {x.value for x in settings.stages}],
        param_count=1234,
        worker="stand-in:1",
        timings={"child_s": 1.5},
        peak_host_memory_bytes=2**20,
    )


def catalog(tmp_path: Path, configs: dict[str, dict[str, Any]]) -> Path:
    path = write_catalog(
        tmp_path / "catalog.csv",
        [{"model_id": m, "library_name": "transformers"} for m in configs],
    )
    for model, config in configs.items():
        folder = path.with_suffix("") / model
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config))
    return path


def sweep(tmp_path: Path, run_id: str, reuse_from: str | None = None, **settings: Any):
    RAN.clear()
    settings.setdefault("timeout_s", 300.0)
    config = driver_config(
        tmp_path / "store",
        tmp_path / "catalog.csv",
        stages=stage_list(settings.pop("stages", STAGES)),
        run_id=run_id,
        reuse=reuse_from,
        **settings,
    )
    return run_sweep(config, run_fn=stand_in, warn=lambda line: None)


@pytest.fixture(autouse=True)
def fresh_stand_in():
    RAN.clear()
    STATUS.clear()


def rows_by_model(store: Path, run_id: str, table: str = "results") -> dict[tuple, dict]:
    out = {}
    for r in Store(store).read(table, run_id).to_pylist():
        out[(r["model_id"], r["stage"], r.get("op"))] = r
    return out


def lead_of(tmp_path: Path) -> None:
    """Give each config a marker naming its model (kept through the shrink), so the stand-in
    can say what ran; org/d keeps org/a's (it is org/a's config)."""
    for model, config in CONFIGS.items():
        name = "org/a" if model == "org/d" else model
        path = tmp_path / "catalog" / model / "config.json"
        path.write_text(json.dumps({**config, "_hfsweep_test_name": name}))


@pytest.fixture
def cat(tmp_path: Path) -> Path:
    path = catalog(tmp_path, CONFIGS)
    lead_of(tmp_path)
    return path


def test_a_second_run_copies_every_row_and_runs_nothing(tmp_path, cat):
    first = sweep(tmp_path, "one")
    assert sorted(RAN) == ["org/a", "org/b", "org/c"] and first.tasks == 3  # org/d: a member
    second = sweep(tmp_path, "two", "latest")
    assert RAN == [] and second.tasks == 0
    assert (second.reused, second.reused_tasks, second.reuse_sources) == (4, 3, ["one"])
    store = tmp_path / "store"
    for table in ("results", "fallbacks"):
        a, b = rows_by_model(store, "one", table), rows_by_model(store, "two", table)
        assert a.keys() == b.keys() and a
        for k in a:
            differ = {c for c in a[k] if a[k][c] != b[k][c]}
            # everything else is the same: statuses, durations, fallbacks, memory, who ran it
            allowed = {"run_id", "finished_at", "reused_from"}
            assert differ <= allowed, (k, differ)
            if table == "results":
                assert b[k]["reused_from"] == "one" and a[k]["reused_from"] is None
                assert b[k]["task_key"] == a[k]["task_key"] and len(a[k]["task_key"]) == 32
    results = rows_by_model(store, "two")
    assert results[("org/d", "load", None)]["dedup_of"] == "org/a"
    assert results[("org/a", "load", None)]["dedup_of"] is None
    # the config pairs of the run are there for the reused models too
    configs = Store(store).read("configs", "two").to_pylist()
    assert len(configs) == 4
    run = Store(store).run("two")
    assert run["reuse"] == "latest" and run["status"] == "finished"


def test_a_copy_of_a_copy_names_the_run_that_ran_it(tmp_path, cat):
    sweep(tmp_path, "one")
    sweep(tmp_path, "two", "latest")
    third = sweep(tmp_path, "three", "latest")
    assert RAN == [] and third.reuse_sources == ["two"]
    reused = {
        r["reused_from"] for r in Store(tmp_path / "store").read("results", "three").to_pylist()
    }
    assert reused == {"one"}


def test_a_setting_in_the_key_reruns_everything(tmp_path, cat):
    sweep(tmp_path, "one")
    sweep(tmp_path, "two", "latest", timeout_s=123.0)
    assert sorted(RAN) == ["org/a", "org/b", "org/c"]
    sweep(tmp_path, "three", "all", stages="load")
    assert sorted(RAN) == ["org/a", "org/b", "org/c"]
    sweep(tmp_path, "four", "all", timeout_s=123.0)  # `all`: run two has these keys
    assert RAN == []
    five = sweep(tmp_path, "five", "one")  # a run id: that run's rows, whatever ran since
    assert RAN == [] and five.reuse_sources == ["one"] and five.reused == 4


def test_a_profile_change_reruns_everything(tmp_path, cat):
    sweep(tmp_path, "one", device="neuron")
    assert len(RAN) == 3
    sweep(tmp_path, "two", "latest", device="neuron", device_options={"profile": "torch-mlir"})
    assert sorted(RAN) == ["org/a", "org/b", "org/c"]


def test_one_changed_config_reruns_only_its_task(tmp_path, cat):
    sweep(tmp_path, "one")
    path = tmp_path / "catalog" / "org" / "b" / "config.json"
    changed = {**json.loads(path.read_text()), "num_key_value_heads": 4, "rope_theta": 1e6}
    path.write_text(json.dumps(changed))
    second = sweep(tmp_path, "two", "latest")
    assert RAN == ["org/b"] and second.reused == 3
    rows = Store(tmp_path / "store").read("results", "two").to_pylist()
    assert {r["model_id"] for r in rows if r["reused_from"] is None} == {"org/b"}


@pytest.mark.parametrize("status", ["timeout", "crash", "oom"])
def test_timeouts_crashes_and_ooms_run_again(tmp_path, cat, status):
    STATUS["org/b"] = status
    sweep(tmp_path, "one")
    STATUS.clear()
    sweep(tmp_path, "two", "latest")
    assert RAN == ["org/b"]
    b = [
        r
        for r in Store(tmp_path / "store").read("results", "two").to_pylist()
        if r["model_id"] == "org/b"
    ]
    assert {r["status"] for r in b} == {"pass"} and {r["reused_from"] for r in b} == {None}


def test_a_failure_of_the_model_is_reused(tmp_path, cat):
    STATUS["org/b"] = "fail"
    sweep(tmp_path, "one")
    STATUS.clear()  # the stand-in would pass now; the key is the same, so the row is copied
    sweep(tmp_path, "two", "latest")
    assert RAN == []
    b = [
        r
        for r in Store(tmp_path / "store").read("results", "two").to_pylist()
        if r["model_id"] == "org/b"
    ]
    assert {r["status"] for r in b} == {"pass", "fail"}


def test_reuse_of_a_run_that_is_not_there_or_itself_is_refused(tmp_path, cat):
    sweep(tmp_path, "one")
    with pytest.raises(UsageError, match="no such run"):
        sweep(tmp_path, "two", "nope")
    with pytest.raises(UsageError, match="cannot reuse itself"):
        sweep(tmp_path, "one", "one")
    assert Store(tmp_path / "store").run("two") is None  # refused before anything was written
    assert sweep(tmp_path, "three", "none").reused == 0 and len(RAN) == 3


def test_a_resumed_reusing_run_keeps_what_it_copied(tmp_path, cat):
    sweep(tmp_path, "one")
    sweep(tmp_path, "two", "latest")
    store = Store(tmp_path / "store")
    parts = store.part_files("results", "two")
    assert parts
    # the run was killed after its first part: the rest is missing, and resumes
    for p in parts[1:]:
        os.remove(p)
    again = sweep(tmp_path, "two", "latest")
    assert RAN == []
    rows = store.read("results", "two").to_pylist()
    assert Counter((r["model_id"], r["stage"]) for r in rows) == Counter(
        {(m, s): 1 for m in CONFIGS for s in ("load", "forward")}
    )
    assert {r["reused_from"] for r in rows} == {"one"} and again.already_done >= 1


def test_the_key_covers_every_setting_and_not_the_catalog():
    base = {
        "device": "neuron",
        "device_emulated": True,
        "device_profile": "torchneuron-2026-04-21",
        "device_profile_hash": "abc",
        "strict": False,
        "dtype": "fp32",
        "stages": "load,forward",
        "compile_backend": "neuron",
        "compile_mode": "raise",
        "timeout_s": 300.0,
        "memory_limit_bytes": 2**32,
        "torch_version": "2.14.1",
        "transformers_version": "5.24.0",
        "diffusers_version": "0.42.1",
        "device_package_version": None,
        "catalog": "a.csv",
        "catalog_hash": "1",
    }
    key = KeyContext.of(base).run_part
    for name, other in [
        ("device", "cpu"),
        ("device_emulated", False),
        ("device_profile_hash", "abd"),
        ("strict", True),
        ("stages", "load"),
        ("compile_backend", "inductor"),
        ("compile_mode", "eager"),
        ("timeout_s", 301.0),
        ("memory_limit_bytes", 0),
        ("torch_version", "2.15.0"),
        ("transformers_version", "5.25.0"),
        ("diffusers_version", "0.43.0"),
        ("device_package_version", "2.14.0"),
    ]:
        assert KeyContext.of({**base, name: other}).run_part != key, name
    assert KeyContext.of({**base, "catalog": "b.csv", "catalog_hash": "2"}).run_part == key
    # the dtype is each task's own (a run may sweep several): in the task's key, not the run's
    both = KeyContext.of({**base, "dtype": "fp32,bf16"})
    assert both.run_part == key
    spec = SimpleNamespace(library="transformers", hash="cfg")
    assert both.key(spec, "fp32") == KeyContext.of(base).key(spec, "fp32")
    assert both.key(spec, "fp32") != both.key(spec, "bf16")


def test_the_task_part_of_the_key(monkeypatch):
    """The shrunk config's hash, the library, its adapter's package version, the task's dtype
    and Python."""
    monkeypatch.setattr(reuse, "adapter_versions", lambda: {"transformers": "5.0", "timm": "1.0"})
    context = KeyContext.of({"device": "cpu"})
    spec = SimpleNamespace(library="transformers", hash="h1")
    key = context.key(spec, "fp32")
    assert context.key(SimpleNamespace(library="transformers", hash="h2"), "fp32") != key
    assert context.key(SimpleNamespace(library="timm", hash="h1"), "fp32") != key
    assert context.key(spec, "bf16") != key
    assert context.key(spec, "fp32") == key
    monkeypatch.setattr(reuse, "adapter_versions", lambda: {"transformers": "5.1", "timm": "1.0"})
    assert KeyContext.of({"device": "cpu"}).key(spec, "fp32") != key
    monkeypatch.setattr(reuse.platform, "python_version", lambda: "3.99.0")
    assert KeyContext.of({"device": "cpu"}).run_part != context.run_part


def test_the_code_hash_changes_with_the_code(tmp_path, monkeypatch):
    for name in ("model_configs", "runners"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.py").write_text("x = 1\n")
    (tmp_path / "runners" / "data.json").write_text("{}")
    monkeypatch.setattr(reuse, "ROOT", tmp_path)
    monkeypatch.setattr(reuse, "CODE", ("model_configs", "runners"))
    reuse.code_hash.cache_clear()
    try:
        before = reuse.code_hash()
        (tmp_path / "runners" / "data.json").write_text('{"a": 1}')
        reuse.code_hash.cache_clear()
        assert reuse.code_hash() != before
    finally:
        reuse.code_hash.cache_clear()


def test_task_faults_are_in_the_key(monkeypatch):
    settings = {"device": "cpu"}
    plain = KeyContext.of(settings).run_part
    monkeypatch.setenv("HFSWEEP_TEST_FAULTS", json.dumps([{"at": "plan", "fault": "raise"}]))
    assert KeyContext.of(settings).run_part == plain  # acts before a task exists
    monkeypatch.setenv("HFSWEEP_TEST_FAULTS", json.dumps([{"at": "stage:load", "fault": "hang"}]))
    assert KeyContext.of(settings).run_part != plain


# ---- end to end ----------------------------------------------------------------------------


def cli(*args: str) -> Finished:
    """`hfsweep ARGS` in a process of its own forked from the `@forked` test's warm one
    (tests/warm_fork.py): its exit status and output, without a fresh interpreter."""
    return run_cli(list(args), env={"HF_HUB_OFFLINE": "1", "HFSWEEP_TEST_FAULTS": None})


@pytest.mark.slow
@forked  # a neuron sweep: in forks of a process that never set a device up (neuron_support)
def test_the_cli_reuses_real_rows_and_reports_them(tmp_path):
    path = catalog(tmp_path, {m: c for m, c in CONFIGS.items() if m != "org/c"})
    common = ["run", "--local", "--catalog", str(path), "--top", "3", "--device", "neuron"]
    common += ["--stages", "load", "--store", str(tmp_path / "store")]
    first = cli(*common, "--run-id", "one", "--no-report")
    assert first.returncode == 0, first.stderr[-3000:]
    second = cli(*common, "--run-id", "two", "--reuse", "latest")
    assert second.returncode == 0, second.stderr[-3000:]
    assert (
        "0 run as 0 unique tiny models, 3 reused from earlier runs "
        "(2 unique tiny models not run again), 3 plans reused (nothing to run: no Ray started)"
        in second.stderr
    )
    for line in (
        "swept, rows reused from an earlier run",
        "from run one",
        "swept, run by this run",
    ):
        assert line in second.stdout
    a = {
        (r["model_id"], r["stage"]): r
        for r in Store(tmp_path / "store").read("results", "one").to_pylist()
    }
    b = {
        (r["model_id"], r["stage"]): r
        for r in Store(tmp_path / "store").read("results", "two").to_pylist()
    }
    assert a.keys() == b.keys()
    for k in a:
        assert {c for c in a[k] if a[k][c] != b[k][c]} <= {"run_id", "finished_at", "reused_from"}
    # refused before anything runs: the CLI's answer and exit code, from its function here
    bad = hfsweep_in_process(*common, "--run-id", "three", "--reuse", "nope", "--no-report")
    assert bad.returncode == 2 and "no such run" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_reuse_through_ray_on_the_s3_store(tmp_path, ray_session):
    path = catalog(tmp_path, {m: c for m, c in CONFIGS.items() if m != "org/c"})
    with local_s3():
        store = f"s3://{BUCKET}/reuse"

        def run(run_id: str, reuse_from: str | None):
            return run_sweep(
                driver_config(
                    store,
                    path,
                    device="neuron",
                    stages=stage_list("load"),
                    run_id=run_id,
                    executor="ray",
                    timeout_s=300.0,
                    reuse=reuse_from,
                )
            )

        first = run("one", None)
        second = run("two", "latest")
        a = Store(store).read("results", "one").to_pylist()
        b = Store(store).read("results", "two").to_pylist()
    assert first.tasks == 2 and second.tasks == 0 and second.reused == 3
    # nothing changed: no entry planned again, no task submitted to Ray
    assert second.plans_reused == 3 and not second.started_executor
    assert {r["reused_from"] for r in b} == {"one"}
    assert sorted(map(comparable, a)) == sorted(map(comparable, b))


def comparable(row: dict[str, Any]) -> str:
    """A row as JSON, less what a copy changes."""
    kept = {k: v for k, v in row.items() if k not in ("run_id", "finished_at", "reused_from")}
    return json.dumps(kept, sort_keys=True, default=str)
