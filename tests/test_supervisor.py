"""The one child supervisor both sweeps run in (`runners/supervisor.py`): its deadline counts the
child's own time, so a child a loaded machine starves is slow, not hung; and how a child ended
is decided by cause, never by which of two events the parent happened to see first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types

import pytest

from ground.errors import EnvironmentFault
from ground.schema import Status
from runners import supervisor
from runners.supervisor import Child, Kind, OwnClock

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="run-queue delay is read from Linux's /proc"
)


def _busy_for(send, cpu_s: float) -> None:
    """Spin until this process has had `cpu_s` seconds of CPU, then say so."""
    start = time.process_time()
    while time.process_time() - start < cpu_s:
        pass
    send(("done", time.process_time() - start))


def _starved(send, cpu_s: float) -> None:
    """As `_busy_for`, at the lowest priority, on the CPU a busier process holds."""
    os.sched_setaffinity(0, {0})
    os.nice(19)
    _busy_for(send, cpu_s)


def _hog() -> subprocess.Popen:
    """A CPU-bound process on CPU 0 at normal priority, returned once it spins (it says so
    first; the test stops it by its pid)."""
    code = (
        "import os; os.sched_setaffinity(0, {0})\nprint('spinning', flush=True)\nwhile True: pass"
    )
    hog = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert hog.stdout is not None and hog.stdout.readline().strip() == "spinning"
    return hog


def test_a_child_starved_of_cpu_is_slow_not_timed_out():
    """Before: the deadline was wall time, so a stage that a loaded machine left waiting for a
    CPU was a `timeout` (the fault matrix's allocation and device-error trials under load)."""
    hog = _hog()
    try:
        with Child(_starved, (0.05,)) as child:
            child.deadline(1.0)
            message = child.receive()
            wall = time.monotonic() - child.started
            own = child.clock.elapsed_s()
    finally:
        hog.kill()
        hog.wait(10)
    assert message is not None and message[0] == "done", child.ending
    assert child.ending is None
    assert wall > 1.0, f"the child was not starved ({wall:.2f} s): the test proves nothing"
    assert own < wall


def _hang(send) -> None:
    send(("ready", None))
    time.sleep(3600)


def test_a_child_that_hangs_uses_up_its_own_time():
    with Child(_hang, ()) as child:
        child.deadline(1.0)
        assert child.receive() == ("ready", None)
        assert child.receive() is None
    assert child.ending is not None and child.ending.timed_out
    assert 1.0 <= child.ending.own_s < 600.0  # ended by its deadline, not by its own end


def _last_word_then_die(send) -> None:
    send(("done", 42))
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_message_sent_before_a_death_is_read_before_the_death():
    with Child(_last_word_then_die, (), process="the model's process") as child:
        child.doing, child.stage = "forward", "forward"
        child.deadline(60.0)
        child.proc.join(600)  # the child is dead by the time the parent looks
        assert not child.proc.is_alive()
        assert child.receive() == (Kind.DONE, 42)
        # a SIGKILL from outside: the environment's, raised by the supervisor itself
        with pytest.raises(EnvironmentFault, match="running forward was killed with SIGKILL") as e:
            child.receive()
    assert e.value.stage == "forward"
    assert child.ending is not None and not child.ending.timed_out
    assert child.ending.death is not None and child.ending.death.status is None


def _crash(send) -> None:
    send(("ready", None))
    os.kill(os.getpid(), signal.SIGSEGV)


def test_a_death_of_the_childs_own_is_its_ending_not_a_fault():
    with Child(_crash, ()) as child:
        child.doing = "the sample"
        child.deadline(60.0)
        assert child.receive() == (Kind.READY, None)
        assert child.receive() is None
    assert child.ending is not None and child.ending.death is not None
    assert child.ending.death.status == Status.CRASH
    assert "running the sample died with SIGSEGV" in child.ending.death.message


def _word_then_hang(send) -> None:
    send(("stage", "load"))
    time.sleep(3600)


def test_a_message_sent_before_the_deadline_is_read_after_it_passed():
    with Child(_word_then_hang, ()) as child:
        child.deadline(0.5)
        while child.clock.elapsed_s() <= 0.5:  # the parent looks only after the deadline passed
            time.sleep(0.05)
        assert child.receive() == ("stage", "load")
        assert child.receive() is None
    assert child.ending is not None and child.ending.timed_out


def _raise_before_ready(send) -> None:
    raise ValueError("the device would not set up")


def _raise_after_ready(send) -> None:
    send(("ready", None))
    raise ValueError("a bug outside any stage")


def test_what_escapes_the_body_is_the_environment_until_ready():
    with Child(_raise_before_ready, (), process="the op sweep's process") as child:
        child.doing = "the sample"
        child.deadline(60.0)
        with pytest.raises(EnvironmentFault) as e:
            child.receive()
    assert e.value.message == (
        "the op sweep's process could not run the sample: ValueError: the device would not set up"
    )
    assert e.value.fields == {"cause_type": "ValueError"}
    with Child(_raise_after_ready, ()) as child:
        child.deadline(60.0)
        assert child.receive() == (Kind.READY, None)
        assert child.receive() == (Kind.ERROR, ("ValueError", "a bug outside any stage"))


def test_the_own_time_clock_counts_wall_time_where_the_kernel_does_not_say(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(supervisor, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(supervisor, "_run_delay_s", lambda pid: None)
    clock = OwnClock(os.getpid())
    now[0] += 0.3
    assert clock.elapsed_s() == clock.wall_s() == pytest.approx(0.3)


def _die_before_ready(send) -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def test_a_death_before_ready_is_the_environment_not_the_body():
    """A child that dies while it sets its device up has not touched its model or samples: a
    retry, never a `crash` row."""
    with Child(_die_before_ready, (), process="the model's process") as child:
        child.doing, child.stage = "load", "load"
        child.deadline(60.0)
        with pytest.raises(EnvironmentFault, match="died while it set up its device") as e:
            child.receive()
    assert "died with SIGSEGV" in e.value.message and e.value.stage == "load"
    assert child.ending is not None and child.ending.death is not None


def _allocate(send, mib: int) -> None:
    import numpy as np

    held = np.ones(mib << 18, dtype=np.float32)  # allocated before READY: the set-up's
    send(("ready", None))
    try:
        more = np.ones(mib << 18, dtype=np.float32)  # the body's: past its budget
        send(("done", int(held.nbytes + more.nbytes)))
    except MemoryError:
        send(("done", "MemoryError"))


def test_the_memory_budget_counts_from_ready():
    """What the set-up holds (a spawned child's imports, a device's runtime) is not the body's
    budget; what the body allocates past its budget fails in the body."""
    with Child(_allocate, (96,), memory_limit=64 << 20) as child:
        child.deadline(60.0)
        assert child.receive() == (Kind.READY, None)
        assert child.receive() == (Kind.DONE, "MemoryError")
    with Child(_allocate, (32,), memory_limit=64 << 20) as child:
        child.deadline(60.0)
        assert child.receive() == (Kind.READY, None)
        assert child.receive() == (Kind.DONE, 64 << 20)


class _Finalized:
    """Writes `path` when it is finalized: in a cycle, only a collection finalizes it."""

    def __init__(self, path: str):
        self.path, self.me = path, self

    def __del__(self) -> None:
        with open(self.path, "a") as fh:
            fh.write(f"{os.getpid()}\n")


def _collect(send) -> None:
    import gc

    send((Kind.READY, 0.0))
    send((Kind.DONE, gc.collect()))


def test_a_forked_child_never_collects_what_its_parent_left(tmp_path):
    """What the parent holds at the fork, garbage included, is the parent's: a child's
    collection does not finalize it (it would close, delete or free the parent's things twice,
    and objects of libraries that do not survive a fork crashed a child that freed them). The
    parent still collects its own garbage afterwards."""
    import gc

    path = tmp_path / "finalized"
    gc.disable()  # the cycle stays uncollected until this test collects it
    try:
        _Finalized(str(path))  # unreachable at once: garbage only a collection frees
        with Child(_collect, ()) as child:
            child.deadline(60.0)
            assert child.receive() == (Kind.READY, 0.0)
            assert child.receive()[0] == Kind.DONE
            assert child.receive() is None
        assert not path.exists()  # the child collected, and left the parent's garbage alone
        gc.collect()
        assert path.read_text() == f"{os.getpid()}\n"
    finally:
        gc.enable()
