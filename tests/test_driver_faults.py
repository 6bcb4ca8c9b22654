"""The driver's own guarantees, without Ray (`--local`): rows flushed on a timer, one driver per
run id, a resume that matches every setting, each model written once, damaged part files put
aside and their models rerun, environment failures retried and never recorded as results."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from ground.errors import StoreError, SystemFaultError, UsageError
from reports.locks import RunLock, RunLocked
from reports.store import Store
from runners import faults
from runners.containment import processes_with_env
from runners.outcome import ModelOutcome, StageResult
from runners.settings import DeviceChoice, ModelSettings
from sweep.commands.options import stage_list
from sweep.driver import run_sweep
from sweep.executors import fault_policy, liveness, ray_cluster
from sweep.settings import JobSettings, ModelRun
from tests.cli_in_process import hfsweep_in_process
from tests.conftest import ROOT, write_catalog

STAGES = "load,forward"
MODELS = [
    {"model_id": f"org/{t}", "library_name": "transformers", "model_type_hint": t}
    for t in ("llama", "gpt2", "bert", "opt")
]


def passing(spec, settings) -> ModelOutcome:
    """A model task that passes every stage at once (the driver is what is tested)."""
    return ModelOutcome([StageResult(stage=s.value, status="pass") for s in settings.stages], 1)


@pytest.fixture
def catalog(tmp_path) -> Path:
    return write_catalog(tmp_path / "catalog.csv", MODELS)


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(fault_policy, "RETRY_BACKOFF_S", 0.0)


JOB = {"run_id", "executor", "flush_s", "progress", "retries"}
TASK = {"dtype", "stages", "timeout_s", "compile_backend", "memory_limit"}


def config(store: Path, catalog_csv: Path, **kw) -> ModelRun:
    """The run's settings, as the CLI would build them (`device_options`: the device's)."""
    base = dict(
        catalog=str(catalog_csv),
        top=None,
        stages=stage_list(STAGES),
        run_id="r",
        executor="local",
        progress=False,
        timeout_s=60,
    )
    merged = {**base, **kw}
    device = DeviceChoice(merged.pop("device", "cpu"), **merged.pop("device_options", {}))
    job = JobSettings(store=str(store), **{k: merged.pop(k) for k in JOB & set(merged)})
    task = ModelSettings(device=device, **{k: merged.pop(k) for k in TASK & set(merged)})
    return ModelRun(job=job, task=task, **merged)


def pairs(store: Path, run_id: str = "r") -> Counter:
    rows = Store(store).read("results", run_id).to_pylist()
    return Counter((r["model_id"], r["stage"]) for r in rows)


def exactly_once(store: Path, models: list[str], run_id: str = "r") -> bool:
    want = Counter({(m, s): 1 for m in models for s in STAGES.split(",")})
    return pairs(store, run_id) == want


ALL = [m["model_id"] for m in MODELS]
MARK = "HFSWEEP_TEST_MARK"  # what a test's drivers and all they start inherit


# ---- each model once ------------------------------------------------------------------------


def test_models_named_twice_are_written_once(tmp_path, catalog):
    store = tmp_path / "store"
    run_sweep(config(store, catalog, models=["org/gpt2", "org/gpt2", "org/bert"]), run_fn=passing)
    assert exactly_once(store, ["org/gpt2", "org/bert"])


def test_a_catalog_listing_a_model_twice_writes_it_once(tmp_path):
    catalog = write_catalog(tmp_path / "dup.csv", [*MODELS, MODELS[1]])
    store = tmp_path / "store"
    summary = run_sweep(config(store, catalog), run_fn=passing)
    assert summary.requested == len(MODELS)
    assert exactly_once(store, ALL)


# ---- flush on a timer -----------------------------------------------------------------------


def test_rows_reach_the_store_on_the_timer_while_another_model_runs(tmp_path, catalog):
    """The tail of a sweep: one model is done, the last one takes long. Its rows must not wait
    for the next result (before: they waited until the slow model finished). The last model
    is held until the test has seen the first one's rows in the store: only the writer's timer
    can have written them (the run loop is inside the held model)."""
    store = tmp_path / "store"
    held = threading.Event()

    def run_fn(spec, settings):
        if spec.model_type == "gpt2":
            assert held.wait(600), "the test never released the last model"
        return passing(spec, settings)

    cfg = config(store, catalog, models=["org/llama", "org/gpt2"], flush_s=1.0, plan_batch=1)
    worker = threading.Thread(target=run_sweep, args=(cfg,), kwargs={"run_fn": run_fn})
    worker.start()
    try:
        deadline = time.monotonic() + 600  # a guard against a hang, not a speed
        while not pairs(store):
            assert time.monotonic() < deadline, "the timer never flushed the first model"
            time.sleep(0.1)
        rows = Store(store).read("results", "r").to_pylist()
        assert {r["model_id"] for r in rows} == {"org/llama"}, "rows waited for the slow model"
        assert worker.is_alive()
    finally:
        held.set()
        worker.join(600)
    assert exactly_once(store, ["org/llama", "org/gpt2"])


# ---- one driver per run ---------------------------------------------------------------------


def test_a_second_driver_on_the_same_run_is_refused_with_a_clear_message(tmp_path, catalog):
    store = tmp_path / "store"
    with RunLock(Store(store), "r"):
        with pytest.raises(RunLocked, match="being written by another driver"):
            run_sweep(config(store, catalog), run_fn=passing)
        # the CLI's answer (its exit code and message) through its function in this process;
        # a lock held by another process is test_the_lock_of_a_killed_driver_is_released's
        proc = hfsweep_in_process(
            *["run", "--local", "--catalog", str(catalog), "--store", str(store)],
            *["--run-id", "r", "--top", "2", "--stages", STAGES, "--no-report"],
        )
    assert proc.returncode == 2
    assert "being written by another driver" in proc.stderr and "Traceback" not in proc.stderr
    assert not pairs(store)  # the refused driver wrote nothing
    run_sweep(config(store, catalog), run_fn=passing)  # released: the run goes on
    assert exactly_once(store, ALL)


def test_the_lock_of_a_killed_driver_is_released(tmp_path):
    store = tmp_path / "store"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from reports.locks import RunLock; from reports.store import "
            f"Store; l = RunLock(Store({str(store)!r}), 'r').__enter__(); print('held', "
            "flush=True); time.sleep(600)",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLocked), RunLock(Store(store), "r"):
            pass
        holder.kill()
        holder.wait(10)
        with RunLock(Store(store), "r"):
            pass
    finally:
        holder.kill()


def test_a_forked_child_does_not_hold_its_drivers_lock(tmp_path):
    """A model's or an op's process is forked from the driver; once the driver lets the run go
    (or is killed), a child still alive (dying of its parent's death, or not yet) must not keep
    the lock, or the driver's rerun is refused. The child here is alive throughout, and the run
    is taken again once the child runs its own code (as a model's body does: what happens at a
    fork is done by then), however late the machine schedules it."""
    store = Store(tmp_path / "store")
    ready_r, ready_w = os.pipe()
    release_r, release_w = os.pipe()
    with RunLock(store, "r"):
        pid = os.fork()
        if pid == 0:  # the child: say it runs, wait until the test lets it go, nothing else
            os.close(release_w)
            os.write(ready_w, b"r")
            os.read(release_r, 1)
            os._exit(0)
    os.close(release_r)
    os.close(ready_w)
    try:
        assert os.read(ready_r, 1) == b"r"
        with RunLock(store, "r"):  # the child is alive: the run is free all the same
            pass
    finally:
        os.close(release_w)
        os.close(ready_r)
        os.waitpid(pid, 0)


def test_an_object_store_run_is_leased(tmp_path, monkeypatch):
    from reports import locks
    from tests.s3_support import BUCKET, local_s3

    with local_s3():
        store = Store(f"s3://{BUCKET}/leases")
        with RunLock(store, "r"), pytest.raises(RunLocked, match="lease was renewed"):
            RunLock(store, "r").__enter__()
        with RunLock(store, "r"):  # released on exit
            pass
        # a lease left by a driver that died on this host is taken over at once
        dead = RunLock(store, "r")
        dead.holder["pid"] = 2**22 + 12345  # no such process
        dead._write_lease()
        with RunLock(store, "r"):
            pass
        # another host's lease is honoured until it goes stale
        other = RunLock(store, "r")
        other.holder["host"] = "elsewhere"
        other._write_lease()
        with pytest.raises(RunLocked):
            RunLock(store, "r").__enter__()
        monkeypatch.setattr(locks, "LEASE_S", 0.0)
        with RunLock(store, "r"):
            pass


# ---- resume compares every setting ----------------------------------------------------------


def _profile(tmp_path: Path) -> str:
    path = tmp_path / "ops.txt"
    path.write_text("aten::add.Tensor\naten::mm\n")
    return str(path)


CHANGES = {
    "device": lambda tmp: {"device": "neuron"},
    "strict": lambda tmp: {"device_options": {"strict": True}},
    "device_profile_hash": lambda tmp: {"device_options": {"profile": _profile(tmp)}},
    "dtype": lambda tmp: {"dtype": "bf16"},
    "stages": lambda tmp: {"stages": stage_list("load")},
    "catalog": lambda tmp: {"catalog": str(write_catalog(tmp / "other.csv", MODELS[:2]))},
    "compile_backend": lambda tmp: {"compile_backend": "aot_eager"},
    "timeout_s": lambda tmp: {"timeout_s": 99.0},
    "memory_limit_bytes": lambda tmp: {"memory_limit": 1 << 30},
}


@pytest.mark.parametrize("setting", sorted(CHANGES))
def test_a_resume_with_another_setting_is_refused(tmp_path, catalog, setting):
    """Before, only device, dtype and stages were compared: a resume with another profile,
    strict mode, catalog, compile backend, timeout or budget mixed rows into one run."""
    store = tmp_path / "store"
    base = {"device": "neuron"} if setting in ("strict", "device_profile_hash") else {}
    run_sweep(config(store, catalog, top=2, **base), run_fn=passing)
    changed = {**base, **CHANGES[setting](tmp_path)}
    with pytest.raises(UsageError, match=f"other settings: .*\\b{setting}="):
        run_sweep(config(store, catalog, top=4, **changed), run_fn=passing)
    run_sweep(config(store, catalog, top=4, **base), run_fn=passing)  # the same: goes on
    assert exactly_once(store, ALL)


@pytest.mark.parametrize("column, value", [("device_emulated", False), ("torch_version", "2.0.0")])
def test_a_resume_on_other_hardware_or_software_is_refused(tmp_path, catalog, column, value):
    """Real versus emulated neuron, or another torch: the run row says what the run was."""
    store = tmp_path / "store"
    run_sweep(config(store, catalog, top=1, device="neuron"), run_fn=passing)
    row = Store(store).run("r")
    Store(store).write_run({**row, column: value})
    with pytest.raises(UsageError, match=f"{column}={value}"):
        run_sweep(config(store, catalog, device="neuron"), run_fn=passing)


# ---- damaged part files ---------------------------------------------------------------------


def _parts(store: Path, table: str) -> list[Path]:
    return sorted((store / table / "run_id=r").glob("part-*.parquet"))


def test_damaged_parts_are_reported_put_aside_and_their_models_rerun(tmp_path, catalog):
    store = tmp_path / "store"
    run_sweep(config(store, catalog, flush_s=0.0, plan_batch=1), run_fn=passing)
    results = _parts(store, "results")
    assert len(results) == len(MODELS)  # one model per part
    truncated, garbled = results[0], results[1]
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    data = bytearray(garbled.read_bytes())
    data[4:-8] = os.urandom(len(data) - 12)  # magic bytes intact, everything else noise
    garbled.write_bytes(bytes(data))
    runs_part = _parts(store, "runs")[0]
    runs_part.write_bytes(b"PAR1 not a parquet file")
    # a reader skips what it cannot read instead of failing
    assert Store(store).run("r") is not None

    warnings: list[str] = []
    summary = run_sweep(config(store, catalog, flush_s=0.0), run_fn=passing, warn=warnings.append)
    assert summary.damaged_parts == 3 and len(warnings) == 3
    assert all("damaged" in w and "run again" in w for w in warnings)
    assert summary.models_run == 2  # the two models whose parts were damaged
    assert exactly_once(store, ALL)
    assert sorted(p.name for p in (store / "results" / "run_id=r").glob(".damaged-*")) == sorted(
        f".damaged-{p.name}" for p in (truncated, garbled)
    )


def test_a_damaged_fallbacks_part_reruns_the_models_of_its_results_part(tmp_path, catalog):
    store = tmp_path / "store"

    def with_fallback(spec, settings):
        out = passing(spec, settings)
        out.stages[1].fallbacks = [{"op": "aten::mm", "count": 1, "source": "eager"}]
        out.stages[1].fallback_op_count = 1
        return out

    run_sweep(config(store, catalog, flush_s=0.0, plan_batch=1), run_fn=with_fallback)
    fb = _parts(store, "fallbacks")[0]
    fb.write_bytes(fb.read_bytes()[:20])
    summary = run_sweep(config(store, catalog), run_fn=with_fallback, warn=lambda line: None)
    assert summary.damaged_parts == 2 and summary.models_run == 1
    assert exactly_once(store, ALL)
    assert Store(store).read("fallbacks", "r").num_rows == len(MODELS)


def test_truncated_empty_parts_are_put_aside_and_written_again(tmp_path, catalog):
    """The run's parts of no rows are checked like its data parts: truncated to 100 bytes, the
    same command puts them aside (a new one where the table has no other part: here
    `alternatives`), and pyarrow opens every table again."""
    import pyarrow.dataset as pads

    store = tmp_path / "store"
    run_sweep(config(store, catalog), run_fn=passing)
    truncated = [
        next((store / table / "run_id=r").glob("empty-*.parquet"))
        for table in ("results", "alternatives")
    ]
    for empty in truncated:
        empty.write_bytes(empty.read_bytes()[:100])
    with pytest.raises(Exception, match="magic bytes"):
        pads.dataset(store / "results", format="parquet").to_table()

    warnings: list[str] = []
    summary = run_sweep(config(store, catalog), run_fn=passing, warn=warnings.append)
    assert summary.damaged_parts == 2 and summary.models_run == 0
    assert len(warnings) == 2 and all("held no rows" in w for w in warnings), warnings
    for empty in truncated:
        assert (empty.parent / f".damaged-{empty.name}").exists()
    assert not list((store / "results" / "run_id=r").glob("empty-*"))  # has data parts
    assert len(list((store / "alternatives" / "run_id=r").glob("empty-*"))) == 1  # a new one
    assert pads.dataset(store / "results", format="parquet").to_table().num_rows == 2 * len(ALL)
    assert pads.dataset(store / "alternatives", format="parquet").to_table().num_rows == 0
    assert exactly_once(store, ALL)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go): a connection is refused."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_hub_that_does_not_answer_is_asked_once_and_the_run_plans_offline(
    tmp_path, catalog, monkeypatch
):
    """Online, with the Hub's endpoint a closed loopback port: one probe, one line, and every
    model planned from its library's defaults (never one Hub timeout and retries per model)."""
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    warnings: list[str] = []
    summary = run_sweep(config(tmp_path / "store", catalog), run_fn=passing, warn=warnings.append)
    assert len(warnings) == 1 and warnings[0].startswith("the Hub does not answer"), warnings
    assert "HF_HUB_OFFLINE=1" in warnings[0]
    assert os.environ["HF_HUB_OFFLINE"] == "1"  # what the run's workers and children inherit
    assert summary.models_run == len(MODELS) and exactly_once(tmp_path / "store", ALL)
    rows = Store(tmp_path / "store").read("results", "r").to_pylist()
    assert {r["config_source"] for r in rows} == {"transformers_default"}


# ---- environment failures: retried, never rows ----------------------------------------------


def _faults(monkeypatch, tmp_path, *rules):
    monkeypatch.setenv(faults.ENV, json.dumps(list(rules)))
    monkeypatch.setenv(faults.STATE_ENV, str(tmp_path / "faults"))


def test_an_environment_error_while_planning_is_retried_not_a_fail_row(
    tmp_path, catalog, monkeypatch
):
    """Before: plan_entry's catch-all turned any exception (a DeviceError, a missing core
    package, a full disk) into the model's `fail` row, and resume counted it done."""
    _faults(monkeypatch, tmp_path, {"at": "plan", "match": "org/gpt2", "fault": "env", "times": 2})
    store = tmp_path / "store"
    summary = run_sweep(config(store, catalog), run_fn=passing)
    assert not summary.abandoned
    assert exactly_once(store, ALL)
    assert {r["status"] for r in Store(store).read("results", "r").to_pylist()} == {"pass"}


def test_an_environment_error_that_persists_leaves_no_row_and_the_rerun_runs_it(
    tmp_path, catalog, monkeypatch
):
    _faults(monkeypatch, tmp_path, {"at": "plan", "match": "org/bert", "fault": "env"})
    store = tmp_path / "store"
    summary = run_sweep(config(store, catalog), run_fn=passing)
    assert summary.abandoned == ["org/bert"]
    assert "DeviceError: injected" in next(iter(summary.causes))
    assert exactly_once(store, [m for m in ALL if m != "org/bert"])
    assert Store(store).run("r")["status"] == "incomplete"
    monkeypatch.delenv(faults.ENV)
    again = run_sweep(config(store, catalog), run_fn=passing)
    assert again.models_run == 1 and not again.abandoned
    assert exactly_once(store, ALL)
    assert Store(store).run("r")["status"] == "finished"


def test_the_device_failing_in_the_child_is_retried_then_passes(tmp_path, catalog, monkeypatch):
    """Real children: the first attempt's device set-up fails, the retry runs the model."""
    _faults(monkeypatch, tmp_path, {"at": "setup", "match": "gpt2", "fault": "env", "times": 1})
    store = tmp_path / "store"
    summary = run_sweep(config(store, catalog, models=["org/gpt2"]))
    assert not summary.abandoned
    rows = Store(store).read("results", "r").to_pylist()
    assert {(r["status"], r["attempt"]) for r in rows} == {("pass", 2)}


def test_a_sweep_whose_environment_keeps_failing_stops_with_one_error(
    tmp_path, catalog, monkeypatch
):
    _faults(monkeypatch, tmp_path, {"at": "plan", "match": "*", "fault": "env"})
    store = tmp_path / "store"
    with pytest.raises(SystemFaultError, match="keeps failing: 3 plan tasks in a row"):
        run_sweep(config(store, catalog), run_fn=passing)
    assert not pairs(store)
    assert Store(store).run("r")["status"] == "interrupted"


# Both drivers of the test below, each a process of its own forked from one interpreter warmed
# once as a `--local` driver warms itself (torch, transformers, what a task's child imports:
# `runners.isolation.warm_for`) and started with the test's marker in its environment: every
# process of both runs shows it in /proc (a forked child shows its parent's), so what outlives
# them is found (tests/warm_fork.py). One line in: the driver's argv and environment changes
# (JSON); one line out: its exit status, stdout and stderr.
WARM_DRIVERS = f"""
import json, sys
import sweep.commands.run, sweep.driver
from runners.isolation import warm_for
from runners.settings import ModelSettings
from sweep.commands.options import stage_list
from tests.warm_fork import run_cli
warm_for(ModelSettings(stages=stage_list({STAGES!r})))
for line in sys.stdin:
    argv, env = json.loads(line)
    done = run_cli(argv, env=env)
    print(json.dumps([done.returncode, done.stdout, done.stderr]), flush=True)
"""


def _drive(
    parent: subprocess.Popen, argv: list[str], env: dict[str, str | None]
) -> SimpleNamespace:
    assert parent.stdin is not None and parent.stdout is not None
    parent.stdin.write(json.dumps([argv, env]) + "\n")
    parent.stdin.flush()
    line = parent.stdout.readline()
    assert line, "the drivers' parent died"
    returncode, stdout, stderr = json.loads(line)
    return SimpleNamespace(returncode=returncode, stdout=stdout, stderr=stderr)


@pytest.mark.slow
def test_the_cli_says_which_models_got_no_rows_and_exits_3(tmp_path, catalog):
    """The fault matrix's `env` trial (bench/fault_matrix.py --fast, made here in CI): the
    device never sets up for one model: no row for it, exit 3 naming it, nothing left behind;
    then the same command without the fault writes its rows, each once."""
    mark = secrets.token_hex(8)  # every process of both runs inherits it: what is left is an orphan
    env = {
        **os.environ,
        MARK: mark,
        faults.ENV: json.dumps([{"at": "setup", "match": "bert", "fault": "env"}]),
        faults.STATE_ENV: str(tmp_path / "faults"),
    }
    store = tmp_path / "store"
    cmd = ["run", "--local", "--catalog", str(catalog), "--store", str(store)]
    cmd += ["--run-id", "r", "--models", "org/bert,org/gpt2", "--stages", STAGES, "--no-report"]
    parent = subprocess.Popen(
        [sys.executable, "-c", WARM_DRIVERS],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        proc = _drive(parent, [*cmd, "--retries", "1"], {})
        assert proc.returncode == 3, proc.stderr[-2000:]
        assert "1 model of run r got no rows" in proc.stderr and "org/bert" in proc.stderr
        assert "rerun the same command" in proc.stderr and "Traceback" not in proc.stderr
        assert exactly_once(store, ["org/gpt2"])

        again = _drive(parent, cmd, {faults.ENV: None, faults.STATE_ENV: None})
        assert again.returncode == 0, again.stderr[-2000:]
        assert exactly_once(store, ["org/bert", "org/gpt2"])
        parent.stdin.close()  # type: ignore[union-attr]
        assert parent.wait(60) == 0
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 30  # a guard for a child that is exiting, not a speed
    while left := processes_with_env(MARK, mark):
        assert time.monotonic() < deadline, f"left behind by the drivers: {left}"
        time.sleep(0.2)


def test_every_part_is_synced_to_disk_before_it_gets_its_name(tmp_path, catalog, monkeypatch):
    from reports import store as store_module

    synced: list[int] = []
    real = store_module.os.fsync
    monkeypatch.setattr(store_module.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    store = tmp_path / "store"
    run_sweep(config(store, catalog, models=["org/gpt2"]), run_fn=passing)
    parts = len(list(store.rglob("part-*.parquet")))
    assert parts >= 3  # runs x2 (running, finished), results
    assert len(synced) >= 2 * parts  # each file, and its folder after the rename


def test_a_lease_is_renewed_while_its_driver_lives(monkeypatch):
    from reports import locks
    from tests.s3_support import BUCKET, local_s3

    monkeypatch.setattr(locks, "HEARTBEAT_S", 0.2)
    with local_s3():
        store = Store(f"s3://{BUCKET}/beats")
        with RunLock(store, "r") as held:
            first = held._read_lease()["heartbeat"]
            deadline = time.monotonic() + 600  # a guard against a hang, not a speed
            while held._read_lease()["heartbeat"] <= first:  # renewed by its thread
                assert time.monotonic() < deadline, "the lease was never renewed"
                time.sleep(0.1)


class _FlakyReads:
    """A local filesystem whose next `failures` reads of any file fail as a dropped connection
    or a replaced object would (moto's server fails a read that races an overwrite this way)."""

    def __init__(self, failures: int):
        import pyarrow.fs as pafs

        self.fs, self.failures = pafs.LocalFileSystem(), failures

    def open_input_stream(self, path: str):
        if self.failures:
            self.failures -= 1
            raise OSError("AWS Error NETWORK_CONNECTION during GetObject operation")
        return self.fs.open_input_stream(path)

    def __getattr__(self, name: str):
        return getattr(self.fs, name)


def _leased_store(tmp_path: Path, fs: _FlakyReads) -> SimpleNamespace:
    """A store that RunLock leases as it does an object store's, on local files."""
    return SimpleNamespace(root=str(tmp_path), local=False, fs=fs)


def test_a_lease_read_that_fails_is_retried_and_then_an_error_never_taken_for_none(
    tmp_path, monkeypatch
):
    from reports import locks

    monkeypatch.setattr(locks, "READ_BACKOFF_S", 0.0)
    fs = _FlakyReads(0)
    holder = RunLock(_leased_store(tmp_path, fs), "r")
    (tmp_path / ".locks").mkdir()
    holder._write_lease()
    # fewer failures than attempts: the lease as written
    fs.failures = locks.READ_ATTEMPTS - 1
    assert holder._read_lease()["token"] == holder.holder["token"]
    # a lease that cannot be read is not "no lease": a second driver is refused, writes nothing
    fs.failures = locks.READ_ATTEMPTS
    with pytest.raises(StoreError, match=r"cannot read the lease of run r .*NETWORK_CONNECTION"):
        RunLock(_leased_store(tmp_path, fs), "r").__enter__()
    assert holder._read_lease()["token"] == holder.holder["token"]


# ---- the figures the README gives -----------------------------------------------------------


def test_the_defaults_the_readme_promises():
    """README: flushed every 2 s, `--retries` 2, `--memory-limit` 4 GiB (`run` and `ops`), a
    lease renewed every 5 s and stale after 30 s, a task's worker beating every 5 s and a task
    silent for 5 minutes taken for lost, a cluster not answering for 20 s gone. A change to
    any of them must change the README too."""
    import argparse

    from reports import locks
    from sweep.commands import ops as ops_command
    from sweep.commands import run as run_command
    from sweep.settings import OpRun

    for command in (run_command, ops_command):
        parser = argparse.ArgumentParser()
        command.add_arguments(parser)
        args = parser.parse_args([])
        assert (args.retries, args.memory_limit) == (2, 4.0)
    defaults = ModelRun()
    assert defaults.job.flush_s == 2.0 and defaults.job.retries == 2
    assert defaults.task.memory_limit == 4 << 30
    assert OpRun().job.flush_s == 2.0 and OpRun().task.memory_limit == 4 << 30
    assert locks.HEARTBEAT_S == 5.0
    assert (liveness.BEAT_S, liveness.GUARD_S, ray_cluster.GONE_AFTER_S) == (5.0, 300.0, 20.0)


def test_a_lease_goes_stale_after_30_s_without_a_heartbeat(tmp_path):
    lock = RunLock(Store(tmp_path / "store"), "r")
    now = time.time()
    elsewhere = {"host": "elsewhere", "pid": 1}
    assert not lock._stale({**elsewhere, "heartbeat": now - 25})
    assert lock._stale({**elsewhere, "heartbeat": now - 35})
    # on this host a lease whose driver is gone is stale at once; a live driver's is not
    here = {"host": lock.holder["host"], "heartbeat": now}
    assert not lock._stale({**here, "pid": os.getpid()})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert lock._stale({**here, "pid": dead.pid})
