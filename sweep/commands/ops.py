"""`hfsweep ops`: PyTorch's own OpInfo samples on a device against the CPU (the op-level sweep)."""

from __future__ import annotations

import argparse
import sys

from sweep.commands import options
from sweep.settings import OpRun


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ops",
        help="comma-separated OpInfo names (e.g. add,nn.functional.layer_norm; default: all)",
    )
    p.add_argument("--dtypes", help="comma-separated: fp32,bf16,fp16 (default: all three)")
    p.add_argument(
        "--inputs",
        default="sample",
        choices=["sample", "reference"],
        help="OpInfo.sample_inputs (default) or reference_inputs (more and larger samples)",
    )
    p.add_argument(
        "--skips", help="a JSON file of the device's own declared skips (see docs/ops.md)"
    )
    p.add_argument("--group-size", type=int, default=4, help="OpInfos per task (default 4)")
    p.add_argument("--list", action="store_true", help="print the OpInfo names and exit")
    p.add_argument("--top", type=int, default=20, help="rows per ranked table (default 20)")
    options.add_device_arguments(p, strict=False)
    options.add_limit_arguments(p, timeout=60.0, per="sample")
    options.add_job_arguments(p)


def settings_from(args: argparse.Namespace) -> OpRun:
    from runners.settings import DTYPE_NAMES, OpSettings, dtype_names

    return OpRun(
        job=options.job_settings(args),
        task=OpSettings(
            device=options.device_choice(args),
            dtypes=dtype_names(args.dtypes) if args.dtypes else DTYPE_NAMES,
            inputs=args.inputs,
            timeout_s=args.timeout,
            memory_limit=options.memory_limit(args),
            declarations=args.skips,
        ),
        ops=options.names(args.ops),
        group_size=args.group_size,
    )


def run(args: argparse.Namespace) -> int:
    options.store_to_write(args.store)  # a file: one clear error before any work
    if args.list:
        from runners.op_sweep.opdb import select_opinfos

        names = options.names(args.ops)
        sys.stdout.write("\n".join(select_opinfos(list(names) if names else None)) + "\n")
        return 0
    from sweep.op_driver import abandoned_error, run_op_sweep

    run = settings_from(args)
    summary = run_op_sweep(run)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(summary.statuses.items()))
    print(
        f"op run {summary.run_id}: {summary.opinfos} OpInfos x {len(run.task.dtypes)} dtypes, "
        f"{summary.already_done} OpInfo x dtype already done, {summary.rows} rows written "
        f"({counts or 'none'}), "
        + (
            f"{len(summary.abandoned)} OpInfo x dtype without rows (system faults), "
            if summary.abandoned
            else ""
        )
        + f"{summary.seconds:.0f} s; store: {run.job.store}",
        file=sys.stderr,
    )
    if run.job.report:
        from reports.op_sweep import op_sweep_section_data
        from reports.query import StoreQuery
        from reports.render.op_sections import render_op_text

        q = StoreQuery(run.job.store)
        data = op_sweep_section_data(q, None, op_run_id=summary.run_id, top=args.top)
        sys.stdout.write(render_op_text(data))
    if summary.abandoned:  # after the report of what did run: one error, exit 3
        raise abandoned_error(summary)
    return 0
