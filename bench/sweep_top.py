"""Time the sweep of the catalog's top N models and print seconds per model by stage.

Runs the real driver (embedded Ray, the bundled offline catalog) once per device given, in the
same session so the figures compare side by side, and prints per device: wall time, models per
minute, and per stage the mean / median / p95 / total seconds of the models that ran it, plus
ratios against the first device.

    python bench/sweep_top.py --top 50 --devices cpu,neuron
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> int:
    from ground.schema import Stage
    from reports.store import Store
    from runners.settings import ModelSettings
    from sweep.driver import run_sweep
    from sweep.settings import JobSettings, ModelRun

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=50)
    parser.add_argument("--devices", default="cpu,neuron")
    parser.add_argument("--stages", default=",".join(s.value for s in Stage))
    parser.add_argument(
        "--compile-backend",
        default=None,
        help="override every device's compile backend (e.g. aot_eager)",
    )
    parser.add_argument("--num-cpus", type=int, default=None)
    parser.add_argument("--store", default=None, help="keep the results here")
    args = parser.parse_args()

    store_root = Path(args.store or tempfile.mkdtemp(prefix="hfsweep-bench-"))
    stages = [Stage(s) for s in args.stages.split(",")]
    figures = {}
    for device in args.devices.split(","):
        run_id = f"bench-{device}-{int(time.time())}"
        start = time.perf_counter()
        summary = run_sweep(
            ModelRun(
                job=JobSettings(
                    store=str(store_root), run_id=run_id, num_cpus=args.num_cpus, progress=False
                ),
                task=ModelSettings(
                    device=device, stages=stages, compile_backend=args.compile_backend
                ),
                top=args.top,
            )
        )
        wall = time.perf_counter() - start
        rows = Store(store_root).read("results", run_id).to_pylist()
        ran = [r for r in rows if r["dedup_of"] is None and r["duration_s"] is not None]
        per_stage = {}
        for stage in stages:
            secs = [r["duration_s"] for r in ran if r["stage"] == stage.value]
            per_stage[stage.value] = secs
        figures[device] = (wall, summary, per_stage)

    print(f"sweep of the top {args.top} models (bundled catalog), store {store_root}")
    for device, (wall, summary, per_stage) in figures.items():
        print()
        print(
            f"device {device}: wall {wall:.1f} s for {summary.requested} models "
            f"({summary.skipped} skipped before running, {summary.models_run} run as "
            f"{summary.tasks} unique tiny models); {wall / max(1, summary.requested):.2f} s "
            f"per model asked for, {wall / max(1, summary.tasks):.2f} s per unique model"
        )
        print(
            f"  {'stage':<10} {'models':>6} {'mean s':>8} {'median s':>9} {'p95 s':>8} "
            f"{'total s':>8}"
        )
        for stage, secs in per_stage.items():
            if not secs:
                print(f"  {stage:<10} {0:>6}")
                continue
            print(
                f"  {stage:<10} {len(secs):>6} {statistics.mean(secs):>8.3f} "
                f"{statistics.median(secs):>9.3f} {pct(secs, 0.95):>8.3f} {sum(secs):>8.1f}"
            )
    devices = list(figures)
    if len(devices) > 1:
        base_wall, _, base_stages = figures[devices[0]]
        print()
        print(f"ratios against {devices[0]} (same models, same session):")
        for device in devices[1:]:
            wall, _, per_stage = figures[device]
            parts = [f"wall x{wall / base_wall:.2f}"]
            for stage, secs in per_stage.items():
                base = base_stages.get(stage) or []
                if secs and base and sum(base) > 0:
                    parts.append(f"{stage} x{sum(secs) / sum(base):.2f}")
            print(f"  {device}: " + ", ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
