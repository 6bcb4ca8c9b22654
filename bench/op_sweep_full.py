"""The whole op_db on a device, one dtype after another, and the join to a model sweep.

For each dtype: `hfsweep ops --device D --dtypes DT` over every OpInfo (Ray on this machine's
cores), timed; then its denominators, the wall time, the sample results per second and the
seconds of one core per sample result. With `--model-run`, the model sweep's fallbacks are
joined to each dtype's op run: how many of the ATen ops they name the op sweep finds correct
but not native (the cheapest lowering wins), the rest by verdict, and the list of those ops.
`--every N` sweeps every N-th OpInfo of op_db only (a slice, to estimate the full duration:
it prints the slice's wall time times N).

    .venv/bin/python bench/op_sweep_full.py --store /tmp/opbench [--device neuron]
        [--dtypes fp32,bf16] [--ops NAME,... | --every N] [--model-run RUN_ID]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--ops", help="OpInfo names (default: all of op_db)")
    parser.add_argument("--every", type=int, help="every N-th OpInfo of op_db only (a slice)")
    parser.add_argument("--model-run", help="a model run in the same store to join to")
    parser.add_argument("--run-prefix", default="opbench")
    args = parser.parse_args()

    from reports.op_sweep import joined_ops, op_query
    from reports.query import StoreQuery
    from reports.render.op_sections import render_op_text
    from runners.settings import OpSettings
    from sweep.op_driver import run_op_sweep
    from sweep.settings import JobSettings, OpRun

    cores = os.cpu_count() or 1
    ops = args.ops.split(",") if args.ops else None
    if args.every:
        from runners.op_sweep.opdb import select_opinfos

        ops = select_opinfos(None)[:: args.every]
    runs = []
    for dtype in [d for d in args.dtypes.split(",") if d]:
        run_id = f"{args.run_prefix}-{args.device}-{dtype}"
        start = time.monotonic()
        summary = run_op_sweep(
            OpRun(
                job=JobSettings(store=args.store, run_id=run_id, command=" ".join(sys.argv)),
                task=OpSettings(device=args.device, dtypes=(dtype,)),
                ops=ops,
            )
        )
        wall = time.monotonic() - start
        runs.append(run_id)
        q = StoreQuery(args.store)
        d = op_query(q).denominators(run_id)
        samples = d["total"]["sample_rows"]
        print(render_op_text(
            {"op_run_id": run_id, "denominators": d, "problem_ops": [], "problem_ops_total": 0,
             "joined": None}
        ).split("\n== Op sweep: ATen ops")[0])  # fmt: skip
        print(
            f"{run_id}: {summary.opinfos} OpInfos, {d['total']['total']} results "
            f"({samples} sample results), wall {wall:.0f} s on {cores} cores "
            f"({summary.already_done} OpInfo x dtype already in the store); "
            f"{samples / wall:.1f} sample results per second, "
            f"{wall * cores / max(1, samples) * 1000:.1f} ms of one core per sample result"
        )
        if args.every:
            print(f"{run_id}: every {args.every}th OpInfo; the whole op_db estimated at "
                  f"{wall * args.every:.0f} s (estimate_s={wall * args.every:.0f})")  # fmt: skip
    for run_id in runs if args.model_run else []:
        j = joined_ops(StoreQuery(args.store), args.model_run, run_id)
        c = j["by_verdict"]
        print(
            f"join: model run {args.model_run} x op run {run_id}: the model sweep's fallbacks "
            f"name {j['named_ops']} ATen ops; the op sweep finds {c['correct_not_native']} "
            f"correct but not native, {c['native']} native, {c['fails']} failing, "
            f"{c['wrong']} wrong, {c['skipped']} skipped; {c['not_swept']} not dispatched by "
            "any OpInfo sample"
        )
        for item in j["correct_not_native"]:
            print(
                f"  {item['op']:45s} {item['models']:4d} models  {item['downloads']:>14,} dl  "
                f"pass rate {item['op_sweep']['pass_rate']:.3f}"
            )


if __name__ == "__main__":
    main()
