"""SIGTERM stops a command as Ctrl-C does.

A scheduler (cron's `kill`, a job scheduler, Kubernetes ending a pod) stops a process with
SIGTERM. The CLI turns it into `Terminated`, a `KeyboardInterrupt`, so every path that Ctrl-C
takes runs for it too: the run's rows flushed, its run row `interrupted`, Ray shut down, one
line saying how to resume (`RunSession` adds it), and exit 143 (Ctrl-C: 130).

`ray.init` installs handlers of its own for SIGTERM: a Python one that exits at once, and in
its core worker the C++ failure signal handler that prints a stack ("SIGTERM received ...
PC: @ ...") and aborts the process. `kept_across` puts ours back after it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

EXIT_SIGTERM = 143  # 128 + SIGTERM, what a shell reports for a process SIGTERM ended
EXIT_SIGINT = 130  # 128 + SIGINT (Ctrl-C)


class Terminated(KeyboardInterrupt):
    """The process got SIGTERM."""


_GOT_SIGTERM: list[bool] = []  # set when SIGTERM arrived (Ray may re-raise it as Ctrl-C's)


def _raise_terminated(signum: int, frame: Any) -> None:
    _GOT_SIGTERM.append(True)
    raise Terminated("SIGTERM")


def terminated(exc: KeyboardInterrupt) -> bool:
    """Whether SIGTERM, not Ctrl-C, stopped the command: Ray's blocking calls catch any
    KeyboardInterrupt a signal handler raises and raise a plain one of their own."""
    return isinstance(exc, Terminated) or bool(_GOT_SIGTERM)


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """While the block runs (in the main thread), SIGTERM raises `Terminated`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    _GOT_SIGTERM.clear()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def kept_across() -> Iterator[None]:
    """Put this process's SIGTERM handler back after the block (a `ray.init`), when it is ours."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ours = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if ours is _raise_terminated:
            signal.signal(signal.SIGTERM, ours)


def exit_code(exc: KeyboardInterrupt) -> int:
    return EXIT_SIGTERM if terminated(exc) else EXIT_SIGINT


def interrupted_line(exc: KeyboardInterrupt) -> str:
    """The one line a stopped command prints: what stopped it and, for a run, how to resume."""
    what = "terminated (SIGTERM)" if terminated(exc) else "interrupted"
    resume = getattr(exc, "resume", None)
    return f"{what}; {resume}" if resume else what


def resume_hint(command: str, run_id: str, store: str) -> str:
    """How to go on with a stopped run: its command with `--run-id`."""
    import shlex

    words = shlex.split(command) if command else ["hfsweep", "run"]
    if "--run-id" not in words and not any(w.startswith("--run-id=") for w in words):
        words += ["--run-id", run_id]
    return (
        f"run {run_id}: the finished models' rows are in {store}; resume with: {shlex.join(words)}"
    )
