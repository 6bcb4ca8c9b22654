"""A driver killed at a point the test controls: one of its tasks waits in a `wait` fault
(`runners/faults.py`) that is never released, and the driver (its whole session) is SIGKILLed
once that task waits and rows reached the store. So the kill lands mid-run on any machine,
never at a moment that races its speed. And whether a process outlived its killed parent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runners import faults
from runners.containment import alive
from tests.conftest import ROOT


def kill_while_waiting(
    cmd: list[str],
    *,
    env: dict[str, str],
    state: Path,
    rule: dict[str, Any],
    stored: Callable[[], Any],
    seconds: float = 600.0,
) -> None:
    """Run `cmd` with `rule` (a `wait` fault) until a task waits in it and `stored()` is
    truthy (rows reached the store), then SIGKILL its session. `seconds` guards against a
    hang; it is not a speed."""
    run_env = {**env, faults.ENV: json.dumps([rule]), faults.STATE_ENV: str(state)}
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=run_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + seconds
        while not (faults.fired(str(state)) and stored()):
            assert proc.poll() is None, f"the driver ended (exit {proc.returncode}) before its kill"
            assert time.monotonic() < deadline, "no task reached its wait"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_dead(pid: int, seconds: float = 120.0) -> bool:
    """Whether `pid` is gone within `seconds` (a guard against a hang, not a speed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False
