"""Several dtypes in one run against one run per dtype: wall time, and what each dtype gives.

Runs `hfsweep run` (the real CLI, the bundled offline catalog) once with `--dtype A,B` and once
per dtype, each into its own run of one store, and prints, side by side:
- the wall time of the run of several dtypes against the single-dtype runs added up;
- per dtype, the share of downloads (and of models) passing every stage, and with no CPU
  fallback, from the run of several dtypes and from that dtype's own run (they should agree:
  the same tasks ran);
- how many models (and downloads) differ between the dtypes, by kind, and the most downloaded of
  them with the op or error that differs;
- the top missing ops of each dtype, by the downloads they touch.

    python bench/dtype_axis.py --top 1000 --device neuron --dtypes fp32,bf16
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def sweep(args: argparse.Namespace, store: Path, run_id: str, dtypes: str) -> float:
    """One `hfsweep run`; its wall time in seconds (exit 1, a model failed, is a result)."""
    command = [
        sys.executable,
        "-m",
        "sweep",
        "run",
        "--top",
        str(args.top),
        "--device",
        args.device,
        "--dtype",
        dtypes,
        "--store",
        str(store),
        "--run-id",
        run_id,
        "--no-report",
        *(["--local"] if args.local else []),
        *(["--num-cpus", str(args.num_cpus)] if args.num_cpus else []),
        *(["--timeout", str(args.timeout)] if args.timeout else []),
    ]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.stderr.write(done.stderr)
        raise SystemExit(f"{' '.join(command[2:])} exited {done.returncode}")
    return seconds


def main() -> int:
    from ground import fmt
    from reports import coverage, dtypes, ops
    from reports.query import StoreQuery

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=50)
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--local", action="store_true", help="no Ray (hfsweep run --local)")
    parser.add_argument("--num-cpus", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=None, help="seconds per model")
    parser.add_argument("--store", default=None, help="keep the results here")
    parser.add_argument("--models", type=int, default=15, help="differing models to list")
    parser.add_argument("--ops", type=int, default=10, help="missing ops to list per dtype")
    args = parser.parse_args()

    names = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    store = Path(args.store or tempfile.mkdtemp(prefix="hfsweep-dtypes-"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    together = f"dtypes-{stamp}"
    walls = {"together": sweep(args, store, together, ",".join(names))}
    for d in names:
        walls[d] = sweep(args, store, f"{d}-{stamp}", d)

    q = StoreQuery(str(store))
    print(
        f"top {args.top} of the bundled catalog on {args.device}"
        f"{' (--local)' if args.local else ''}, dtypes {', '.join(names)}; store {store}"
    )
    alone = sum(walls[d] for d in names)
    print()
    print(f"wall time, one run of {', '.join(names)}: {walls['together']:.0f} s")
    for d in names:
        print(f"wall time, {d} alone: {walls[d]:.0f} s")
    print(
        f"one run / the single runs added up: {walls['together']:.0f} / {alone:.0f} s = "
        f"{walls['together'] / alone:.2f}"
    )

    print()
    print(
        f"{'dtype':<6} {'run':<22} {'models':>7} {'passed':>14} {'% dl passed':>12} "
        f"{'no fallback':>14} {'% dl no fallback':>17}"
    )
    for d in names:
        for label, run, dtype in (("several dtypes", together, d), (f"{d} alone", None, None)):
            run_id = run or f"{d}-{stamp}"
            den = coverage.denominators(q, run_id, dtype)
            print(
                f"{d:<6} {label:<22} {den['models']:>7} "
                f"{fmt.of(den['passed'], den['models']):>14} "
                f"{fmt.pct(coverage.share(den['passed_downloads'], den['downloads'])):>12} "
                f"{fmt.of(den['passed_on_device'], den['models']):>14} "
                f"{fmt.pct(coverage.share(den['passed_on_device_downloads'], den['downloads'])):>17}"
            )

    diff = dtypes.dtype_differences(q, together, limit=args.models)
    if diff is not None:
        print()
        for p in diff["pairs"]:
            cells = ", ".join(
                f"{name} {p['passed'][key]['models']} ({fmt.pct(p['passed'][key]['downloads_share'])} dl)"
                for key, name in (
                    ("both", "both"),
                    ("only_a", f"{p['a']} only"),
                    ("only_b", f"{p['b']} only"),
                    ("neither", "neither"),
                )
            )
            print(f"passes every stage, {p['a']} and {p['b']}: {cells}")
        kinds = "; ".join(f"{n} {dtypes.KINDS[k]}" for k, n in diff["by_kind"].items())
        print(
            f"{diff['differing']} models differ ({fmt.pct(diff['differing_downloads_share'])} of "
            f"downloads): {kinds}"
        )
        for m in diff["models"]:
            print(f"  {m['model_id']:<50} {fmt.downloads(m['downloads']):>8}  {m['cause']}")

    for d in names:
        print()
        print(f"top missing ops at {d} (models touched, % of downloads, only obstacle):")
        for r in ops.missing_ops(q, together, dtype=d, limit=args.ops):
            print(
                f"  {r['op']:<40} {r['blocked_models']:>5} "
                f"{fmt.pct(r['blocked_downloads_share']):>7} {r['sole_models']:>5}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
