"""`hfsweep`: the command-line entry point.

Each sub-command lives in `sweep/commands/<name>.py` with `add_arguments(parser)` and
`run(args) -> int`; they are imported only when chosen, so `hfsweep --help` stays fast and
importing `sweep` never imports torch or Ray. Errors are caught here, once: a one-line message
(and a hint) on stderr, the traceback only with `--debug`. Data goes to stdout.

Exit codes (docs/cli-exit-codes.md): 0 success, 1 a model failed or was skipped / a check
failed, 2 bad usage or input, 3 the environment kept failing, or the device failed its check
before any model ran (the models it hit have no rows; rerun to retry them), 4 (`nightly`) a
model that passed the night before fails tonight, 5 (`lookup`) the store has no results for the
model (the answer says how to get them), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM:
stopped as Ctrl-C stops it, `sweep.stop_signals`).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import os
import sys
import threading
import traceback
from typing import NoReturn

from ground.errors import SweepError, UsageError, format_error
from sweep import stop_signals

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("sweep.commands.run", "sweep the catalog's top models on a device (Ray job)"),
    "ops": ("sweep.commands.ops", "run PyTorch's OpInfo samples on a device against the CPU"),
    "nightly": (
        "sweep.commands.nightly",
        "the nightly job: refresh the catalog, run, diff against last night, site, alert",
    ),
    "check": ("sweep.commands.check", "run one model (Hub id or local config) and print results"),
    "catalog": ("sweep.commands.catalog", "show or refresh the model catalog"),
    "report": ("sweep.commands.report", "summarise a run from the store"),
    "diff": ("sweep.commands.diff", "compare two runs"),
    "lookup": ("sweep.commands.lookup", "latest results for one model from the store"),
    "dashboard": ("sweep.commands.dashboard", "serve the web dashboard over a store"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own errors: exit 2 with a one-line message
        self.print_usage(sys.stderr)
        raise UsageError(message)


class _Version(argparse.Action):
    """`--version`: the package's version and the checkout's commit, found only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kw: object) -> None:
        print(version_line())
        parser.exit(0)


def version_line() -> str:
    """`hfsweep 0.1.0 (git 1a2b3c4d5e6f)`; the commit of this code's checkout, if it is one."""
    from importlib import metadata

    from sweep.settings import _git_sha

    try:
        number = metadata.version("hfsweep")
    except metadata.PackageNotFoundError:
        number = "(not installed)"
    sha = _git_sha()
    return f"hfsweep {number}" + (f" (git {sha[:12]})" if sha else "")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hfsweep",
        description="Which Hugging Face models run on your PyTorch device, how far, "
        "and what stops the rest.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print hfsweep's version and git commit"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    chosen = _chosen_command(sys.argv[1:])
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:  # import only the command that runs
            importlib.import_module(module).add_arguments(p)
    return parser


def _chosen_command(argv: list[str]) -> str | None:
    for arg in argv:
        if arg in COMMANDS:
            return arg
    return None


def main(argv: list[str] | None = None) -> int:
    """The CLI. Called without `argv` (the `hfsweep` script, `python -m sweep`), the process is
    the command's own and ends here (`end_process`)."""
    code = _run(argv)
    if argv is None:
        end_process(code)
    return code


def _run(argv: list[str] | None) -> int:
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    debug = "--debug" in sys.argv[1:]
    try:
        parser = build_parser()
        args = parser.parse_args(sys.argv[1:])
        if not args.command:
            parser.print_help(sys.stderr)
            return 2
        module = importlib.import_module(COMMANDS[args.command][0])
        with stop_signals.stop_on_sigterm():  # SIGTERM stops it as Ctrl-C does
            return int(module.run(args) or 0)
    except KeyboardInterrupt as exc:
        print(stop_signals.interrupted_line(exc), file=sys.stderr)
        return stop_signals.exit_code(exc)
    except SweepError as exc:
        if debug:
            traceback.print_exc()
        print(format_error(exc), file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else exc.exit_code
    except Exception as exc:  # the boundary: never a bare traceback for users
        if debug:
            traceback.print_exc()
        print(format_error(exc), file=sys.stderr)
        print("hint: rerun with --debug for the traceback", file=sys.stderr)
        return 1


def end_process(code: int) -> NoReturn:
    """End this process as the interpreter's exit would, less its teardown: wait for the threads
    that are not daemons, run what `atexit` holds (Ray's shutdown of an embedded Ray,
    multiprocessing's and tempfile's finalizers, logging's flush), flush the output, exit.
    Tearing down an interpreter that holds torch and the model libraries (every module's
    objects, one by one) took 1-3 s of CPU per command and grew its memory after the work."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
