"""One child process under supervision: what a model (`runners.isolation`) and a group of op
samples (`runners.op_sweep.isolation`) run in, so that a hang or a crash becomes a row.

- **Start.** Forked from a parent that imported torch and the libraries but ran no op (a child
  starts in milliseconds), with the parent's heap frozen (`frozen_heap`), or spawned where the
  device needs an environment variable that the parent's torch never read
  (`fresh_interpreter`), and always off Linux.
- **Contain.** The child dies with its parent, leads its own process group (killed when the child
  is done), and cannot allocate past its memory budget (`runners.containment`). The budget is
  the body's: it is counted from what the child holds once its device is set up (`READY`), so
  a spawned child's imports and a device's set-up never spend it.
- **Talk.** The child sends messages `(Kind, payload)` through a pipe as it goes; the parent
  reads them as they come. Every body starts the same way (`device_ready`: torch's threads, the
  device built and set up, then `READY`). An exception that escapes the child's body is sent as
  `ERROR` with `(type, text)`, or as `ENV` when it is the environment's: anything before the
  body said `READY`, and afterwards what `is_environment_error` says is.
- **A deadline on the child's own time.** The clock counts the child's wall time less the time
  it waited for a CPU (the kernel's run-queue delay, `/proc/PID/schedstat`): a child that a
  loaded machine starves is slow, not hung, and never runs out of its deadline for that. A
  child that hangs (sleeps, spins, blocks) uses up its deadline as before.
- **Its end, by cause, never by which event came first.** A message the child sent is always
  read before anything else is decided; only when none is left does the child's death or the
  deadline count. A death is read from the exit status (`runners.containment.death_of`).
- **The environment's faults, raised here.** An `ENV` message, a death before `READY` (the
  body had not touched its model or samples yet), and a death that is no status of the child's
  own (a SIGKILL or a stop from outside, not for memory), raise
  `EnvironmentFault` from `receive`, saying what the child was doing (`Child.doing`): the task
  is retried and nothing of it is recorded.

Beside it, `runners.warm` warms a parent once before it forks its first child.
"""

from __future__ import annotations

import contextlib
import enum
import gc
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

from ground.errors import EnvironmentFault, is_environment_error, safe_text
from runners import containment, faults
from runners.containment import Death

if TYPE_CHECKING:
    from runners.devices.base import Device

POLL_S = 1.0  # the longest the parent waits before it looks at the clock again
JOIN_S = 5.0


class Kind(str, enum.Enum):
    """What a child's message is (`(kind, payload)`): the protocol between a child and its
    parent, the same for every body. The supervisor reads `PEAK` and `ENV` itself; the rest
    are returned by `Child.receive` in the order they were sent."""

    READY = "ready"  # the device is set up (seconds it took): what fails later may be the body's
    STAGE = "stage"  # the model sweep: one stage's result (`StageResult`)
    UNIT = "unit"  # the op sweep: the (unit, dtype) indexes it starts on
    SAMPLE = "sample"  # the op sweep: the sample it starts on (index, phases, its text)
    ROW = "row"  # the op sweep: one row
    DONE = "done"  # the body finished (what it has left to say)
    ERROR = "error"  # the body raised after READY, not the environment: (type, text)
    ENV = "env"  # the environment failed in the child: (type, text); raised, never returned
    PEAK = "peak"  # the child's peak resident memory (bytes): kept as `Child.peak_rss`


Message = tuple[Kind, Any]
Send = Callable[[Message], None]


def fresh_interpreter(device_name: str, options: dict[str, Any] | None) -> bool:
    """Whether the device's children must be fresh interpreters: it needs an environment
    variable this process's torch never read (set here now, so they inherit it)."""
    from runners.devices import prepare_process_env

    return prepare_process_env(device_name, options)


def _context(spawn: bool) -> Any:
    if spawn or not sys.platform.startswith("linux"):
        return mp.get_context("spawn")
    return mp.get_context("fork")


def context_of(spawn: bool) -> Any:
    """The multiprocessing context a `Child(spawn=spawn)` starts in (for pipes to hand it)."""
    return _context(spawn)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Around a fork: everything this process holds goes to the garbage collector's permanent
    generation until the child is started, so the child's collections never walk what it
    inherited. Objects of libraries that do not survive a fork (a browser driver's greenlets,
    in a test process) crashed a child whose collection freed them, and walking them writes to
    every page the child shares with its parent. The parent's collector gets them back at once."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def forks() -> bool:
    """Whether children of this process are forked (what the parent warms itself for)."""
    return sys.platform.startswith("linux")


# ---- in the child --------------------------------------------------------------------------


def _child_main(
    conn: Any, parent_pid: int, memory_limit: int | None, body: Callable[..., None], args: tuple
) -> None:
    containment.enter_child(parent_pid)
    ready = False

    def send(message: Message) -> None:
        nonlocal ready
        if message[0] == Kind.READY and not ready:
            ready = True
            if memory_limit:  # the body's budget, beyond what the set-up holds
                containment.limit_memory(memory_limit)
        conn.send(message)

    try:
        import faulthandler

        faulthandler.disable()  # a crash is reported as a row, not as a dump on stderr
        body(send, *args)
    except BaseException as exc:  # report, then exit: the parent decides what it means
        kind = Kind.ENV if not ready or is_environment_error(exc) else Kind.ERROR
        with contextlib.suppress(Exception):
            conn.send((Kind.PEAK, peak_rss_bytes()))
            conn.send((kind, (type(exc).__name__, safe_text(exc))))
    finally:
        conn.close()
        os._exit(0)


def device_ready(send: Send, settings: Any, fault_keys: tuple[str | None, ...]) -> Device:
    """How every body starts in its child: torch's threads (`settings.threads`), the device
    (`settings.device`) built and set up, then `READY` with the seconds that took. Whatever
    fails until then is the environment's. `fault_keys`: what the test-only fault hook's
    `setup` rules match the task by."""
    started = time.perf_counter()
    import torch

    torch.set_num_threads(max(1, settings.threads))
    device: Device = settings.device.build()
    faults.inject("setup", *fault_keys)
    device.setup()
    send((Kind.READY, time.perf_counter() - started))
    return device


def peak_rss_bytes(pid: int | str = "self") -> int | None:
    """The peak resident memory of a process (its VmHWM; ru_maxrss for this process where /proc
    is missing), None when it cannot be read (the process is gone). A forked child's count
    starts at the resident pages it shares with its parent when it is forked."""
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    if pid == "self":
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) * (1 if sys.platform == "darwin" else 1024)
    return None


# ---- the clock -----------------------------------------------------------------------------


def _run_delay_s(pid: int) -> float | None:
    """Seconds `pid` has waited on a run queue for a CPU since it started (None: unknown)."""
    try:
        with open(f"/proc/{pid}/schedstat") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class OwnClock:
    """Seconds a process has had for itself since `restart`: wall time less the time it waited
    for a CPU (where the kernel does not say, wall time)."""

    def __init__(self, pid: int):
        self.pid = pid
        self._delay = 0.0
        self.restart()

    def _read(self) -> float:
        delay = _run_delay_s(self.pid)
        if delay is not None:  # after the process is gone, its last reading stands
            self._delay = delay
        return self._delay

    def restart(self) -> None:
        self._wall0 = time.monotonic()
        self._delay0 = self._read()

    def wall_s(self) -> float:
        return time.monotonic() - self._wall0

    def elapsed_s(self) -> float:
        return self.wall_s() - (self._read() - self._delay0)


# ---- in the parent -------------------------------------------------------------------------


@dataclass(frozen=True)
class Ending:
    """How a child ended without a last word: past its deadline, or dead (`death`: a status
    of the child's own, `crash` or `oom`, with what it says; a death from outside raised
    `EnvironmentFault` instead)."""

    timed_out: bool
    exitcode: int | None
    own_s: float  # the child's own time on the clock when it ended
    wall_s: float
    death: Death | None = None  # None: it timed out


class Child:
    """`with Child(body, args) as child:` runs `body(send, *args)` in a supervised child;
    `child.receive()` returns its messages one by one, then None once it ended (its `ending`
    says how), and raises `EnvironmentFault` when the environment stopped it. Leaving the
    block kills what is left of the child and its process group.

    `process` names the child in those faults ("the model's process"); the parent keeps
    `doing` (what the child is doing now, "forward", "the sample") and `stage` (the stage it is
    in, for the fault's field) up to date as messages come."""

    def __init__(
        self,
        body: Callable[..., None],
        args: tuple,
        *,
        spawn: bool = False,
        memory_limit: int | None = None,
        process: str = "the child process",
    ):
        self.body, self.args = body, args
        self.spawn, self.memory_limit = spawn, memory_limit
        self.process = process
        self.doing = "its work"
        self.stage: str | None = None
        self.ending: Ending | None = None
        self.peak_rss: int | None = None  # the child's peak resident memory, where it said
        self.ready = False  # the child said READY: its device is set up
        self.started = 0.0
        self._budget = float("inf")

    def __enter__(self) -> Child:
        containment.sweep_orphans()  # groups left by a parent that died on this node
        ctx = _context(self.spawn)
        self._conn, child_conn = ctx.Pipe(duplex=False)
        args = (child_conn, os.getpid(), self.memory_limit, self.body, self.args)
        self.proc = ctx.Process(target=_child_main, args=args, daemon=True)
        self._oom_before = containment.oom_kills()
        self.started = time.monotonic()
        with frozen_heap():
            self.proc.start()
        containment.register(self.proc.pid)
        child_conn.close()
        self.clock = OwnClock(self.proc.pid)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.proc.is_alive():
            if self.peak_rss is None:
                self.peak_rss = peak_rss_bytes(self.proc.pid)
            self.proc.kill()
        self.proc.join(JOIN_S)
        containment.kill_group(self.proc.pid)  # whatever the child started goes with it
        containment.unregister(self.proc.pid)
        self._conn.close()

    def deadline(self, seconds: float) -> None:
        """From now, the child has `seconds` of its own time until the next call."""
        self.clock.restart()
        self._budget = seconds

    def watch_oom(self) -> None:
        """Count only the OOM killer's kills from now as a cause of this child's death (a
        child serving one unit of work after another: each unit's own)."""
        self._oom_before = containment.oom_kills()

    def extend(self, seconds: float) -> None:
        """At least `seconds` of its own time from now (never less than it has left)."""
        if self._budget - self.clock.elapsed_s() < seconds:
            self.deadline(seconds)

    def receive(self) -> Message | None:
        """The child's next message; None once it has none left and ended (`ending`). Raises
        `EnvironmentFault` for an `ENV` message and for a death from outside."""
        while self.ending is None:
            message = self.poll()
            if message is not None or self.ending is not None:
                return message
            left = self._budget - self.clock.elapsed_s()
            wait(self.waitables, timeout=min(left, POLL_S))
        return None

    def poll(self) -> Message | None:
        """The child's next message if one is there, else None, without waiting; past its
        deadline or dead with nothing left to read, the child has ended (`ending`). For a
        supervisor of several children (`wait` on all their `waitables`)."""
        if self.ending is not None:
            return None
        message = self._next()
        if message is not None:
            return message
        if not self.proc.is_alive():
            message = self._next()  # sent just before it died
            if message is None:
                self._end(timed_out=False)
            return message
        if self._budget - self.clock.elapsed_s() <= 0:
            self._end(timed_out=True)
        return None

    @property
    def waitables(self) -> list[Any]:
        """What `multiprocessing.connection.wait` wakes on: a message, or the child's death."""
        return [self._conn, self.proc.sentinel]

    def _next(self) -> Message | None:
        try:
            if not self._conn.poll(0):
                return None
            kind, payload = self._conn.recv()
        except (EOFError, OSError):  # the child closed the pipe: it is ending
            self.proc.join(JOIN_S)
            return None
        if kind == Kind.PEAK:  # kept, not passed on: read by `peak_rss`
            self.peak_rss = payload
            return self._next()
        if kind == Kind.READY:
            self.ready = True
        if kind == Kind.ENV:
            raise EnvironmentFault(
                f"{self.process} could not run {self.doing}: {payload[0]}: {payload[1]}",
                stage=self.stage,
                cause_type=payload[0],
            )
        return Kind(kind), payload

    def _end(self, *, timed_out: bool) -> None:
        own = self.clock.elapsed_s()
        if timed_out and self.proc.is_alive():
            if self.peak_rss is None:  # what the child reached by its deadline
                self.peak_rss = peak_rss_bytes(self.proc.pid)
            self.proc.kill()
        self.proc.join(JOIN_S)
        exitcode = self.proc.exitcode
        death = None
        if not timed_out:
            death = containment.death_of(exitcode, self.doing, self._oom_before)
        self.ending = Ending(
            timed_out=timed_out,
            exitcode=exitcode,
            own_s=own,
            wall_s=time.monotonic() - self.started,
            death=death,
        )
        if death is not None and death.status is None:  # from outside: the environment
            raise EnvironmentFault(death.message, stage=self.stage)
        if death is not None and not self.ready:  # before its body touched a model or a sample
            raise EnvironmentFault(
                f"{self.process} died while it set up its device: {death.message}",
                stage=self.stage,
            )
