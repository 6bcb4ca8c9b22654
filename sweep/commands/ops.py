"""`hfsweep ops`: PyTorch's own OpInfo samples on a device against the CPU (the op-level sweep)."""

from __future__ import annotations

import argparse
import sys

from reports import settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ops",
        help="comma-separated OpInfo names (e.g. add,nn.functional.layer_norm; default: all)",
    )
    p.add_argument("--dtypes", help="comma-separated: fp32,bf16,fp16 (default: all three)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, mps, neuron (default cpu)")
    p.add_argument("--profile", help="neuron: a file of natively lowered ATen ops")
    p.add_argument(
        "--inputs",
        default="sample",
        choices=["sample", "reference"],
        help="OpInfo.sample_inputs (default) or reference_inputs (more and larger samples)",
    )
    p.add_argument("--skips", help="a JSON file of the device's own declared skips (see README)")
    p.add_argument(
        "--store",
        default=settings.default_store(),
        help="results folder or URI (default: $HFSWEEP_STORE or ./hfsweep-store)",
    )
    p.add_argument("--run-id", help="name the run; an existing op-sweep run id resumes it")
    p.add_argument("--address", help="an existing Ray cluster (e.g. 127.0.0.1:6379 or auto)")
    p.add_argument("--num-cpus", type=int, help="size of the embedded local Ray (default: cores)")
    p.add_argument(
        "--local", action="store_true", help="no Ray: run OpInfo groups in child processes"
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per sample (default 60)")
    p.add_argument("--group-size", type=int, default=4, help="OpInfos per task (default 4)")
    p.add_argument("--retries", type=int, default=1, help="retries for lost workers (default 1)")
    p.add_argument("--list", action="store_true", help="print the OpInfo names and exit")
    p.add_argument("--no-report", action="store_true", help="do not print the summary at the end")
    p.add_argument("--top", type=int, default=20, help="rows per ranked table (default 20)")


def run(args: argparse.Namespace) -> int:
    from sweep.commands._store_arg import store_to_write

    store_to_write(args.store)  # a file: one clear error before any work
    from reports.errors import UsageError

    if args.list:
        from runners.op_sweep.opdb import select_opinfos

        names = [n.strip() for n in args.ops.split(",") if n.strip()] if args.ops else None
        sys.stdout.write("\n".join(select_opinfos(names)) + "\n")
        return 0
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    from runners.op_sweep.opdb import parse_dtypes
    from sweep.driver import command_line
    from sweep.op_driver import OpSweepConfig, run_op_sweep

    options = {"profile": args.profile} if args.profile else {}
    config = OpSweepConfig(
        store=args.store,
        ops=[n.strip() for n in args.ops.split(",") if n.strip()] if args.ops else None,
        dtypes=parse_dtypes(args.dtypes),
        device=args.device,
        device_options=options,
        inputs=args.inputs,
        run_id=args.run_id,
        executor="local" if args.local else "ray",
        address=args.address,
        num_cpus=args.num_cpus,
        timeout_s=args.timeout,
        group_size=args.group_size,
        retries=args.retries,
        declarations=args.skips,
        command=command_line(),
    )
    summary = run_op_sweep(config)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(summary.statuses.items()))
    print(
        f"op run {summary.run_id}: {summary.opinfos} OpInfos x {len(config.dtypes)} dtypes, "
        f"{summary.already_done} OpInfo x dtype already done, {summary.rows} rows written "
        f"({counts or 'none'}), {summary.seconds:.0f} s; store: {args.store}",
        file=sys.stderr,
    )
    if args.no_report:
        return 0
    from reports.op_sweep import op_sweep_section_data
    from reports.query import StoreQuery
    from reports.render.op_sections import render_op_text

    q = StoreQuery(args.store)
    data = op_sweep_section_data(q, None, op_run_id=summary.run_id, top=args.top)
    sys.stdout.write(render_op_text(data))
    return 0
