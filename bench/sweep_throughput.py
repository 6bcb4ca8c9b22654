"""How close the sweep runs to its floor, and what the driver costs, side by side in one run.

Sections (default: floor, sweep, parts, store):
  floor   the same stages on the same unique tiny models, back to back in this one warm process
          (device set up once, one thread), planned here first; divided by the workers
  sweep   the real `run_sweep` (embedded Ray, fresh in a subprocess each) at each `--workers`
          count: wall time, wall / floor, parallel efficiency from the first count to the others
  parts   core-seconds per unique tiny model by where they went: each stage, the forked child
          outside its stages (start, pipe, exit), device set-up in the child, the worker outside
          the child, planning, and cores with no task (Ray start-up, the driver, gaps);
          `--cold` adds the same sweep with children that import the compile stack themselves
          (HFSWEEP_WARM_PARENT=0: as before the parent warmed up for them)
  store   store bytes per model asked for, per table (and against `--before-store` if given)
  driver  (`--driver 10000,100000`) the driver alone with a trivial plan and model task on a
          synthetic catalog of N entries: tasks per second and the driver's peak memory
Core-seconds per catalog entry and the dedup ratio are printed for every sweep; run with
`--top 1000` for the bundled catalog's figure.

    python bench/sweep_throughput.py --top 50 --workers 1,2 --cold
    python bench/sweep_throughput.py --sections sweep --top 1000 --workers 2
    python bench/sweep_throughput.py --sections driver --driver 10000,100000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

STAGES = "load,forward,backward,compile,generate"


# ---- floor -------------------------------------------------------------------------------


def floor(top: int, device: str, stages: list[str]) -> dict[str, Any]:
    """Plan here, then run every unique tiny model back to back in this process."""
    import torch

    from ground.schema import Stage
    from model_configs.catalog import load_catalog
    from runners.run_model import run_model
    from runners.settings import ModelSettings
    from sweep.plan import group_tasks, plan_entries

    torch.set_num_threads(1)  # as each sweep child runs
    order = [Stage(s) for s in stages]
    start = time.perf_counter()
    planned = plan_entries(load_catalog("bundled").top(top), order)
    plan_s = time.perf_counter() - start
    settings = ModelSettings(device=device, stages=order)
    tasks = group_tasks(planned, settings)
    dev = settings.device.build()
    dev.setup()
    per_model, per_stage = [], {s: 0.0 for s in stages}
    for task in tasks:
        t0 = time.perf_counter()
        outcome = run_model(task.spec, settings, device=dev)
        per_model.append(time.perf_counter() - t0)
        for r in outcome.stages:
            per_stage[r.stage] += r.duration_s or 0.0
    return {
        "plan_s": plan_s,
        "unique": len(tasks),
        "total_s": sum(per_model),
        "stages_s": per_stage,
        "median_s": statistics.median(per_model) if per_model else 0.0,
    }


# ---- one sweep (run in a subprocess) -----------------------------------------------------


def one_sweep(args: argparse.Namespace) -> dict[str, Any]:
    from reports.store import Store
    from runners.settings import ModelSettings
    from sweep.commands.options import stage_list
    from sweep.driver import run_sweep
    from sweep.settings import JobSettings, ModelRun

    store = args.store or tempfile.mkdtemp(prefix="hfsweep-throughput-")
    run_id = f"bench-{args.workers}w-{int(time.time())}"
    summary = run_sweep(
        ModelRun(
            job=JobSettings(store=store, run_id=run_id, num_cpus=int(args.workers), progress=False),
            task=ModelSettings(device=args.device, stages=stage_list(args.stages)),
            catalog=args.catalog,
            top=args.top,
        )
    )
    rows = Store(store).read("results", run_id).to_pylist()
    ran = [r for r in rows if r["dedup_of"] is None and r["duration_s"] is not None]
    stage_s: dict[str, float] = {}
    for r in ran:
        stage_s[r["stage"]] = stage_s.get(r["stage"], 0.0) + r["duration_s"]
    return {
        "workers": int(args.workers),
        "wall_s": summary.seconds,
        "startup_s": summary.startup_s,
        "requested": summary.requested,
        "skipped": summary.skipped,
        "models_run": summary.models_run,
        "unique": summary.tasks,
        "timings": summary.timings,
        "stage_s": stage_s,
        "store": store,
        "run_id": run_id,
        "store_bytes": store_bytes(store),
        "driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "driver_imports": [m for m in ("transformers", "diffusers") if m in sys.modules],
    }


def store_bytes(root: str) -> dict[str, int]:
    out = {}
    for table in ("results", "fallbacks", "configs", "plans", "runs"):
        folder = Path(root) / table
        out[table] = (
            sum(p.stat().st_size for p in folder.rglob("*.parquet")) if folder.exists() else 0
        )
    return out


def sweep_in_subprocess(args: argparse.Namespace, workers: int, *, cold: bool = False) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--one-sweep",
        "--workers",
        str(workers),
        "--top",
        str(args.top),
        "--device",
        args.device,
        "--stages",
        args.stages,
        "--catalog",
        args.catalog,
    ]
    env = {**os.environ, "HFSWEEP_WARM_PARENT": "0" if cold else "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=4 * 3600)
    if proc.returncode != 0:
        raise SystemExit(f"sweep failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def machine_efficiency(n: int = 2) -> float:
    """The same CPU-bound loop in 1 process, then in `n` at once: how much of n cores this
    (shared) machine gives right now (1.0: n times the work in the same time)."""
    code = "import time\nt = time.perf_counter()\ns = 0\nfor i in range(20_000_000): s += i\nprint(time.perf_counter() - t)"

    def run(k: int) -> float:
        procs = [
            subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
            for _ in range(k)
        ]
        return max(float(p.communicate()[0]) for p in procs)

    return run(1) / run(n)


# ---- the driver alone ----------------------------------------------------------------------


def trivial_plan(entries: Any, stages: list[str], config_dir: str | None) -> list:
    """Every entry shrinks to one of entries/4 synthetic tiny configs (dedup groups of 4)."""
    from model_configs.spec import TinySpec
    from sweep.plan import Planned

    out = []
    for e in entries:
        group = (e.rank or 0) // 4
        spec = TinySpec(
            library="transformers",
            model_type="synthetic",
            architecture="SyntheticModel",
            config={"group": group, "hidden_size": 64},
            changes={"hidden_size": [4096, 64]},
        )
        out.append(
            Planned(
                entry=e,
                spec=spec,
                config_source="transformers_default",
                config_hash=f"c{group}",
                library="transformers",
                model_type="synthetic",
            )
        )
    return out


def trivial_run(spec: Any, settings: Any) -> Any:
    from runners.outcome import ModelOutcome, StageResult

    return ModelOutcome(
        [StageResult(stage=s.value, status="pass", duration_s=0.0) for s in settings.stages],
        param_count=1,
        worker="trivial",
    )


def driver_alone(n: int, workers: int) -> dict[str, Any]:
    """Run in a subprocess per size, so peak memory is this catalog's alone."""
    import csv

    from runners.settings import ModelSettings
    from sweep.commands.options import stage_list
    from sweep.driver import run_sweep
    from sweep.settings import JobSettings, ModelRun

    folder = Path(tempfile.mkdtemp(prefix="hfsweep-driver-"))
    catalog = folder / "catalog.csv"
    with catalog.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["rank", "model_id", "downloads_30d", "library_name", "model_type_hint"])
        for i in range(1, n + 1):
            w.writerow([i, f"synthetic/model-{i:07d}", 10_000_000 // i, "transformers", "llama"])
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    summary = run_sweep(
        ModelRun(
            job=JobSettings(
                store=str(folder / "store"), run_id="driver", num_cpus=workers, progress=False
            ),
            task=ModelSettings(stages=stage_list("load,forward")),
            catalog=str(catalog),
            top=None,
        ),
        plan_fn=trivial_plan,
        run_fn=trivial_run,
    )
    return {
        "entries": n,
        "seconds": summary.seconds,
        "tasks": summary.tasks,
        "models_run": summary.models_run,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_before_mb": rss_before,
    }


# ---- printing ------------------------------------------------------------------------------


def per_unique(sweep: dict[str, Any]) -> dict[str, float]:
    """Core-seconds per unique tiny model, by where they went (they add up to wall x workers)."""
    t, n = sweep["timings"], max(1, sweep["unique"])
    cores = sweep["wall_s"] * sweep["workers"]
    parts = {f"stage {stage}": secs for stage, secs in sorted(sweep["stage_s"].items())}
    parts["child outside its stages"] = (
        t.get("child_s", 0.0) - t.get("setup_s", 0.0) - t.get("stages_s", 0.0)
    )
    parts["device set-up in the child"] = t.get("setup_s", 0.0)
    parts["worker outside the child"] = t.get("worker_s", 0.0) - t.get("child_s", 0.0)
    parts["planning (plan tasks)"] = t.get("plan_s", 0.0)
    parts["no task on the core (Ray, driver)"] = (
        cores - t.get("worker_s", 0.0) - t.get("plan_s", 0.0)
    )
    return {k: v / n for k, v in parts.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="floor,sweep,parts,store")
    parser.add_argument("--top", type=int, default=50)
    parser.add_argument("--catalog", default="bundled")
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--stages", default=STAGES)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--cold", action="store_true", help="also a sweep with cold children")
    parser.add_argument("--before-store", help="a store from before, for bytes per model")
    parser.add_argument("--driver", default="10000,100000", help="synthetic catalog sizes")
    parser.add_argument("--one-sweep", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--one-driver", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.one_sweep:
        print(json.dumps(one_sweep(args)))
        return 0
    if args.one_driver:
        print(json.dumps(driver_alone(args.one_driver, int(args.workers.split(",")[-1]))))
        return 0

    sections = set(args.sections.split(","))
    workers = [int(w) for w in args.workers.split(",")]
    stages = args.stages.split(",")
    print(f"top {args.top} of the {args.catalog} catalog on {args.device}, stages {args.stages}")

    fl = None
    if "floor" in sections:
        fl = floor(args.top, args.device, stages)
        print(
            f"\nfloor: {fl['unique']} unique tiny models back to back in one warm process: "
            f"{fl['total_s']:.1f} s (median {fl['median_s']:.2f} s per model; planning all "
            f"{args.top} entries took {fl['plan_s']:.1f} s more)"
        )
        print("  stages: " + ", ".join(f"{k} {v:.1f} s" for k, v in fl["stages_s"].items()))

    sweeps: dict[int, dict] = {}
    machine: list[float] = []
    if sections & {"sweep", "parts", "store"}:
        machine.append(machine_efficiency(max(workers)))
        for w in workers:
            sweeps[w] = sweep_in_subprocess(args, w)
        machine.append(machine_efficiency(max(workers)))
    cold = sweep_in_subprocess(args, workers[-1], cold=True) if args.cold else None

    if sweeps:
        print("\nsweep (run_sweep, embedded Ray started inside, fresh per row):")
        print(
            f"  {'workers':>7} {'wall s':>8} {'start s':>8} {'floor s':>8} {'wall/floor':>10} "
            f"{'w/o start':>9} {'efficiency':>10} {'core-s/entry':>12} {'unique/run':>10} "
            f"{'driver MB':>9}"
        )
        base = sweeps[workers[0]]
        for w, s in sweeps.items():
            f = fl["total_s"] / w if fl else float("nan")
            eff = (base["wall_s"] * workers[0]) / (s["wall_s"] * w)
            dedup = s["unique"] / max(1, s["models_run"])
            print(
                f"  {w:>7} {s['wall_s']:>8.1f} {s['startup_s']:>8.1f} {f:>8.1f} "
                f"{s['wall_s'] / f:>10.2f} {(s['wall_s'] - s['startup_s']) / f:>9.2f} "
                f"{eff:>10.0%} {s['wall_s'] * w / max(1, s['requested']):>12.2f} "
                f"{dedup:>10.2f} {s['driver_peak_rss_mb']:>9.0f}"
            )
        last = sweeps[workers[-1]]
        print(
            f"  ({last['requested']} entries: {last['skipped']} skipped before running, "
            f"{last['models_run']} run as {last['unique']} unique tiny models; moonshot: 2.3 "
            f"core-s per entry)"
        )
        print(
            f"  the machine itself: {max(workers)} CPU-bound processes at once ran at "
            + " and ".join(f"{m:.0%}" for m in machine)
            + " of one alone (before and after the sweeps): the ceiling of the efficiency"
        )
        for w, sw in sweeps.items():
            print(
                f"  stage seconds at {w} worker(s): "
                + ", ".join(f"{k} {v:.1f}" for k, v in sorted(sw["stage_s"].items()))
                + f" (sum {sum(sw['stage_s'].values()):.1f}; the floor's "
                + (f"{sum(fl['stages_s'].values()):.1f})" if fl else "-)")
            )
        if cold:
            print(
                f"  cold children at {cold['workers']} workers: wall {cold['wall_s']:.1f} s "
                f"(x{cold['wall_s'] / last['wall_s']:.2f} of the warm sweep)"
            )

    if "parts" in sections and sweeps:
        rows = {"warm (after)": per_unique(sweeps[workers[-1]])}
        if cold:
            rows = {"cold (before)": per_unique(cold), **rows}
        names = list(dict.fromkeys(k for r in rows.values() for k in r))
        print(f"\ncore-seconds per unique tiny model at {workers[-1]} workers, by part:")
        print(f"  {'part':<36}" + "".join(f"{k:>15}" for k in rows))
        for name in names:
            print(f"  {name:<36}" + "".join(f"{r.get(name, 0.0):>15.3f}" for r in rows.values()))
        print(f"  {'total':<36}" + "".join(f"{sum(r.values()):>15.3f}" for r in rows.values()))

    if "store" in sections and sweeps:
        last = sweeps[workers[-1]]
        n = max(1, last["requested"])
        print(f"\nstore bytes per model asked for ({n} models):")
        stores = {"after": last["store_bytes"]}
        if args.before_store:
            stores = {"before": store_bytes(args.before_store), **stores}
        for name, b in stores.items():
            total = sum(v for k, v in b.items() if k != "runs")
            print(
                f"  {name:<7} {total / n:>8.0f} B/model  ("
                + ", ".join(f"{k} {v / n:.0f}" for k, v in b.items() if k != "runs")
                + ")"
            )

    if "driver" in sections:
        print(f"\nthe driver alone (trivial tasks, dedup groups of 4, {workers[-1]} workers):")
        print(f"  {'entries':>8} {'tasks':>7} {'seconds':>8} {'tasks/s':>8} {'peak MB':>8}")
        figures = []
        for n in (int(x) for x in args.driver.split(",")):
            cmd = [sys.executable, __file__, "--one-driver", str(n), "--workers", args.workers]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3 * 3600)
            if proc.returncode != 0:
                raise SystemExit(f"driver bench failed:\n{proc.stderr[-3000:]}")
            d = json.loads(proc.stdout.strip().splitlines()[-1])
            figures.append(d)
            print(
                f"  {d['entries']:>8} {d['tasks']:>7} {d['seconds']:>8.1f} "
                f"{d['tasks'] / d['seconds']:>8.0f} {d['peak_rss_mb']:>8.0f}"
            )
        if len(figures) > 1:
            print(
                f"  peak memory x{figures[-1]['peak_rss_mb'] / figures[0]['peak_rss_mb']:.2f} "
                f"from {figures[0]['entries']} to {figures[-1]['entries']} entries (target: "
                "within 20%)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
