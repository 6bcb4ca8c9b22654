"""Test support: an `hfsweep` command, or a snippet of Python, in a process forked from this one.

A subprocess (`python -m sweep check ...`, `python -c CODE`) starts a fresh interpreter that
imports torch, transformers and the compile stack again: 5 to 10 s of CPU before its first line
of work. Called from a `@forked` test (tests/neuron_support.py: a child of a forkserver that
imported them once, that never set a device up nor ran a backward pass), `run_cli` and
`run_code` fork that warm process instead: the command runs in a process of its own, with its
own exit status, stdout and stderr (its file descriptors 1 and 2, as a subprocess's), its own
`sys.path` additions and environment, and everything it sets up (a device backend, a
PrivateUse1 backend, environment variables) ends with it. What they cannot stand in for: a
process that has not imported torch (a Ray driver), or a test of the interpreter's start.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
import tempfile
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 300


@dataclass
class Finished:
    """What a forked command left: as `subprocess.CompletedProcess` has it."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(
    argv: list[str], *, path: list[Path] | None = None, env: dict[str, str | None] | None = None
) -> Finished:
    """`hfsweep ARGV` (the CLI's `main`, as `python -m sweep ARGV` runs it) in a forked child."""

    def body() -> int:
        from sweep.cli import main

        return main(argv)

    return in_fork(body, path=path, env=env)


def run_code(
    code: str, *, path: list[Path] | None = None, env: dict[str, str | None] | None = None
) -> Finished:
    """`python -c CODE` in a forked child: the code runs as `__main__` would run it."""

    def body() -> int:
        exec(compile(textwrap.dedent(code), "<code>", "exec"), {"__name__": "__main__"})
        return 0

    return in_fork(body, path=path, env=env)


def in_fork(
    body: Callable[[], int | None],
    *,
    path: list[Path] | None = None,
    env: dict[str, str | None] | None = None,
) -> Finished:
    """Run `body` in a child forked from this process, `path` first on its `sys.path` and `env`
    in its environment (a value of None unsets the variable); its return value is the child's
    exit status, an exception's traceback goes to its stderr (exit 1)."""
    with tempfile.TemporaryDirectory(prefix="warm-fork-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        child = mp.get_context("fork").Process(
            target=_child, args=(body, out, err, [str(p) for p in path or ()], env or {})
        )
        child.start()
        child.join(TIMEOUT_S)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise AssertionError(f"the forked command did not end in {TIMEOUT_S} s")
        return Finished(child.exitcode, out.read_text(), err.read_text())


def _child(
    body: Callable[[], int | None],
    out: Path,
    err: Path,
    path: list[str],
    env: dict[str, str | None],
) -> None:
    code = 1
    try:
        for fd, file in ((1, out), (2, err)):
            target = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        sys.path[:0] = path
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        code = body() or 0
    except SystemExit as exc:
        # as the interpreter exits on it: None is 0, a number is the status, anything else is
        # printed and 1
        code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
