"""Faults inside a model, injected through the test-only hook (`runners.faults`), never by
editing a model: each gives the right row, or, when it is not the model's doing, an
`EnvironmentFault` (a retry, no row); the child never outlives its parent, nor what it started."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ground.errors import EnvironmentFault
from runners import containment, faults
from runners.isolation import CHILD_MODULES, run_isolated
from runners.settings import ModelSettings
from runners.warm import warm_parent
from tests.conftest import ROOT
from tests.kill_support import alive, wait_dead
from tests.test_runner import tiny

STAGES = ["load", "forward", "backward"]


@pytest.fixture(scope="module")
def llama():
    return tiny("llama", "LlamaForCausalLM")


@pytest.fixture
def inject(monkeypatch, tmp_path):
    """Set the hook's rules for this test; returns the state folder."""
    state = tmp_path / "faults"

    def set_rules(*rules: dict) -> Path:
        monkeypatch.setenv(faults.ENV, json.dumps(list(rules)))
        monkeypatch.setenv(faults.STATE_ENV, str(state))
        return state

    return set_rules


def statuses(outcome) -> dict[str, str]:
    return {r.stage: r.status for r in outcome.stages}


def test_a_segfault_in_a_stage_is_a_crash_of_that_stage(llama, inject):
    inject({"at": "stage:forward", "match": "llama", "fault": "segfault"})
    outcome = run_isolated(llama, ModelSettings(device="cpu", stages=STAGES, timeout_s=60))
    assert statuses(outcome) == {"load": "pass", "forward": "crash", "backward": "not_run"}
    assert "SIGSEGV" in outcome.stages[1].error_message


def test_a_hang_is_a_timeout_of_that_stage(llama, inject):
    inject({"at": "stage:backward", "match": "*", "fault": "hang"})
    outcome = run_isolated(llama, ModelSettings(device="cpu", stages=STAGES, timeout_s=6))
    assert statuses(outcome) == {"load": "pass", "forward": "pass", "backward": "timeout"}
    # what the hung process had reached, read from outside before it was killed
    assert (outcome.peak_host_memory_bytes or 0) > 10 << 20
    assert outcome.timings["child_s"] >= 6


def test_allocating_past_the_budget_is_oom_and_nothing_else_suffers(llama, inject):
    inject({"at": "stage:forward", "match": "llama", "fault": "alloc"})
    budget = 512 << 20
    warm_parent(
        *CHILD_MODULES
    )  # what the child is forked from: this process, warmed as run_isolated does
    forked_from = resident_bytes()
    outcome = run_isolated(
        llama, ModelSettings(device="cpu", stages=STAGES, timeout_s=60, memory_limit=budget)
    )
    assert statuses(outcome) == {"load": "pass", "forward": "oom", "backward": "not_run"}
    assert "allocate" in outcome.stages[1].error_message
    # stopped at the budget, not after filling the machine: the peak host memory is the model
    # process's high-water mark: it saw the 64 MiB tensors it touched up to the budget (all but
    # the last), on top of the pages it shares with this process (a long test session's parent
    # is large), and not much more than both together
    peak = outcome.peak_host_memory_bytes or 0
    assert budget - (64 << 20) <= peak <= forked_from + budget + (512 << 20), (peak, forked_from)


def resident_bytes() -> int:
    """This process's resident memory now (VmRSS)."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))


def test_the_alloc_fault_refuses_to_run_without_a_budget(llama, inject):
    inject({"at": "stage:load", "match": "llama", "fault": "alloc"})
    outcome = run_isolated(
        llama, ModelSettings(device="cpu", stages=STAGES, timeout_s=60, memory_limit=None)
    )
    assert outcome.stages[0].status == "fail"
    assert "needs a memory budget" in outcome.stages[0].error_message


def test_an_exception_that_cannot_be_pickled_or_printed_is_a_fail_row(llama, inject):
    inject({"at": "stage:forward", "match": "llama", "fault": "unpicklable"})
    outcome = run_isolated(llama, ModelSettings(device="cpu", stages=STAGES, timeout_s=60))
    assert statuses(outcome) == {"load": "pass", "forward": "fail", "backward": "not_run"}
    assert outcome.stages[1].error_type == "UnpicklableFault"
    assert "cannot be read" in outcome.stages[1].error_message


def test_exiting_without_a_word_is_a_crash(llama, inject):
    inject({"at": "stage:load", "match": "llama", "fault": "exit"})
    outcome = run_isolated(llama, ModelSettings(device="cpu", stages=STAGES, timeout_s=60))
    assert statuses(outcome)["load"] == "crash"
    assert "exited (3)" in outcome.stages[0].error_message


def test_a_sigkill_from_outside_is_the_environment_not_oom(llama, inject):
    """The bug this replaces: any SIGKILL of the child was recorded as the model's `oom`."""
    inject({"at": "stage:load", "match": "llama", "fault": "kill"})
    with pytest.raises(EnvironmentFault, match="SIGKILL from outside"):
        run_isolated(llama, ModelSettings(device="cpu", stages=STAGES, timeout_s=60))


def test_a_sigkill_by_the_kernel_oom_killer_is_oom(llama, inject, monkeypatch):
    """The OOM killer's count (/proc/vmstat oom_kill) going up while the child lived is what
    makes a SIGKILL `oom`; the kernel is not asked to kill anything here, so the count is
    stood in for in the parent (where the death is read)."""
    counts = iter([7, 8])
    monkeypatch.setattr(containment, "oom_kills", lambda: next(counts))
    inject({"at": "stage:forward", "match": "llama", "fault": "kill"})
    outcome = run_isolated(llama, ModelSettings(device="cpu", stages=STAGES, timeout_s=60))
    assert statuses(outcome) == {"load": "pass", "forward": "oom", "backward": "not_run"}
    assert "out-of-memory killer" in outcome.stages[1].error_message


def test_the_device_failing_to_set_up_in_the_child_is_the_environment(llama, inject):
    """The bug this replaces: a DeviceError in the child was recorded as the model's `fail`."""
    inject({"at": "setup", "match": "llama", "fault": "env"})
    with pytest.raises(EnvironmentFault, match="DeviceError"):
        run_isolated(llama, ModelSettings(device="cpu", stages=STAGES, timeout_s=60))


def test_the_device_failing_inside_a_stage_is_the_environment(llama, inject):
    inject({"at": "stage:backward", "match": "llama", "fault": "env"})
    with pytest.raises(EnvironmentFault, match="stopped answering"):
        run_isolated(llama, ModelSettings(device="cpu", stages=STAGES, timeout_s=60))


def test_strict_mode_refusing_a_fallback_stays_the_models_fail():
    from ground.errors import is_environment_error
    from runners.devices.base import FallbackDisallowed

    assert not is_environment_error(FallbackDisallowed(op="aten::foo"))


def test_what_the_model_started_dies_with_it(llama, inject):
    state = inject({"at": "stage:forward", "match": "llama", "fault": "spawn"})
    outcome = run_isolated(llama, ModelSettings(device="cpu", stages=STAGES, timeout_s=6))
    assert statuses(outcome)["forward"] == "timeout"
    helpers = [int(p.name.split("-")[1]) for p in state.glob("spawned-*")]
    assert helpers and all(wait_dead(pid) for pid in helpers)
    assert all(wait_dead(pid) for pid in faults.fired(str(state)))


WORKER = textwrap.dedent(
    """
    from runners.isolation import run_isolated
    from runners.settings import ModelSettings
    from tests.test_runner import tiny
    spec = tiny("llama", "LlamaForCausalLM")
    run_isolated(spec, ModelSettings(device="cpu", stages=["load", "forward"], timeout_s=300))
    """
)


def _worker(state: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )


def _wait_for(path_glob, state: Path, seconds: float = 600.0) -> list[Path]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = list(state.glob(path_glob))
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"nothing matched {path_glob} in {state}")


@pytest.mark.slow
def test_a_killed_parent_takes_its_child_with_it_and_the_next_task_sweeps_what_it_left(inject):
    """A worker killed with SIGKILL (force-cancelled, Ray's memory monitor, an operator): the
    model's child gets SIGKILL from the kernel (PR_SET_PDEATHSIG) instead of running on. A
    helper the child started is reparented and lives on: the registry of children lets the
    next model task on the node kill that process group."""
    state = inject({"at": "stage:forward", "match": "llama", "fault": "spawn"})
    worker = _worker(state)
    try:
        (marker,) = _wait_for("spawned-*", state)
        helper = int(marker.name.split("-")[1])
        (child,) = faults.fired(str(state))
        assert alive(child)  # the model's child hangs in its stage...
        worker.kill()
        worker.wait(10)
        assert wait_dead(child), "the model's child outlived its parent"
        assert alive(helper)  # ...and its helper, reparented, lives on: nobody would kill it
        assert containment.sweep_orphans() >= 1
        assert wait_dead(helper)
    finally:
        worker.kill()


def test_death_certificates():
    death = containment.death_of(-signal.SIGSEGV, "forward", 0)
    assert death.status is not None and death.status.value == "crash"
    assert containment.death_of(-signal.SIGTERM, "forward", 0).status is None
    assert containment.death_of(-signal.SIGABRT, "load", None).status.value == "crash"
    assert containment.death_of(2, "load", None).status.value == "crash"


def test_out_of_memory_is_read_from_the_exception():
    assert containment.out_of_memory(MemoryError())
    assert containment.out_of_memory(
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB")
    )
    assert not containment.out_of_memory(RuntimeError("shape mismatch"))


def test_what_counts_as_the_environment():
    """A missing core package, a full disk or a broken device are the machine's problem (a
    retry, never a row); a missing optional package, a missing file or any other exception may
    be the model's own (its row says so)."""
    import errno

    from ground.errors import DeviceError, is_environment_error

    assert is_environment_error(ModuleNotFoundError("No module named 'torch'", name="torch"))
    assert is_environment_error(ModuleNotFoundError("x", name="transformers"))
    assert not is_environment_error(ModuleNotFoundError("No module named 'timm'", name="timm"))
    assert is_environment_error(OSError(errno.ENOSPC, "No space left on device"))
    assert not is_environment_error(FileNotFoundError(errno.ENOENT, "gone"))
    assert not is_environment_error(OSError(errno.EINVAL, "invalid"))
    assert is_environment_error(DeviceError("the device did not set up"))
    assert is_environment_error(EnvironmentFault("killed from outside"))
    assert not is_environment_error(ValueError("shape mismatch"))


DRIVER = textwrap.dedent(
    """
    import os, subprocess, sys
    from runners import containment
    # a raylet: marked (it inherits the driver's environment); it starts an agent with an
    # environment of its own (no marker), as Ray's raylet starts its dashboard and runtime-env
    # agents, whose process titles then overwrite what /proc shows of their environment
    raylet = (
        "import os, subprocess, sys, time\\n"
        "env = {k: v for k, v in os.environ.items() if k != sys.argv[1]}\\n"
        "agent = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], env=env)\\n"
        "print(agent.pid, flush=True)\\n"
        "time.sleep(600)\\n"
    )
    with containment.embedded_ray_dies_with_this_process():  # what ray.init would start
        proc = subprocess.Popen([sys.executable, "-c", raylet, containment.EMBEDDED_RAY_ENV],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        agent = int(proc.stdout.readline())
    print(proc.pid, agent, flush=True)
    import time; time.sleep(600)
    """
)


def test_what_an_embedded_ray_started_dies_with_its_killed_driver():
    """Before: a driver killed with SIGKILL left its Ray's dashboard and runtime-env agents
    running (reparented to init, they wait on the GCS that died with the driver)."""
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        worker, agent = map(int, driver.stdout.readline().split())
        assert containment.EMBEDDED_RAY_ENV not in os.environ
        time.sleep(1.0)
        assert alive(worker) and alive(agent)  # nothing is killed while the driver lives
        driver.kill()
        driver.wait(10)
        assert wait_dead(worker), "the embedded Ray's raylet outlived its driver"
        assert wait_dead(agent), "the raylet's agent (no marker) outlived its driver"
    finally:
        driver.kill()


DRIVER_KILLED_IN_INIT = textwrap.dedent(
    """
    import datetime, os, signal, subprocess, sys
    from runners import containment
    # a raylet that dies with the driver (as Ray's, by PR_SET_PDEATHSIG) and starts an agent
    # with an environment of its own (no marker) that keeps a log open in the Ray session the
    # driver created, named as Ray names it
    session = os.path.join(sys.argv[1], "session_"
        + datetime.datetime.today().strftime("%Y-%m-%d_%H-%M-%S_%f") + f"_{os.getpid()}")
    os.makedirs(os.path.join(session, "logs"))
    agent = "import sys, time; log = open(sys.argv[1], 'a'); time.sleep(600)"
    raylet = (
        "import ctypes, os, signal, subprocess, sys, time\\n"
        "ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)\\n"
        "env = {k: v for k, v in os.environ.items() if k != sys.argv[1]}\\n"
        f"agent = subprocess.Popen([sys.executable, '-c', {agent!r}, "
        "os.path.join(sys.argv[2], 'logs', 'agent.log')], env=env)\\n"
        "print(agent.pid, flush=True)\\n"
        "time.sleep(600)\\n"
    )
    with containment.embedded_ray_dies_with_this_process():  # killed inside ray.init
        proc = subprocess.Popen([sys.executable, "-c", raylet, containment.EMBEDDED_RAY_ENV,
                                 session], stdout=subprocess.PIPE, text=True)
        agent = int(proc.stdout.readline())
        def holds_log():
            try:
                return any("agent.log" in os.readlink(f"/proc/{agent}/fd/{fd}")
                           for fd in os.listdir(f"/proc/{agent}/fd"))
            except OSError:
                return False
        while not holds_log():
            pass
        print(proc.pid, agent, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_an_agent_of_a_driver_killed_inside_ray_init_dies_too(tmp_path):
    """A driver killed inside `ray.init` has sent its watchdog no processes, and its raylet
    dies with it: the raylet's agent, reparented to init and without the marker, is found by the
    Ray session it holds open (named with the driver's pid)."""
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER_KILLED_IN_INIT, str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    raylet, agent = map(int, driver.stdout.readline().split())
    driver.wait(10)
    try:
        assert driver.returncode == -signal.SIGKILL
        assert wait_dead(raylet), "the raylet outlived its driver"
        assert wait_dead(agent), "the agent of a driver killed inside ray.init outlived it"
    finally:
        for pid in (raylet, agent):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_the_watchdog_spares_a_session_named_after_its_driver_ended(tmp_path):
    """A session folder is the driver's by its pid and its time: one named after the driver
    ended (the kernel gave its pid to a new process, which started a Ray of its own) is spared;
    one named while the driver lived is killed. The driver's pid here is past the kernel's
    pid_max, so no real process is either."""
    import datetime

    pid = 4_194_305
    now = datetime.datetime.now()
    since = (now - datetime.timedelta(seconds=5)).strftime("%Y-%m-%d_%H-%M-%S")
    holders = {}
    for name, when in (
        ("ours", now - datetime.timedelta(seconds=1)),
        ("reused", now + datetime.timedelta(hours=1)),
    ):
        folder = tmp_path / f"session_{when.strftime('%Y-%m-%d_%H-%M-%S_%f')}_{pid}"
        folder.mkdir()
        log = folder / "held.log"
        holders[name] = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys, time; f = open(sys.argv[1], 'a'); print(flush=True); time.sleep(600)",
                str(log),
            ],
            stdout=subprocess.PIPE,
        )
        holders[name].stdout.readline()  # the file is open
    watchdog = subprocess.Popen(
        [sys.executable, "-c", containment._WATCHDOG, "UNUSED=x", str(pid), since],
        stdin=subprocess.PIPE,
    )
    try:
        watchdog.stdin.close()  # EOF: the driver is gone
        watchdog.wait(60)
        assert wait_dead(holders["ours"].pid), "a process in the driver's session outlived it"
        assert alive(holders["reused"].pid), "a session named after the driver ended was killed"
    finally:
        for proc in (*holders.values(), watchdog):
            proc.kill()
            proc.wait()
