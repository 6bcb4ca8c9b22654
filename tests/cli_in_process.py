"""`hfsweep` called in the test's own process (`sweep.cli.main(argv)`, the function the script
runs) where what is under test is the answer and its exit code, not the process: the same
parser, command and error boundary, without what every process pays before its first line (an
interpreter, `import torch`, for `hfsweep ops` PyTorch's OpInfo database: seconds of CPU each).
What only a real process shows (its exit status, its environment, a signal, a server) stays a
subprocess.

A sweep run this way forks its children from the test's process: the CPU only. No fork of a
process that ran a backward can set up the emulated neuron device (`runners.preflight`), so a
neuron sweep runs in a process of its own."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator

from sweep import cli


@contextlib.contextmanager
def _environment(env: dict[str, str] | None) -> Iterator[None]:
    if env is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def hfsweep_in_process(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`hfsweep ARGS` as `main(ARGS)`: its exit code, stdout and stderr, as
    `subprocess.run(..., capture_output=True, text=True)` gives them; `env`, if given, is the
    whole environment while it runs (as a subprocess's would be)."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    try:
        with _environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(args))
            except SystemExit as exc:  # argparse's --help / --version
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    finally:
        sys.argv = argv
    return subprocess.CompletedProcess(["hfsweep", *args], code, out.getvalue(), err.getvalue())
