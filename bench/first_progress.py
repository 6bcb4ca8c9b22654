"""Seconds from `hfsweep run` to each of its first lines on stderr, on a machine that cannot reach
the Hub, without `HF_HUB_OFFLINE`: the Hub probe's line, the first progress line, Ray's start and
the first finished model (then SIGTERM, as cron would send, and the exit status).

    python bench/first_progress.py --top 1000 --device neuron

Prints one row per line, with the machine's load average at the start (the figures are this
machine's under that load: compare runs made side by side). Uses a fresh store in a temporary
folder; the driver and everything it started end with its SIGTERM."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HFSWEEP = [sys.executable, "-m", "sweep"]


def first_lines(argv: list[str], env: dict[str, str], until_s: float) -> tuple[list, int | None]:
    """(seconds, line) for each stderr line of `argv` until its first finished model (a progress
    line whose count is past 0) or `until_s`; then SIGTERM and its exit status."""
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    seen: list[tuple[float, str]] = []
    first_model = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append((time.monotonic() - start, line.rstrip()))
            head = line.split("]", 1)[-1].strip()
            if line.startswith("[run ") and head[:1].isdigit() and not head.startswith("0/"):
                first_model.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    first_model.wait(until_s)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    reader.join(10)
    return seen, code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=1000)
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--until", type=float, default=900.0, help="give up after (seconds)")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        argv = [*HFSWEEP, "run", "--top", str(args.top), "--device", args.device]
        argv += ["--store", str(Path(tmp) / "store"), "--run-id", "first", "--no-report"]
        seen, code = first_lines(argv, env, args.until)
    print(f"load average at the start: {load:.1f} ({os.cpu_count()} cores)")
    print(f"{'seconds':>8}  line")
    for seconds, line in seen:
        print(f"{seconds:8.1f}  {line[:150]}")
    print(f"exit status after SIGTERM: {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
