"""A pytest plugin for `bench/suite_cpu.py`: every process's CPU charged to the test that its
pytest process (an xdist worker, or the one process without xdist) was running.

A thread samples this process and everything below it twice a second (psutil: user + system
time of each process, keyed by pid and start time), and at each test's start and end; a test is
charged what each process gained between its start and its end. A process that ends between two
samples loses at most half a second of its CPU; a process outside this process's tree (a
`ray start` node, which daemonizes) is not counted. Each process is also put in a kind (a Ray
service, a Ray worker, a driver, a fork of one of them, the browser, ...) by its command line
and its parent's, so that the totals say what kind of process the suite pays for. The
controller of an xdist run records nothing (its tree holds every worker). Lines go to
`$SUITE_CPU_OUT/<worker>.jsonl`; `SUITE_CPU_DEBUG=1` also prints each process's share.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import psutil

_lock = threading.Lock()
_seen: dict[tuple[int, float], float] = {}  # (pid, start time) -> CPU seconds at its last sample
_kind: dict[tuple[int, float], str] = {}  # (pid, start time) -> kind, at its first sample
_test: dict[str, Any] = {"base": {}, "start": 0.0}
_active = False


_RAY_SERVICES = {
    "ray::DashboardAgent": "ray: agents",
    "ray::RuntimeEnvAgent": "ray: agents",
    "dashboard/agent.py": "ray: agents",  # the agents before they name themselves
    "runtime_env/agent": "ray: agents",
    "gcs_server": "ray: gcs",
    "raylet/raylet": "ray: raylet",
    "dashboard.py": "ray: dashboard head",
    "log_monitor.py": "ray: log monitor",
    "monitor.py": "ray: autoscaler monitor",
}  # the first mark found in a command line names its kind


def _kind_of(cmd: list[str]) -> str:
    line = " ".join(cmd)
    for mark, kind in _RAY_SERVICES.items():
        if mark in line:
            return kind
    if line.startswith("ray::") or "default_worker.py" in line:
        return "ray: worker"
    if "chrom" in line:
        return "browser"
    if "moto" in line:
        return "s3 server"
    if "multiprocessing.forkserver" in line:
        return "forkserver (@forked tests)"
    if any(arg.endswith("/hfsweep") for arg in cmd[:2]) or "-m sweep" in line:
        return "driver (hfsweep)"
    if "fault_matrix" in line:
        return "bench driver"
    if "pytest" in line or "sys.stdin.readline()" in line:  # xdist's workers: execnet's `-c`
        return "pytest worker (in-process tests)"
    if " -c " in f" {line} ":
        return "python -c"
    return " ".join([os.path.basename(cmd[0]), *cmd[1:3]])[:60] if cmd else "?"


def _classify(proc: psutil.Process, key: tuple[int, float]) -> None:
    try:
        cmd = proc.cmdline()
        parent = proc.parent()
        pcmd = parent.cmdline() if parent is not None else []
    except psutil.Error:
        return
    kind = _kind_of(cmd)
    # a forked child has its parent's command line (unless it names itself, as Ray workers do)
    if parent is not None and cmd == pcmd:
        kind = f"fork of {kind}"
    _kind[key] = kind


def _sample() -> None:
    me = psutil.Process()
    try:
        procs = [me, *me.children(recursive=True)]
    except psutil.Error:
        return
    for proc in procs:
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                key = (proc.pid, proc.create_time())
            _seen[key] = times.user + times.system
            if key not in _kind:
                _classify(proc, key)
        except psutil.Error:
            pass


def _loop() -> None:
    while True:
        with _lock:
            _sample()
        time.sleep(0.5)


def pytest_configure(config: Any) -> None:
    global _active
    controller = "PYTEST_XDIST_WORKER" not in os.environ and bool(
        getattr(config.option, "numprocesses", None)
    )
    _active = bool(os.environ.get("SUITE_CPU_OUT")) and not controller
    if _active:
        os.makedirs(os.environ["SUITE_CPU_OUT"], exist_ok=True)
        threading.Thread(target=_loop, daemon=True).start()


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    if _active:
        with _lock:
            _sample()
            _test.update(base=dict(_seen), start=time.monotonic())


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    if not _active:
        return
    with _lock:
        _sample()
        base = _test["base"]
        cpu = sum(v - base.get(k, 0.0) for k, v in _seen.items())
        kinds: dict[str, float] = {}
        for k, v in _seen.items():
            gained = v - base.get(k, 0.0)
            if gained > 0:
                kind = _kind.get(k, "?")
                if os.environ.get("SUITE_CPU_DEBUG"):
                    print(f"\nDEBUG {k[0]} {kind} {gained:.2f}", flush=True)
                kinds[kind] = round(kinds.get(kind, 0.0) + gained, 2)
        line = {
            "test": nodeid,
            "cpu_s": round(cpu, 2),
            "procs": sum(1 for k in _seen if k not in base),
            "wall_s": round(time.monotonic() - _test["start"], 2),
            "kinds": kinds,
        }
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(os.environ["SUITE_CPU_OUT"], f"{worker}.jsonl"), "a") as fh:
            fh.write(json.dumps(line) + "\n")
        for key in [k for k in _seen if not psutil.pid_exists(k[0])]:
            del _seen[key]
            _kind.pop(key, None)
