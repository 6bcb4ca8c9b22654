"""`hfsweep run`: sweep the catalog's top models on a device and print the summary."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from reports import settings

if TYPE_CHECKING:
    from sweep.driver import RunConfig, RunSummary

PROFILE_HELP = (
    "neuron: a bundled profile (default torchneuron-2026-04-21, TorchNeuron's registrations; "
    "torch-mlir, torch-xla) or a file of ATen op names"
)
COMPILE_MODES = ("raise", "eager", "partition")
COMPILE_MODE_HELP = (
    "neuron: a graph op the compiler cannot lower raises (default, as TorchNeuron), runs the "
    "graph eagerly, or (emulated only) partitions it"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--top", type=int, default=50, help="the N most downloaded models (default 50)")
    p.add_argument("--models", help="comma-separated model ids from the catalog (instead of --top)")
    p.add_argument(
        "--catalog",
        default="bundled",
        help="'bundled' (offline snapshot, default) or a catalog CSV path",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda, mps, neuron (default cpu)")
    p.add_argument("--profile", help=PROFILE_HELP)
    p.add_argument("--strict", action="store_true", help="a CPU fallback is an error")
    p.add_argument("--compile-mode", choices=COMPILE_MODES, help=COMPILE_MODE_HELP)
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument(
        "--compile-backend",
        help="torch.compile backend (default: the device's: inductor on cpu/cuda, neuron on neuron)",
    )
    p.add_argument(
        "--stages",
        help="comma-separated stages (default: all): load,forward,backward,compile,generate",
    )
    p.add_argument(
        "--store",
        default=settings.default_store(),
        help="results folder or URI (default: $HFSWEEP_STORE or ./hfsweep-store)",
    )
    p.add_argument("--run-id", help="name the run; an existing run id resumes it")
    p.add_argument("--address", help="an existing Ray cluster (e.g. 127.0.0.1:6379 or auto)")
    p.add_argument("--num-cpus", type=int, help="size of the embedded local Ray (default: cores)")
    p.add_argument(
        "--local",
        action="store_true",
        help="no Ray: run models one by one in child processes of this one",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per model (default 300)")
    p.add_argument(
        "--retries",
        type=int,
        default=2,
        help="retries of a task the environment stopped (a lost worker or node, a device that "
        "fails to set up); never of a model's own failure (default 2)",
    )
    p.add_argument(
        "--memory-limit",
        type=float,
        default=4.0,
        metavar="GIB",
        help="host memory each model may allocate; past it the stage is oom (default 4, 0: none)",
    )
    p.add_argument(
        "--no-dedup",
        action="store_true",
        help="run every model even when its tiny config equals another's",
    )
    p.add_argument(
        "--reuse",
        metavar="latest|RUN_ID|all",
        help="copy the rows of every task whose content key (its tiny config, the software, "
        "the settings and the code that decide its rows) an earlier run has: the newest other "
        "run (latest), that run, or every run of the store; only the new keys run (a timeout, "
        "crash or oom always runs again); the rows say reused_from",
    )
    p.add_argument("--no-report", action="store_true", help="do not print the summary at the end")


def device_options(args: argparse.Namespace) -> dict:
    options = {}
    if getattr(args, "strict", False):
        options["strict"] = True
    if getattr(args, "profile", None):
        options["profile"] = args.profile
    if getattr(args, "compile_mode", None):
        options["compile_mode"] = args.compile_mode
    return options


def run(args: argparse.Namespace) -> int:
    from sweep.commands._store_arg import store_to_write

    store_to_write(args.store)  # a file: one clear error before any work
    from sweep.driver import abandoned_error, run_sweep

    summary = run_sweep(run_config(args))
    print(run_line(summary, args.store), file=sys.stderr)
    code = 0
    if not args.no_report:
        from sweep.commands import report

        report_args = argparse.Namespace(
            store=args.store, run=summary.run_id, format="text", out=None, top=10
        )
        code = report.run(report_args)
    if summary.abandoned:  # after the report of what did run: one error, exit 3
        raise abandoned_error(summary)
    return code


def run_config(args: argparse.Namespace) -> RunConfig:
    """The run's settings from the arguments `add_arguments` declared (checked here)."""
    from reports.errors import UsageError
    from sweep.driver import RunConfig, command_line, stage_list

    if args.top is not None and args.top < 1:
        raise UsageError("--top must be at least 1")
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if args.retries < 0:
        raise UsageError("--retries must be 0 or more")
    if args.memory_limit < 0:
        raise UsageError("--memory-limit must be 0 (no limit) or a size in GiB")
    return RunConfig(
        store=args.store,
        catalog=args.catalog,
        top=args.top,
        models=[m.strip() for m in args.models.split(",") if m.strip()] if args.models else None,
        device=args.device,
        device_options=device_options(args),
        dtype=args.dtype,
        stages=stage_list(args.stages),
        run_id=args.run_id,
        executor="local" if args.local else "ray",
        address=args.address,
        num_cpus=args.num_cpus,
        timeout_s=args.timeout,
        compile_backend=args.compile_backend,
        retries=args.retries,
        memory_limit=int(args.memory_limit * 2**30) or None,
        dedup=not args.no_dedup,
        command=command_line(),
        reuse=getattr(args, "reuse", None),
    )


def run_line(summary: RunSummary, store: str) -> str:
    """What a run did, in one line (stderr)."""
    return (
        f"run {summary.run_id}: {summary.requested} models asked for, "
        f"{summary.already_done} already done, {summary.skipped} skipped before running, "
        f"{summary.models_run - summary.reused} run as {summary.tasks} unique tiny models, "
        + (
            f"{summary.reused} reused from earlier runs "
            f"({summary.reused_tasks} unique tiny models not run again), "
            if summary.reuse_sources
            else ""
        )
        + (f"{len(summary.abandoned)} without rows (system faults), " if summary.abandoned else "")
        + f"{summary.seconds:.0f} s; store: {store}"
    )
