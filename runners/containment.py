"""What keeps one model's child process contained, and how to tell how it died.

- **A memory budget it cannot exceed.** The child caps its private writable memory
  (`RLIMIT_DATA`: heap and anonymous mappings, which is where tensors live) at what it holds
  once its device is set up plus the budget. An allocation past it fails inside the model
  (torch's allocator raises, Python raises `MemoryError`), so the stage is `oom` with the
  budget named: memory really ran out, for that model, and nothing else on the machine was
  pushed out.
  `RLIMIT_AS` would count the libraries' address-space reservations too (a CUDA context
  reserves tens of GiB it never touches); `RLIMIT_DATA` does not.
- **No child outlives its parent.** The child asks the kernel for SIGKILL when its parent dies
  (`PR_SET_PDEATHSIG`), so a worker that is force-cancelled, killed by Ray's memory monitor or
  by an operator takes its model with it. The child leads its own process group, which the
  parent kills when the child is done (whatever the model started goes too), and a registry
  of live children lets the next model task on the node sweep the groups of a dead worker.
- **An honest death certificate.** SIGKILL is `oom` only when the kernel's OOM killer fired
  while the child lived (`oom_kill` in /proc/vmstat went up); any other SIGKILL (an operator's
  `kill -9`, a supervisor) or a terminating signal is the environment, not the model: the
  task is retried and nothing is recorded. A segfault or an abort is the model's `crash`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from ground.schema import Status

_PR_SET_PDEATHSIG = 1
GIB = 1 << 30
DEFAULT_MEMORY_LIMIT = 4 * GIB  # per model, beyond what its child holds once set up
# Signals that something outside the model sent: the environment, never the model's result.
EXTERNAL_SIGNALS = frozenset(
    {signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
)
SIGNAL_NAMES = {getattr(signal, n): n for n in dir(signal) if n.startswith("SIG") and "_" not in n}


# ---- in the child ------------------------------------------------------------------------------


def enter_child(parent_pid: int) -> None:
    """First thing in a child: die with the parent, lead a process group (its memory is capped
    once its device is set up: `limit_memory`)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)


def data_bytes() -> int | None:
    """This process's private writable memory now (VmData), or None where unknown."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def limit_memory(budget: int) -> None:
    """Cap this process's data segment at its current size plus `budget` bytes."""
    import resource

    used = data_bytes() or 0
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    want = used + budget
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (want, hard))


_OOM_PHRASES = ("can't allocate memory", "cannot allocate memory", "out of memory")


def out_of_memory(exc: BaseException) -> bool:
    """An exception that says an allocation failed (the budget, or the device's memory)."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    if isinstance(exc, RuntimeError):
        try:
            text = str(exc).lower()
        except Exception:
            return False
        return any(p in text for p in _OOM_PHRASES)
    return False


# ---- in the parent ------------------------------------------------------------------------------


def oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has killed since boot (None: unknown)."""
    try:
        with open("/proc/vmstat") as fh:
            for line in fh:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class Death:
    """How a child that never reported its end died: a model status, or the environment."""

    status: Status | None  # None: the environment killed it (retry, no row)
    message: str


def death_of(exitcode: int | None, stage: str, oom_before: int | None) -> Death:
    """Read a dead child's exit code (negative: the signal that killed it)."""
    if exitcode is None or exitcode >= 0:
        return Death(Status.CRASH, f"the process running {stage} exited ({exitcode})")
    sig = -exitcode
    name = SIGNAL_NAMES.get(sig, f"signal {sig}")
    if sig == signal.SIGKILL:
        after = oom_kills()
        if oom_before is not None and after is not None and after > oom_before:
            return Death(
                Status.OOM,
                f"the process running {stage} was killed by the kernel's out-of-memory killer",
            )
        return Death(
            None,
            f"the process running {stage} was killed with SIGKILL from outside the sweep "
            "(not for memory: the kernel's OOM-kill count did not change)",
        )
    if sig in EXTERNAL_SIGNALS:
        return Death(None, f"the process running {stage} was stopped with {name} from outside")
    return Death(Status.CRASH, f"the process running {stage} died with {name}")


def kill_group(pid: int) -> None:
    """Kill the child's process group (the child and whatever it started), if any is left."""
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


# ---- the registry of live children (for sweeps after a worker died) ----------------------------


def _registry() -> Path:
    return Path(tempfile.gettempdir()) / f"hfsweep-children-{os.getuid()}"


def _start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (clock ticks since boot): tells a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def register(child_pid: int) -> None:
    folder = _registry()
    with contextlib.suppress(OSError):
        folder.mkdir(mode=0o700, exist_ok=True)
        parent = os.getpid()
        (folder / str(child_pid)).write_text(
            f"{parent} {_start_time(parent)} {_start_time(child_pid)}"
        )


def unregister(child_pid: int) -> None:
    with contextlib.suppress(OSError):
        (_registry() / str(child_pid)).unlink()


def sweep_orphans() -> int:
    """Kill the process groups of children whose parent is gone; returns how many groups.
    The kernel never reuses a number while a group of that id exists, so a group whose leader
    is dead is ours; a live leader with another start time is someone else (skipped)."""
    folder = _registry()
    try:
        entries = list(folder.iterdir())
    except OSError:
        return 0
    swept = 0
    for path in entries:
        try:
            parent, parent_start, child_start = path.read_text().split()
            child = int(path.name)
        except (OSError, ValueError):
            continue
        if _start_time(int(parent)) == parent_start:
            continue  # its parent is alive: it is that parent's business
        if _start_time(child) not in (None, child_start):
            unregister(child)  # the number now belongs to another process
            continue
        try:
            os.killpg(child, signal.SIGKILL)
            swept += 1
        except OSError:
            pass
        unregister(child)
    return swept


def processes_with_env(name: str, value: str) -> list[int]:
    """Live processes (not zombies) whose environment has `name=value`: what a bench or a test
    marks its drivers with, to count what outlives them (a forked child shows its parent's)."""
    needle = f"{name}={value}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
        except OSError:
            continue
        if alive(int(entry.name)):
            out.append(int(entry.name))
    return out


def processes_in_ray_session(creator_pid: int, ended: float) -> list[int]:
    """Live processes holding a file or socket open in a Ray session that process `creator_pid`
    created before it ended (at `ended`, a `time.time()`; Ray ends the session folder's name with
    its creator's pid and begins it with its local time, and a session named after is a new
    process's that was given that pid again): the raylet's agents, whose process titles
    overwrite the environment a marker would be read from."""
    import datetime

    tail = f"_{creator_pid}"
    until = datetime.datetime.fromtimestamp(ended).strftime("%Y-%m-%d_%H-%M-%S_%f")
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            links = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:
            continue
        if any(
            part.startswith("session_")
            and part.endswith(tail)
            and part[len("session_") :].rsplit("_", 1)[0] <= until
            for link in links
            for part in link.split("/")
        ) and alive(int(entry.name)):
            out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    """Whether `pid` is a live process: it exists and is not a zombie (dead, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kill_marked(name: str, value: str, *, spare: Collection[int] = ()) -> list[int]:
    """SIGKILL every live process whose environment has `name=value` and every process below
    them (what a test or a bench started, found by the marker it set and by descent: Ray's
    agents carry no marker), but not `spare`; returns the pids killed. Never a process by name."""
    roots = [pid for pid in processes_with_env(name, value) if pid not in spare]
    killed = []
    for pid, start in _processes_under(roots):
        if pid in spare or _start_time(pid) != start:
            continue
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


# ---- an embedded Ray dies with its driver ------------------------------------------------------

# Every process an embedded Ray starts through the driver's environment (GCS, raylet, workers,
# the models' children) inherits this variable. The raylet starts its dashboard and runtime-env
# agents with an environment of its own, and their process titles overwrite what /proc shows of
# it, so they cannot be told by the marker. Ray kills its GCS and raylet when the driver dies,
# but the agents, reparented to init, may linger trying to report the raylet's death to the GCS
# that is gone (found by the fault matrix's kill trials). So after `ray.init` the driver sends
# the watchdog every process under a marked one (pid and start time); once the driver is gone
# the watchdog kills those and every marked process. A driver killed inside `ray.init` sends
# nothing, and its raylet may be gone before the watchdog looks: the agents are then found by
# what they hold open, a file or socket in the Ray session this driver created (Ray names the
# session folder `session_<date>_<time>_<microseconds>_<pid of its creator>`).
EMBEDDED_RAY_ENV = "HFSWEEP_EMBEDDED_RAY"
_watchdogs: list[object] = []  # each keeps its pipe open for as long as this process lives

_WATCHDOG = """
import datetime, os, signal, sys, time


def started(pid):  # the kernel's start time of a live pid, else None (gone, or a zombie)
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b") ", 1)[-1].split()
    except OSError:
        return None
    return None if fields[0] == b"Z" else fields[19]


driver = int(sys.argv[2])
driver_start = started(driver)
sent = sys.stdin.buffer.read()  # 'pid:start' of what ray.init started, then EOF
# EOF comes when the driver dies, or while it exits (its interpreter closing the pipe): its own
# shutdown goes first, and what it leaves is killed once it is gone (or 30 s on, sparing it)
wait_until = time.monotonic() + 30.0
while driver_start is not None and started(driver) == driver_start and time.monotonic() < wait_until:
    time.sleep(0.1)
needle = sys.argv[1].encode()
session_tail = ("_" + sys.argv[2]).encode()  # the driver's pid ends its Ray session's name
# the driver's sessions were named between the watchdog's start and the driver's end: one named
# before is another's, one named after is a new process's that was given the driver's pid again
since = sys.argv[3].encode()
until = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S_%f").encode()


def in_our_session(pid):
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}").encode() for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    for link in links:
        for part in link.split(b"/"):
            if part.startswith(b"session_") and part.endswith(session_tail):
                stamp = part[len(b"session_"):].rsplit(b"_", 1)[0]  # date_time_microseconds
                if since <= stamp <= until:
                    return True
    return False


known = dict(item.split(b":", 1) for item in sent.split() if item.count(b":") == 1)
quiet_since = time.monotonic()
deadline = time.monotonic() + 30.0
while time.monotonic() < deadline and time.monotonic() - quiet_since < 2.0:
    procs = {}  # pid: (parent pid, start time), from one look at /proc
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (os.getpid(), driver):
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b") ", 1)[-1].split()
            if fields[0] != b"Z":  # a zombie is dead already; its parent reaps it
                procs[int(entry)] = (int(fields[1]), fields[19])
        except (OSError, IndexError):
            pass
    targets = set()
    for pid, (_, start) in procs.items():
        if known.get(str(pid).encode()) == start:  # one the driver sent (not a reused pid)
            targets.add(pid)
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if needle in fh.read().split(b"\\0"):
                    targets.add(pid)
                    continue
        except OSError:
            pass
        if in_our_session(pid):
            targets.add(pid)
    # and everything below them, found before any is killed: what Ray started later without
    # the mark (its agents) is orphaned, not ended, when its parent dies
    grew = True
    while grew:
        below = {pid for pid, (ppid, _) in procs.items() if ppid in targets} - targets
        targets |= below
        grew = bool(below)
    for pid in targets:
        known[str(pid).encode()] = procs[pid][1]
        try:
            os.kill(pid, signal.SIGKILL)
            quiet_since = time.monotonic()
        except OSError:
            pass
    time.sleep(0.2)
"""


def _processes_under(roots: list[int]) -> list[tuple[int, str]]:
    """`roots` and every live process below them, each with its start time (from /proc)."""
    parent: dict[int, int] = {}
    start: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_bytes().rsplit(b") ", 1)[-1].split()
        except OSError:
            continue
        if fields[0] != b"Z":
            parent[int(entry.name)] = int(fields[1])
            start[int(entry.name)] = fields[19].decode()
    found = {pid for pid in roots if pid in start}
    grew = True
    while grew:
        below = {pid for pid, ppid in parent.items() if ppid in found} - found
        found |= below
        grew = bool(below)
    return [(pid, start[pid]) for pid in sorted(found)]


@contextlib.contextmanager
def embedded_ray_dies_with_this_process():
    """Around `ray.init()` of an embedded Ray: mark what it starts, and start a watchdog (its
    own session, fed by a pipe only this process writes) that kills every marked process once
    this process is gone, however it died. Linux only; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        yield
        return
    import secrets
    import subprocess

    token = f"{os.getpid()}-{secrets.token_hex(8)}"
    env = {k: v for k, v in os.environ.items() if k != EMBEDDED_RAY_ENV}
    import time

    # Ray's session folder stamp (`%Y-%m-%d_%H-%M-%S_%f`, local time), a second early: strings
    # of this form compare as the times they name
    since = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(time.time() - 1))
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, f"{EMBEDDED_RAY_ENV}={token}", str(os.getpid()), since],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    _watchdogs.append(watchdog)
    previous = os.environ.get(EMBEDDED_RAY_ENV)
    os.environ[EMBEDDED_RAY_ENV] = token
    try:
        yield
        # What ray.init started: the marked processes and everything under them (the raylet's
        # agents carry no marker).
        started = _processes_under(processes_with_env(EMBEDDED_RAY_ENV, token))
        with contextlib.suppress(OSError):
            watchdog.stdin.write(" ".join(f"{pid}:{t}" for pid, t in started).encode() + b"\n")
            watchdog.stdin.flush()
    finally:
        if previous is None:
            os.environ.pop(EMBEDDED_RAY_ENV, None)
        else:
            os.environ[EMBEDDED_RAY_ENV] = previous
