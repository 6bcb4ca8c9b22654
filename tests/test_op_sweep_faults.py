"""The op sweep on the model sweep's core, held to what issue 12 proved for the model sweep and
tested the same way (`tests/test_driver_faults.py`): rows flushed on a timer, one driver per run
id, a resume that matches every setting that changes an op row, damaged part files put aside
and their groups run again, a driver killed at any moment resumed without loss or duplicates,
and a group the environment stops retried, then given up without rows, never written as
`crash`.

The exit code 3 and the kill need `hfsweep ops` processes of their own (exit 3: a fork of a
`@forked` test's warm process, tests/warm_fork.py; the kill: a fresh interpreter); the refused
second driver and the resume after the kill call the CLI's own function in the test's process
(`tests/cli_in_process.py`), which saves the interpreter, torch and OpInfo database each process
pays (about 10 CPU s); exit 2 of a real process is tests/test_op_sweep_run.py's."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from ground.errors import SystemFaultError, UsageError
from reports.locks import RunLock, RunLocked
from reports.store import Store
from runners import faults
from runners.settings import DeviceChoice, OpSettings
from sweep.executors import fault_policy
from sweep.op_driver import OpOutcome, run_op_sweep
from sweep.settings import JobSettings, OpRun
from tests.cli_in_process import hfsweep_in_process
from tests.conftest import HFSWEEP
from tests.kill_support import kill_while_waiting
from tests.neuron_support import forked
from tests.warm_fork import run_cli

OPS = ("abs", "neg", "exp", "sin")


def passing(units, settings) -> OpOutcome:
    """An op task whose two samples per OpInfo x dtype pass at once (the driver is tested)."""
    rows = [
        {**unit.meta(dtype), "sample_index": i, "phase": "forward", "status": "pass"}
        for unit in units
        for dtype in unit.dtypes
        for i in range(2)
    ]
    return OpOutcome(rows)


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(fault_policy, "RETRY_BACKOFF_S", 0.0)


JOB = {"run_id", "executor", "flush_s", "progress", "retries"}


def config(store: Path, **kw) -> OpRun:
    """The op run's settings, as the CLI would build them (`device_options`: the device's)."""
    merged = {"run_id": "r", "executor": "local", "progress": False, "dtypes": ("fp32",), **kw}
    device = DeviceChoice(merged.pop("device", "cpu"), **merged.pop("device_options", {}))
    job = JobSettings(store=str(store), **{k: merged.pop(k) for k in JOB & set(merged)})
    ops = merged.pop("ops", OPS)
    group_size = merged.pop("group_size", 1)
    return OpRun(job=job, task=OpSettings(device=device, **merged), ops=ops, group_size=group_size)


def units(store: Path, run_id: str = "r") -> Counter:
    """(OpInfo, dtype, sample, phase) -> how many rows say it."""
    rows = Store(store).read("ops", run_id).to_pylist()
    return Counter((r["opinfo"], r["dtype"], r["sample_index"], r["phase"]) for r in rows)


def exactly_once(store: Path, ops=OPS, run_id: str = "r") -> bool:
    counts = units(store, run_id)
    return all(n == 1 for n in counts.values()) and {k[0] for k in counts} == set(ops)


# ---- flush on a timer -----------------------------------------------------------------------


def test_op_rows_reach_the_store_on_the_timer_while_another_group_runs(tmp_path):
    """The last group is held until the test has seen the first group's rows in the store:
    only the writer's timer can have written them (the run loop is inside the held group)."""
    store = tmp_path / "store"
    held = threading.Event()

    def run_fn(units, settings):
        if units[0].key == "neg":
            assert held.wait(600), "the test never released the last group"
        return passing(units, settings)

    cfg = config(store, ops=("abs", "neg"), flush_s=1.0)
    worker = threading.Thread(target=run_op_sweep, args=(cfg,), kwargs={"run_fn": run_fn})
    worker.start()
    try:
        deadline = time.monotonic() + 600  # a guard against a hang, not a speed
        while not units(store):
            assert time.monotonic() < deadline, "the timer never flushed the first group"
            time.sleep(0.1)
        rows = Store(store).read("ops", "r").to_pylist()
        assert {r["opinfo"] for r in rows} == {"abs"}, "rows waited for the slow group"
        assert worker.is_alive()
    finally:
        held.set()
        worker.join(600)
    assert exactly_once(store, ("abs", "neg"))


# ---- one driver per run ---------------------------------------------------------------------


def test_a_second_op_driver_on_the_same_run_is_refused_with_a_clear_message(tmp_path):
    store = tmp_path / "store"
    with RunLock(Store(store), "r"):
        with pytest.raises(RunLocked, match="being written by another driver"):
            run_op_sweep(config(store), run_fn=passing)
        cli = hfsweep_in_process(
            "ops", "--local", "--ops", "abs", "--dtypes", "fp32",
            "--store", str(store), "--run-id", "r", "--no-report",
        )  # fmt: skip
    assert cli.returncode == 2
    assert "being written by another driver" in cli.stderr and "Traceback" not in cli.stderr
    assert not units(store)  # the refused driver wrote nothing
    run_op_sweep(config(store), run_fn=passing)  # released: the run goes on
    assert exactly_once(store)


# ---- resume compares every setting ----------------------------------------------------------


def _file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


CHANGES = {
    "device": lambda tmp: {"device": "neuron"},
    "strict": lambda tmp: {"device_options": {"strict": True}},
    "device_profile_hash": lambda tmp: {
        "device_options": {"profile": _file(tmp, "ops.txt", "aten::add.Tensor\naten::mm\n")}
    },
    "dtypes": lambda tmp: {"dtypes": ("fp32", "bf16")},
    "inputs": lambda tmp: {"inputs": "reference"},
    "timeout_s": lambda tmp: {"timeout_s": 99.0},
    "memory_limit_bytes": lambda tmp: {"memory_limit": 1 << 30},
    "declarations_hash": lambda tmp: {"declarations": _file(tmp, "skips.json", '{"skips": []}')},
}


@pytest.mark.parametrize("setting", sorted(CHANGES))
def test_an_op_resume_with_another_setting_is_refused(tmp_path, setting):
    """Before, only device, dtypes and inputs were compared: a resume with another profile,
    timeout, budget or skips file mixed rows into one op run."""
    store = tmp_path / "store"
    base = {"device": "neuron"} if setting in ("strict", "device_profile_hash") else {}
    run_op_sweep(config(store, ops=OPS[:2], **base), run_fn=passing)
    changed = {**base, **CHANGES[setting](tmp_path)}
    with pytest.raises(UsageError, match=f"other settings: .*\\b{setting}="):
        run_op_sweep(config(store, **changed), run_fn=passing)
    run_op_sweep(config(store, **base), run_fn=passing)  # the same: goes on
    assert exactly_once(store)


def test_an_op_resume_on_other_software_is_refused(tmp_path):
    store = tmp_path / "store"
    run_op_sweep(config(store, ops=OPS[:1]), run_fn=passing)
    row = Store(store).run("r", "op_runs")
    Store(store).write_run({**row, "torch_version": "2.0.0"}, "op_runs")
    with pytest.raises(UsageError, match="torch_version=2.0.0"):
        run_op_sweep(config(store), run_fn=passing)


# ---- damaged part files ---------------------------------------------------------------------


def _parts(store: Path, table: str) -> list[Path]:
    return sorted((store / table / "run_id=r").glob("part-*.parquet"))


def test_damaged_op_parts_are_reported_put_aside_and_their_groups_rerun(tmp_path):
    store = tmp_path / "store"
    run_op_sweep(config(store, flush_s=0.0), run_fn=passing)
    ops_parts = _parts(store, "ops")
    assert len(ops_parts) == len(OPS)  # one group per part
    truncated, garbled = ops_parts[0], ops_parts[1]
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    data = bytearray(garbled.read_bytes())
    data[4:-8] = os.urandom(len(data) - 12)
    garbled.write_bytes(bytes(data))
    _parts(store, "op_runs")[0].write_bytes(b"PAR1 not a parquet file")
    assert Store(store).run("r", "op_runs") is not None  # a reader skips what it cannot read

    warnings: list[str] = []
    summary = run_op_sweep(config(store, flush_s=0.0), run_fn=passing, warn=warnings.append)
    assert summary.damaged_parts == 3 and len(warnings) == 3
    assert all("damaged" in w and "run again" in w for w in warnings)
    assert summary.already_done == len(OPS) - 2  # the groups of the two damaged parts ran again
    assert exactly_once(store)
    assert sorted(p.name for p in (store / "ops" / "run_id=r").glob(".damaged-*")) == sorted(
        f".damaged-{p.name}" for p in (truncated, garbled)
    )


# ---- environment failures: retried, never rows ----------------------------------------------


def _faults(monkeypatch, tmp_path, *rules):
    monkeypatch.setenv(faults.ENV, json.dumps(list(rules)))
    monkeypatch.setenv(faults.STATE_ENV, str(tmp_path / "faults"))


def test_a_lost_op_group_is_retried_then_given_up_without_rows(tmp_path, monkeypatch):
    """Before: a lost group was written as `crash` rows (and resume counted it done)."""
    _faults(monkeypatch, tmp_path, {"at": "task", "match": "neg", "fault": "env", "times": 2})
    store = tmp_path / "store"
    summary = run_op_sweep(config(store), run_fn=_with_task_faults)
    assert not summary.abandoned  # retried into a success
    assert exactly_once(store)
    _faults(monkeypatch, tmp_path, {"at": "task", "match": "exp", "fault": "env"})
    again = tmp_path / "again"
    summary = run_op_sweep(config(again), run_fn=_with_task_faults)
    assert summary.abandoned == ["exp:fp32"]
    assert "DeviceError: injected" in next(iter(summary.causes))
    assert {k[0] for k in units(again)} == set(OPS) - {"exp"}  # no row, no `crash`
    assert Store(again).run("r", "op_runs")["status"] == "incomplete"
    monkeypatch.delenv(faults.ENV)
    rerun = run_op_sweep(config(again), run_fn=_with_task_faults)
    assert rerun.already_done == len(OPS) - 1 and not rerun.abandoned
    assert exactly_once(again)
    assert Store(again).run("r", "op_runs")["status"] == "finished"


def _with_task_faults(units, settings):
    faults.inject("task", *(u.key for u in units))
    return passing(units, settings)


def test_an_op_sweep_whose_environment_keeps_failing_stops_with_one_error(tmp_path, monkeypatch):
    _faults(monkeypatch, tmp_path, {"at": "task", "match": "*", "fault": "env"})
    store = tmp_path / "store"
    with pytest.raises(SystemFaultError, match="keeps failing: 3 op-sweep tasks in a row"):
        run_op_sweep(config(store), run_fn=_with_task_faults)
    assert not units(store)
    assert Store(store).run("r", "op_runs")["status"] == "interrupted"


@pytest.mark.slow
@forked
def test_the_ops_cli_says_what_got_no_rows_and_exits_3(tmp_path):
    """Real children: the device fails to set up for one group every time. `hfsweep ops` runs
    in a process of its own (its exit status, stdout and stderr), forked from the `@forked`
    test's warm process (tests/warm_fork.py) rather than a fresh interpreter."""
    env = {
        faults.ENV: json.dumps([{"at": "setup", "match": "neg", "fault": "env"}]),
        faults.STATE_ENV: str(tmp_path / "faults"),
    }
    store = tmp_path / "store"
    proc = run_cli(
        ["ops", "--local", "--ops", "abs,neg", "--dtypes", "fp32", "--group-size", "1"]
        + ["--store", str(store), "--run-id", "r", "--retries", "1", "--no-report"],
        env=env,
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "1 OpInfo x dtype of run r got no rows" in proc.stderr and "neg:fp32" in proc.stderr
    assert "rerun the same command" in proc.stderr and "Traceback" not in proc.stderr
    assert {k[0] for k in units(store)} == {"abs"}
    assert all(n == 1 for n in units(store).values())


# ---- the driver killed mid-run --------------------------------------------------------------


@pytest.mark.slow
def test_a_killed_op_driver_resumes_without_loss_or_duplicates(tmp_path):
    """The driver is killed while its last group waits in its first sample (a `wait` fault that
    is never released) and once a flush reached the store: mid-run on any machine, however
    fast its groups finish (before: killed after the first rows, which on a fast machine came
    after the last group). The same command then resumes it, in this process (the CLI's
    function: what is left of the killed driver in the store and its lock is the point)."""
    ops = "abs,neg,exp,cosh"
    store, state = tmp_path / "store", tmp_path / "faults"
    args = ["ops", "--local", "--ops", ops, "--dtypes", "fp32,bf16", "--group-size", "1"]
    args += ["--store", str(store), "--run-id", "k", "--no-report"]
    waiting = {"at": "sample", "match": "cosh", "fault": "wait"}
    stored = lambda: units(store, "k")  # noqa: E731
    kill_while_waiting(
        [*HFSWEEP, *args], env=dict(os.environ), state=state, rule=waiting, stored=stored
    )
    before = units(store, "k")
    assert "cosh" not in {k[0] for k in before}  # killed mid-run: the waiting group has no rows
    done = hfsweep_in_process(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    after = units(store, "k")
    assert all(n == 1 for n in after.values()), [k for k, n in after.items() if n > 1][:5]
    assert {(k[0], k[1]) for k in after} == {
        (o, d) for o in ops.split(",") for d in ("fp32", "bf16")
    }
    assert all(after[k] == 1 for k in before)  # nothing written before the kill was lost
