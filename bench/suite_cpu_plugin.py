"""A pytest plugin for `bench/suite_cpu.py`: every process's CPU charged to the test that its
pytest process (an xdist worker, or the one process without xdist) was running.

A thread samples this process and everything below it twice a second (psutil: user + system
time of each process, keyed by pid and start time), and at each test's start and end; a test is
charged what each process gained between its start and its end. A process that ends between two
samples loses at most half a second of its CPU; a process outside this process's tree (a
`ray start` node, which daemonizes) is not counted. The controller of an xdist run records
nothing (its tree holds every worker). Lines go to `$SUITE_CPU_OUT/<worker>.jsonl`.
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
_test: dict[str, Any] = {"base": {}, "start": 0.0}
_active = False


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
        line = {
            "test": nodeid,
            "cpu_s": round(cpu, 2),
            "procs": sum(1 for k in _seen if k not in base),
            "wall_s": round(time.monotonic() - _test["start"], 2),
        }
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(os.environ["SUITE_CPU_OUT"], f"{worker}.jsonl"), "a") as fh:
            fh.write(json.dumps(line) + "\n")
        for key in [k for k in _seen if not psutil.pid_exists(k[0])]:
            del _seen[key]
