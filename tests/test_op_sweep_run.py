"""The op sweep end to end on a few OpInfos (the fast subset CI runs): `hfsweep ops` on `cpu` is a
self-check (all native, nothing wrong), on the emulated neuron device every row says so and the
fallbacks are charged to the ops that caused them; a sample that crashes or hangs is a row;
declared skips, resume and the Ray driver.

Each `hfsweep ops` process pays an interpreter, `import torch` and PyTorch's OpInfo database
before its first sample (about 10 CPU s), so the CPU runs call the CLI's own function in the
test's process (`tests/cli_in_process.py`); processes of their own hold what only a process
shows: the emulated neuron sweep (exit 0; its children are forked from a process that ran no
backward: a fork of a `@forked` test's warm process, tests/warm_fork.py) and a bad argument
(exit 2, a fresh interpreter), here, and exit 3 and a killed driver in
tests/test_op_sweep_faults.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ground.errors import UnknownNameError, UsageError
from ground.schema import OP_SKIP_PYTORCH, OpSkipReason
from reports.store import Store
from tests.cli_in_process import hfsweep_in_process
from tests.conftest import HFSWEEP
from tests.neuron_support import forked
from tests.warm_fork import run_cli

FAST_OPS = "add,nn.functional.layer_norm,sum,softmax,empty,nn.functional.conv2d,index_put,kthvalue"


def _ops(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run(
        [*HFSWEEP, "ops", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture
def ops_here():
    """`hfsweep ops ARGS` in the test's process (the CPU only: `tests/cli_in_process.py`)."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return hfsweep_in_process("ops", *args)

    return run


def _rows(store: Path) -> list[dict]:
    return Store(store).read("ops").to_pylist()


# ---- op_db and declarations -------------------------------------------------------------------


def test_select_opinfos_names_and_variants() -> None:
    from runners.op_sweep.opdb import select_opinfos

    assert select_opinfos(["nn.functional.layer_norm"]) == ["nn.functional.layer_norm"]
    assert set(select_opinfos(["normal"])) >= {"normal", "normal.number_mean"}
    with pytest.raises(UnknownNameError, match="did you mean nn.functional.layer_norm"):
        select_opinfos(["nn.functional.layernorm"])


def test_applicability_and_tolerances() -> None:
    import torch

    from runners.op_sweep.opdb import applicability, get_opinfo, tolerance
    from runners.settings import dtype_names

    zeta = applicability(get_opinfo("special.zeta"), torch.bfloat16, "cpu")
    assert zeta.forward is not None and zeta.forward[0] == OpSkipReason.DTYPE_NOT_SUPPORTED
    empty = applicability(get_opinfo("empty"), torch.float32, "cpu")
    assert empty.forward is not None and "non-deterministic" in empty.forward[1]
    assert applicability(get_opinfo("add"), torch.float32, "cpu").forward is None
    # layer_norm declares a looser fp32 tolerance than assert_close's default
    assert tolerance(get_opinfo("nn.functional.layer_norm"), torch.float32) > (1e-5, 1.3e-6)
    assert tolerance(get_opinfo("add"), torch.float32) == (1e-5, 1.3e-6)
    assert dtype_names("bf16,fp32") == ("bf16", "fp32")
    with pytest.raises(UsageError, match="unknown dtype 'fp64'"):
        dtype_names("fp64")


def test_declarations(tmp_path: Path) -> None:
    from runners.op_sweep.declarations import load_declarations

    neuron = load_declarations("neuron:0")
    assert "Float64" in (neuron.unsupported_dtype("float64") or "")
    assert "Complex" in (neuron.unsupported_dtype("complex64") or "")
    assert load_declarations("cpu").unsupported_dtype("float64") is None
    extra = tmp_path / "skips.json"
    extra.write_text(json.dumps({"skips": [{"opinfo": "sum", "reason": "r", "phase": "backward"}]}))
    merged = load_declarations("neuron", extra)
    assert merged.skip_for("sum", "sum", "fp32", "backward") == "r"
    assert merged.skip_for("sum", "sum", "fp32", "forward") is None
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="not valid JSON"):
        load_declarations("cpu", bad)


# ---- end to end ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_op_sweeps_parent_warms_no_compile_stack(tmp_path: Path, ops_here, monkeypatch) -> None:
    """No op child compiles: before it forks them, the op sweep's parent imports its own modules
    (`runners.warm.warm_parent`) but neither Dynamo's backends nor the compile stack, seconds of
    CPU in every Ray worker and `--local` driver of an op sweep."""
    from runners import warm

    monkeypatch.setattr(warm, "_WARMED", set())  # as in a parent that warmed nothing yet
    store = str(tmp_path / "store")
    out = ops_here("--ops", "abs", "--dtypes", "fp32", "--local", "--store", store, "--no-report")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "runners.op_sweep.run" in warm._WARMED  # it warmed
    assert not {"backends", "compile"} & warm._WARMED


@pytest.mark.slow
def test_cpu_self_check_all_native_nothing_wrong(tmp_path: Path, ops_here) -> None:
    store = tmp_path / "store"
    out = ops_here("--ops", FAST_OPS, "--device", "cpu", "--local", "--store", str(store))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Op sweep: denominators" in out.stdout
    # softmax has a with_dtype variant: 9 OpInfos of the 8 names, at the three default dtypes
    assert "9 OpInfos x 3 dtypes, 0 OpInfo x dtype already done" in out.stderr
    rows = _rows(store)
    statuses = {r["status"] for r in rows}
    assert statuses <= {"pass", "skip"}, statuses
    assert sum(r["status"] == "pass" for r in rows) > 100
    for r in rows:
        assert r["device"] == "cpu" and r["device_emulated"] is False
        for d in r["dispatched"] or []:
            assert d["execution"] in ("native", "not_run") and not d["fallbacks"]
            assert d["native_lowering"] is True
        if r["status"] == "skip":
            assert OpSkipReason(r["reason"]) in OP_SKIP_PYTORCH  # the CPU declares nothing
    # every OpInfo x dtype asked for has rows, backward ones included
    keys = [*FAST_OPS.split(","), "softmax.with_dtype"]  # a plain name takes every variant
    assert {(r["opinfo"], r["dtype"]) for r in rows} == {
        (k, d) for k in keys for d in ("fp32", "bf16", "fp16")
    }
    assert {r["phase"] for r in rows if r["opinfo"] == "nn.functional.layer_norm"} == {
        "forward",
        "backward",
    }
    runs = Store(store).read("op_runs").to_pylist()
    assert {r["status"] for r in runs} == {"running", "finished"}
    assert runs[0]["torch_version"] and runs[0]["expecttest_version"]
    summary = Store(store).read("op_summary").to_pylist()
    assert summary and all(s["fallback"] == 0 and s["wrong"] == 0 for s in summary)


@pytest.mark.slow
@forked
def test_emulated_neuron_end_to_end(tmp_path: Path) -> None:
    """`hfsweep ops` in a process of its own (its exit status), forked from the `@forked` test's
    warm process (tests/warm_fork.py): it never ran a backward, so its children set the
    emulated device up, as a fresh interpreter's would."""
    store = tmp_path / "store"
    out = run_cli(
        ["ops", "--ops", FAST_OPS, "--dtypes", "fp32,bf16", "--device", "neuron", "--local",
         "--store", str(store)],
        env={"HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "EMULATED DEVICE" in out.stdout
    rows = _rows(store)
    assert all(r["device"] == "neuron" and r["device_emulated"] for r in rows)
    assert all(r["device_profile"] and r["device_profile_hash"] for r in rows)
    ran = [r for r in rows if r["status"] not in ("skip", "not_run")]
    assert ran and all(r["dispatched"] is not None for r in ran)
    fell_back = [d for r in ran for d in r["dispatched"] if d["execution"] == "fallback"]
    assert fell_back, "the emulated device lowers only its profile: something falls back"
    for d in fell_back:  # a fallback is charged to the op that caused it
        assert d["fallbacks"]
    for r in ran:  # the per-row count is the distinct fallback overloads of its ops
        assert r["fallback_op_count"] == len({f for d in r["dispatched"] for f in d["fallbacks"]})
    assert {r["status"] for r in rows} <= {"pass", "skip", "fail", "wrong", "not_run"}
    # the report reads it back and labels it emulated (the CLI's function, in this process)
    report = hfsweep_in_process("report", "--store", str(store))
    assert report.returncode == 0, report.stderr[-1000:]
    assert "Op sweep: denominators" in report.stdout and "EMULATED" in report.stdout


@pytest.mark.slow
def test_declared_skips_and_resume(tmp_path: Path, ops_here) -> None:
    store = tmp_path / "store"
    skips = tmp_path / "skips.json"
    skips.write_text(
        json.dumps(
            {
                "unsupported_dtypes": {"bfloat16": "no bf16 here (test)"},
                "skips": [{"opinfo": "sum", "reason": "sum is declared broken (test)"}],
            }
        )
    )
    args = ["--ops", "sum,add", "--dtypes", "fp32,bf16", "--device", "cpu", "--local"]
    args += ["--store", str(store), "--run-id", "resume-me", "--skips", str(skips)]
    first = ops_here(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    rows = _rows(store)
    sums = [
        r
        for r in rows
        if r["opinfo"] == "sum" and r["sample_index"] is not None and r["dtype"] == "fp32"
    ]
    assert sums and all(r["reason"] == "device_declared" for r in sums)
    assert all("declared broken" in r["detail"] for r in sums)
    bf16_add = [r for r in rows if r["opinfo"] == "add" and r["dtype"] == "bf16"]
    assert bf16_add and all(r["reason"] == "device_unsupported_feature" for r in bf16_add)
    assert "skipped by the device" in first.stdout
    again = ops_here(*args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "4 OpInfo x dtype already done, 0 rows written" in again.stderr
    assert len(_rows(store)) == len(rows)
    other = ops_here("--ops", "sum", "--dtypes", "fp32", "--device", "cpu", "--local", "--store",
                 str(store), "--run-id", "resume-me")  # fmt: skip
    assert other.returncode == 2 and "dtypes=fp32,bf16" in other.stderr


def test_bad_input_is_one_clear_error(tmp_path: Path, ops_here) -> None:
    out = ops_here("--ops", "nn.functional.layernorm", "--store", str(tmp_path / "s"))
    assert out.returncode == 2
    assert "Unknown OpInfo name" in out.stderr and "Traceback" not in out.stderr
    listed = ops_here("--list", "--ops", "normal")
    assert listed.returncode == 0 and "normal.number_mean" in listed.stdout
    # a real process: the exit code `hfsweep ops` ends with on bad input (before any import
    # of torch, so it costs about a second)
    out = _ops("--dtypes", "fp64", "--store", str(tmp_path / "s"))
    assert out.returncode == 2 and "unknown dtype 'fp64'" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "s").exists()


# ---- isolation ----------------------------------------------------------------------------------


def _crashy_samples(op, device, dtype, requires_grad, **kwargs):
    import torch
    from torch.testing._internal.opinfo.core import SampleInput

    for i in range(4):
        yield SampleInput(torch.full((2,), float(i), dtype=dtype))


def _crashy(x):
    value = int(x[0].item())
    if value == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    if value == 2:
        time.sleep(60)
    return x * 2


def test_a_sample_that_crashes_or_hangs_is_a_row() -> None:
    import torch
    from torch.testing._internal.opinfo.core import OpInfo

    from runners.op_sweep import opdb
    from runners.op_sweep.isolation import run_units_isolated
    from runners.op_sweep.units import Unit
    from runners.settings import OpSettings

    fake = OpInfo(
        "hfsweep_crashy",
        op=_crashy,
        dtypes=(torch.float32,),
        sample_inputs_func=_crashy_samples,
        supports_autograd=False,
        supports_out=False,
    )
    opdb._by_key()["hfsweep_crashy"] = fake  # children are forked: they see it too
    try:
        unit = Unit("hfsweep_crashy", "hfsweep_crashy", None, ("fp32",))
        rows = list(run_units_isolated([unit], OpSettings(device="cpu", timeout_s=3)))
    finally:
        del opdb._by_key()["hfsweep_crashy"]
    by_sample = {(r["sample_index"], r["phase"]): r for r in rows}
    assert by_sample[(0, "forward")]["status"] == "pass"
    crash = by_sample[(1, "forward")]
    assert crash["status"] == "crash" and "SIGSEGV" in crash["error_message"]
    hang = by_sample[(2, "forward")]
    assert hang["status"] == "timeout" and "3 s" in hang["error_message"]
    assert by_sample[(3, "forward")]["status"] == "pass"  # the sweep went on
    assert by_sample[(None, "backward")]["reason"] == "no_autograd"  # one row for the op


# ---- the Ray driver -----------------------------------------------------------------------------


@pytest.mark.slow
def test_ray_driver(tmp_path: Path, ray_session) -> None:
    """On Ray: two groups of OpInfos, two Ray tasks, each row naming its Ray worker. On the
    session's embedded Ray; `hfsweep ops` starting its own runs in the fault matrix (`ops`)."""
    from runners.settings import DeviceChoice, OpSettings
    from sweep.op_driver import run_op_sweep
    from sweep.settings import JobSettings, OpRun

    store = tmp_path / "store"
    job = JobSettings(store=str(store), executor="ray", progress=False)
    run = OpRun(
        job=job,
        task=OpSettings(device=DeviceChoice("cpu"), dtypes=("fp32",)),
        ops=("add", "sum", "softmax"),
        group_size=2,
    )
    summary = run_op_sweep(run)
    assert summary.opinfos == 4 and summary.units == 4  # softmax has a with_dtype variant
    assert not summary.abandoned
    rows = _rows(store)
    assert {r["opinfo"] for r in rows} == {"add", "sum", "softmax", "softmax.with_dtype"}
    assert all(r["worker"].startswith("ray:") for r in rows)
    assert {r["status"] for r in rows} <= {"pass", "skip"}


def test_fallbacks_reported_after_the_block_are_charged_by_base_name() -> None:
    """A device whose log fills only when the block ends (TorchNeuron's profiler events):
    fallbacks go to the dispatched op of the same base name, or become ops of their own."""
    import torch

    from runners.devices.base import FallbackLog
    from runners.op_sweep.check import DispatchRecorder, dispatched_rows

    recorder = DispatchRecorder()
    with recorder:
        torch.ones(3).add(1).sum()
    log = FallbackLog()
    log.record("aten::add.out")
    log.record("aten::_internal_helper", n=2)
    recorder.attribute(log)
    rows = {r["op"]: r for r in dispatched_rows(recorder, lambda op: op != "aten::add.Tensor")}
    assert rows["aten::add.Tensor"]["execution"] == "fallback"
    assert rows["aten::add.Tensor"]["fallbacks"] == ["aten::add.out"]
    assert rows["aten::add.Tensor"]["native_lowering"] is False
    assert rows["aten::sum"]["execution"] == "native"
    assert rows["aten::_internal_helper"]["calls"] == 2


def test_lowering_declarations_by_device() -> None:
    from runners.devices import get_device
    from runners.op_sweep.run import lowering_of

    assert lowering_of(get_device("cpu"))("aten::anything") is True
    neuron = get_device("neuron")
    lowering = lowering_of(neuron)
    assert lowering("aten::add.Tensor") is True  # in every bundled profile
    assert lowering("aten::kthvalue") is False  # no registration in TorchNeuron's snapshot
    assert lowering("aten::histc") is True  # registered there (the torch-mlir list lacks it)
    assert lowering_of(get_device("neuron", profile="torch-mlir"))("aten::histc") is False
