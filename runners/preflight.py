"""One check of the device before any model runs: a sweep on a broken device stops with one error.

`check_device` builds the device the run asked for and does what every model will do first:
set it up (what the device's own `setup` checks: its package, its versions), then one tiny op
and its backward on the device. A failure raises one `DeviceCheckError` with a hint: an
environment error (exit code 3, as for any environment that keeps failing), and nothing is
written, so the same command runs every model once the device is fixed.

The caller's process keeps no device state (the emulated backend, once installed, would break
the forked model processes), so the check runs in a child: forked from the caller where the
caller has loaded torch already (the op sweep's driver; a driver whose device's module loads it;
a `--local` driver, warmed first as its first task would warm it),
which takes a fraction of a second, else a fresh interpreter (1-3 s of imports). A device whose
children must be fresh interpreters (`fresh_interpreter`) is checked in one too. The fork
leaves the caller's heap to the caller (`runners.supervisor.frozen_heap`).

It also sets the environment the device needs before torch is imported (its `process_env`) in
this process, so that the Ray workers and model processes started after it inherit it.

    python -m runners.preflight DEVICE '{"strict": true}'   # prints JSON
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ground.errors import DeviceError

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 180.0


class DeviceCheckError(DeviceError):
    """The device the run asked for failed its check before any model ran: the environment,
    never a model's result. Nothing was written; exit code 3."""

    exit_code = 3


@dataclass
class DeviceCheck:
    """What the check found: the device as the run will see it."""

    device: str
    emulated: bool
    profile: str | None = None
    profile_hash: str | None = None
    compile_mode: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def probe(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """Run in the child: set the device up, one op and its backward on it."""
    import time

    start = time.perf_counter()
    import torch

    from runners.devices import get_device

    device = get_device(name, **options)
    device.setup()
    x = device.to_device(torch.arange(4, dtype=torch.float32)).requires_grad_()
    y = (x * 2 + 1).sum()
    y.backward()
    value = float(y.detach().cpu())
    grad = x.grad.detach().cpu().tolist() if x.grad is not None else None
    if value != 16.0 or grad != [2.0, 2.0, 2.0, 2.0]:
        raise DeviceError(
            f"A tiny op on {name} gave a wrong result: sum(2x + 1) over 0..3 = {value} "
            f"(expected 16), gradient {grad} (expected 2s).",
            device=name,
            hint="The device computes wrongly: fix it before sweeping models on it.",
        )
    profile, digest = device.profile_info()
    return {
        "device": device.name,
        "emulated": device.emulated,
        "profile": profile,
        "profile_hash": digest,
        "compile_mode": device.compile_mode,
        "versions": {k: str(v) for k, v in device.versions().items()},
        "seconds": time.perf_counter() - start,
    }


def check_device(
    name: str, options: dict[str, Any] | None = None, *, timeout_s: float = TIMEOUT_S
) -> DeviceCheck:
    """Check device `name` in a child process; raise DeviceCheckError when it cannot run."""
    from runners.supervisor import forks, fresh_interpreter

    options = dict(options or {})
    spawn = fresh_interpreter(name, options)  # sets the device's variables in this process
    if forks() and not spawn and "torch" in sys.modules:
        report = _forked(name, options, timeout_s)
    else:
        report = _fresh(name, options, timeout_s)
    if "error" in report:
        error = report["error"]
        raise DeviceCheckError(
            f"Device {name!r} cannot run models: {error['message']}",
            device=name,
            hint=error.get("hint")
            or "Fix the device (or pick another with --device) and run the same command again.",
        )
    return DeviceCheck(**report)


def _hung(name: str, timeout_s: float) -> DeviceCheckError:
    return DeviceCheckError(
        f"Setting up device {name!r} and running one op on it did not finish in {timeout_s:g} s.",
        device=name,
        hint="The device hangs before any model runs; check its driver and runtime.",
    )


def _died(name: str, exitcode: int | None, tail: str) -> DeviceCheckError:
    return DeviceCheckError(
        f"The check of device {name!r} died before reporting (exit {exitcode}): {tail}",
        device=name,
        hint="Run `python -m runners.preflight " + name + "` to see the whole output.",
    )


def _fresh(name: str, options: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """The check in a fresh interpreter (`python -m runners.preflight`)."""
    from functools import partial

    from runners import containment

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), _pythonpath()]))}
    command = [sys.executable, "-m", "runners.preflight", name, json.dumps(options)]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            cwd=ROOT,
            # dies with its driver, however the driver dies (a SIGKILL leaves no orphan)
            preexec_fn=partial(containment.enter_child, os.getpid()),
        )
    except subprocess.TimeoutExpired:
        raise _hung(name, timeout_s) from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise _died(name, done.returncode, (done.stderr.strip().splitlines() or ["no output"])[-1])
    return dict(json.loads(lines[-1]))


def _forked(name: str, options: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """The check in a child forked from this process (which has set up no device)."""
    import multiprocessing as mp

    from runners import containment
    from runners.supervisor import frozen_heap

    ctx = mp.get_context("fork")
    read, write = ctx.Pipe(duplex=False)
    args = (write, os.getpid(), name, options)
    child = ctx.Process(target=_forked_main, args=args, daemon=True)
    with frozen_heap():
        child.start()
    write.close()
    try:
        if not read.poll(timeout_s):
            raise _hung(name, timeout_s)
        try:
            return dict(read.recv())
        except (EOFError, OSError):  # it died before it said anything
            child.join(5.0)
            raise _died(name, child.exitcode, "no output") from None
    finally:
        if child.is_alive():
            child.kill()
        child.join(5.0)
        if child.pid is not None:  # whatever the device's runtime started goes with it
            containment.kill_group(child.pid)
        read.close()


def _forked_main(conn: Any, parent_pid: int, name: str, options: dict[str, Any]) -> None:
    """The forked check: as every model child, it dies with its parent (a driver killed while
    it checks leaves nothing behind) and leads a process group of its own."""
    from runners import containment

    try:
        containment.enter_child(parent_pid)
        conn.send(report_of(name, options))
        conn.close()
    finally:
        os._exit(0)  # skip interpreter teardown: a device runtime may hang in its atexit


def report_of(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """What the check found (`probe`), or the error it met, as the child reports it."""
    try:
        return probe(name, options)
    except DeviceError as exc:
        return {"error": {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}}
    except Exception as exc:  # any failure of the device is one clear line for the user
        return {"error": {"type": type(exc).__name__, "message": f"{type(exc).__name__}: {exc}"}}


def _pythonpath() -> str:
    return os.environ.get("PYTHONPATH", "")


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m runners.preflight DEVICE [OPTIONS_JSON]", file=sys.stderr)
        return 2
    name = argv[0]
    options = json.loads(argv[1]) if len(argv) > 1 else {}
    print(json.dumps(report_of(name, options)))
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: a device runtime may hang in its atexit


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
