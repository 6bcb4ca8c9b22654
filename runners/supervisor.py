"""One child process under supervision: what a model (`runners.isolation`) and a group of op
samples (`runners.op_sweep.isolation`) run in, so that a hang or a crash becomes a row.

- **Start.** Forked from a parent that imported torch and the libraries but ran no op (a child
  starts in milliseconds), or spawned where the device needs an environment variable that the
  parent's torch never read (`fresh_interpreter`), and always off Linux.
- **Contain.** The child dies with its parent, leads its own process group (killed when the child
  is done), and cannot allocate past its memory budget (`runners.containment`).
- **Talk.** The child sends messages through a pipe as it goes; the parent reads them as they
  come. An exception that escapes the child's body is sent as `("error", (type, text))`, or as
  `("env", ...)` when it is the environment's: anything before the body says `("ready", ...)`
  (the device set up), and afterwards what `is_environment_error` says is.
- **A deadline on the child's own time.** The clock counts the child's wall time less the time
  it waited for a CPU (the kernel's run-queue delay, `/proc/PID/schedstat`): a child that a
  loaded machine starves is slow, not hung, and never runs out of its deadline for that. A
  child that hangs (sleeps, spins, blocks) uses up its deadline as before.
- **Its end, by cause, never by which event came first.** A message the child sent is always
  read before anything else is decided; only when none is left does the child's death or the
  deadline count. A death is read from the exit status (`runners.containment.death_of`).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from reports.errors import is_environment_error, safe_text
from runners import containment
from runners.containment import Death

POLL_S = 1.0  # the longest the parent waits before it looks at the clock again
JOIN_S = 5.0

Send = Callable[[tuple[str, Any]], None]


def fresh_interpreter(device_name: str, options: dict[str, Any] | None) -> bool:
    """Whether the device's children must be fresh interpreters: it needs an environment
    variable this process's torch never read (set here now, so they inherit it)."""
    from runners.devices import prepare_process_env

    return prepare_process_env(device_name, options)


def _context(spawn: bool) -> Any:
    if spawn or not sys.platform.startswith("linux"):
        return mp.get_context("spawn")
    return mp.get_context("fork")


def forks() -> bool:
    """Whether children of this process are forked (what the parent warms itself for)."""
    return sys.platform.startswith("linux")


# ---- in the child --------------------------------------------------------------------------


def _child_main(
    conn: Any, parent_pid: int, memory_limit: int | None, body: Callable[..., None], args: tuple
) -> None:
    containment.enter_child(parent_pid, memory_limit)
    ready = False

    def send(message: tuple[str, Any]) -> None:
        nonlocal ready
        ready = ready or message[0] == "ready"
        conn.send(message)

    try:
        import faulthandler

        faulthandler.disable()  # a crash is reported as a row, not as a dump on stderr
        body(send, *args)
    except BaseException as exc:  # report, then exit: the parent decides what it means
        kind = "env" if not ready or is_environment_error(exc) else "error"
        with contextlib.suppress(Exception):
            conn.send(("peak", peak_rss_bytes()))
            conn.send((kind, (type(exc).__name__, safe_text(exc))))
    finally:
        conn.close()
        os._exit(0)


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
    """How a child ended without a last word: past its deadline, or dead."""

    timed_out: bool
    exitcode: int | None
    oom_before: int | None  # the kernel's OOM-kill count when the child started
    own_s: float  # the child's own time on the clock when it ended
    wall_s: float

    def death(self, doing: str) -> Death:
        """What the death says (`doing`: what the child was doing, for the message)."""
        return containment.death_of(self.exitcode, doing, self.oom_before)


class Child:
    """`with Child(body, args) as child:` runs `body(send, *args)` in a supervised child;
    `child.receive()` returns its messages one by one, then None once it ended (its `ending`
    says how). Leaving the block kills what is left of the child and its process group."""

    def __init__(
        self,
        body: Callable[..., None],
        args: tuple,
        *,
        spawn: bool = False,
        memory_limit: int | None = None,
    ):
        self.body, self.args = body, args
        self.spawn, self.memory_limit = spawn, memory_limit
        self.ending: Ending | None = None
        self.peak_rss: int | None = None  # the child's peak resident memory, where it said
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

    def extend(self, seconds: float) -> None:
        """At least `seconds` of its own time from now (never less than it has left)."""
        if self._budget - self.clock.elapsed_s() < seconds:
            self.deadline(seconds)

    def receive(self) -> tuple[str, Any] | None:
        """The child's next message; None once it has none left and ended (`ending`)."""
        while self.ending is None:
            message = self.poll()
            if message is not None or self.ending is not None:
                return message
            left = self._budget - self.clock.elapsed_s()
            wait(self.waitables, timeout=min(left, POLL_S))
        return None

    def poll(self) -> tuple[str, Any] | None:
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

    def _next(self) -> tuple[str, Any] | None:
        try:
            if not self._conn.poll(0):
                return None
            message = self._conn.recv()
        except (EOFError, OSError):  # the child closed the pipe: it is ending
            self.proc.join(JOIN_S)
            return None
        if message[0] == "peak":  # kept, not passed on: read by `peak_rss`
            self.peak_rss = message[1]
            return self._next()
        return tuple(message)  # type: ignore[return-value]

    def _end(self, *, timed_out: bool) -> None:
        own = self.clock.elapsed_s()
        if timed_out and self.proc.is_alive():
            if self.peak_rss is None:  # what the child reached by its deadline
                self.peak_rss = peak_rss_bytes(self.proc.pid)
            self.proc.kill()
        self.proc.join(JOIN_S)
        self.ending = Ending(
            timed_out=timed_out,
            exitcode=self.proc.exitcode,
            oom_before=self._oom_before,
            own_s=own,
            wall_s=time.monotonic() - self.started,
        )
