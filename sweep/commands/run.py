"""`hfsweep run`: sweep the catalog's top models on a device and print the summary."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from sweep.commands import options
from sweep.settings import ModelRun

if TYPE_CHECKING:
    from sweep.driver import RunSummary


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--top", type=int, default=50, help="the N most downloaded models (default 50)")
    p.add_argument("--models", help="comma-separated model ids from the catalog (instead of --top)")
    p.add_argument(
        "--catalog",
        default="bundled",
        help="'bundled' (offline snapshot, default) or a catalog CSV path",
    )
    p.add_argument(
        "--no-dedup",
        action="store_true",
        help="run every model even when its tiny config equals another's",
    )
    p.add_argument(
        "--reuse",
        metavar="latest|RUN_ID|all|none",
        help="copy the rows of every task whose content key (its tiny config, the software, "
        "the settings and the code that decide its rows) an earlier run has: the newest other "
        "run (latest), that run, every run of the store, or none (the default); only the new "
        "keys run (a timeout, crash or oom always runs again); the rows say reused_from. An "
        "entry whose inputs (catalog fields, cached config files, software, stages) have not "
        "changed is not planned again either",
    )
    options.add_device_arguments(p)
    options.add_model_arguments(p)
    options.add_limit_arguments(p, timeout=300.0, per="model")
    options.add_job_arguments(p)


def settings_from(args: argparse.Namespace) -> ModelRun:
    """The run's settings from the arguments `add_arguments` declared (checked as built)."""
    return ModelRun(
        job=options.job_settings(args),
        task=options.model_settings(args),
        dtypes=options.dtypes(args),
        catalog=args.catalog,
        top=args.top,
        models=options.names(args.models),
        dedup=not args.no_dedup,
        reuse=getattr(args, "reuse", None),
    )


def run(args: argparse.Namespace) -> int:
    options.store_to_write(args.store)  # a file: one clear error before any work
    from sweep.driver import abandoned_error, run_sweep

    run = settings_from(args)
    summary = run_sweep(run)
    print(run_line(summary, run.job.store), file=sys.stderr)
    code = 0
    if run.job.report:
        from sweep.commands import report

        report_args = argparse.Namespace(
            store=run.job.store, run=summary.run_id, format="text", out=None, top=10
        )
        code = report.run(report_args)
    if summary.abandoned:  # after the report of what did run: one error, exit 3
        raise abandoned_error(summary)
    return code


def run_line(summary: RunSummary, store: str) -> str:
    """What a run did, in one line (stderr)."""
    from ground.fmt import duration

    several = len(summary.dtypes) > 1  # then every count is of (model, dtype) pairs
    asked = (
        f"{summary.requested} models x dtypes ({summary.requested // len(summary.dtypes)} "
        f"models at {', '.join(summary.dtypes)}) asked for"
        if several
        else f"{summary.requested} models asked for"
    )
    return (
        f"run {summary.run_id}: {asked}, "
        f"{summary.already_done} already done, {summary.skipped} skipped before running, "
        f"{summary.models_run - summary.reused} run as {summary.tasks} unique tiny models, "
        + (
            f"{summary.reused} reused from earlier runs "
            f"({summary.reused_tasks} unique tiny models not run again), "
            f"{summary.plans_reused} plans reused"
            + ("" if summary.started_executor else " (nothing to run: no Ray started)")
            + ", "
            if summary.reuse_sources
            else ""
        )
        + (f"{len(summary.abandoned)} without rows (system faults), " if summary.abandoned else "")
        # a span of wall time as /runs and the report write one (`fmt.duration`: 1 min 54 s)
        + f"ran {duration(summary.seconds)}; store: {store}"
    )
