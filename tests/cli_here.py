"""An `hfsweep` command run in the test's own process: the CLI's own function (`sweep.cli.main`
with the command's arguments), which parses, runs, prints and turns an error into the exit code
as the `hfsweep` process does (the process exits with what `main` returns), less what every
`hfsweep ops` process pays before its first sample: an interpreter, `import torch` and PyTorch's
OpInfo database (about 10 CPU s on CI's machine). Use it where the process boundary is not the
point of the test; the exit codes of real `hfsweep ops` processes are held by the tests that
start one (tests/test_op_sweep_run.py: 0 and 2, tests/test_op_sweep_faults.py: 3 and a kill).

Runs on the CPU only: the op children it starts are forked from the test's process, and no
fork of a process that ran a backward can set up the emulated neuron device
(`runners.preflight`), so a neuron sweep runs in a process of its own."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Ran:
    """What `subprocess.run(..., capture_output=True, text=True)` would say of the command."""

    returncode: int
    stdout: str
    stderr: str


def hfsweep_here(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str
) -> Ran:
    """`hfsweep ARGS` in this process: its exit code and what it printed."""
    from sweep.cli import main

    monkeypatch.setattr(sys, "argv", list(sys.argv))  # `main` sets it; given back after the test
    capsys.readouterr()  # what the test printed before is not the command's
    code = main(list(args))
    out = capsys.readouterr()
    return Ran(code, out.out, out.err)
