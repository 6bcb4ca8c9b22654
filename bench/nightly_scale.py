"""The whole pipeline at Hub scale: a catalog through planning, dedup, the store, the report and
the dashboard, night after night, side by side for several catalogs in one run.

For each catalog (`--catalogs`: `bundled`, `synthetic:N` (bench/synthetic_catalog.py, written
once under `--work`), or a catalog file), each pass is a real `hfsweep run` (embedded Ray,
`--workers` CPUs, `--stages`) in a subprocess of its own into one store per catalog:
  pass 1   the first night (nothing to reuse)
  pass 2+  the next nights with `--reuse` (`--passes 2`; nothing changed between them)
and prints per pass: wall time, entries planned per second of wall time and per core-second of
plan tasks, unique tiny models run (the dedup ratio), reused, store bytes added, the driver's
peak memory (its own RSS high-water mark, real plan tasks), then for the last pass the report's
time (`hfsweep report` as JSON, and the static site), the dashboard's latency (overview, models
table, a model page, the model lookup, the diff of the two last passes: the first request of
each and the median of `--requests`) and the machine's share of 2 cores during the run.

    python bench/nightly_scale.py --catalogs bundled,synthetic:100000 --stages load --passes 2
    python bench/nightly_scale.py --catalogs synthetic:2000 --top 300 --stages load   # a try
    python bench/nightly_scale.py --catalogs synthetic:100000 --stand-in   # the pipeline alone
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def catalog_path(spec: str, work: Path) -> str:
    """`bundled`, a file, or `synthetic:N` (generated once into `work/synthetic-N/`)."""
    if not spec.startswith("synthetic:"):
        return spec
    n = int(spec.split(":", 1)[1])
    folder = work / f"synthetic-{n}"
    if not (folder / "catalog.csv").exists():
        from synthetic_catalog import generate

        made = generate(folder, n)
        print(
            f"[{spec}] generated in {made['seconds']:.0f} s: {made['config_files']:,} config "
            f"files ({made['config_bytes'] / 1e6:.0f} MB)",
            flush=True,
        )
    return str(folder / "catalog.csv")


def store_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.parquet")) if root.exists() else 0


# ---- one pass (run in a subprocess: its peak memory is its own) ---------------------------------


def stand_in(spec: Any, settings: Any) -> Any:
    """`--stand-in`: a model task that builds nothing: every stage asked for passes at once."""
    from runners.outcome import ModelOutcome, StageResult

    stages = [StageResult(stage=s.value, status="pass", duration_s=0.0) for s in settings.stages]
    return ModelOutcome(stages, worker="stand-in", timings={"child_s": 0.0})


def one_pass(args: argparse.Namespace) -> dict[str, Any]:
    from reports.store import Store
    from runners.settings import ModelSettings
    from sweep.commands.options import stage_list
    from sweep.driver import run_sweep
    from sweep.settings import JobSettings, ModelRun

    summary = run_sweep(
        ModelRun(
            job=JobSettings(
                store=args.store, run_id=args.run_id, num_cpus=args.workers, progress=False
            ),
            task=ModelSettings(device=args.device, stages=tuple(stage_list(args.stages))),
            catalog=args.catalog,
            top=args.top,
            reuse=args.pass_reuse or None,
        ),
        run_fn=stand_in if args.stand_in else None,
    )
    results = Store(args.store).read(
        "results", summary.run_id, columns=["model_id", "dedup_of", "shrunk_config_hash"]
    )
    return {
        "run_id": summary.run_id,
        "wall_s": summary.seconds,
        "startup_s": summary.startup_s,
        "requested": summary.requested,
        "skipped": summary.skipped,
        "models_run": summary.models_run,
        "unique": summary.tasks,
        "reused": summary.reused,
        "plans_reused": summary.plans_reused,
        "ray_started": summary.started_executor,
        "plan_s": summary.timings.get("plan_s", 0.0),
        "worker_s": summary.timings.get("worker_s", 0.0),
        "result_rows": results.num_rows,
        "driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_pass(args: argparse.Namespace, catalog: str, store: Path, n: int) -> dict[str, Any]:
    before = store_bytes(store)
    cmd = [
        sys.executable,
        __file__,
        "--one-pass",
        "--catalog",
        catalog,
        "--store",
        str(store),
        "--run-id",
        f"night-{n}",
        "--device",
        args.device,
        "--stages",
        args.stages,
        "--workers",
        str(args.workers),
    ]
    if args.top:
        cmd += ["--top", str(args.top)]
    if n > 1 and args.reuse:
        cmd += ["--pass-reuse", args.reuse]
    if args.stand_in:
        cmd += ["--stand-in"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=24 * 3600)
    if proc.returncode != 0:
        raise SystemExit(f"pass {n} failed:\n{proc.stderr[-4000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["store_bytes_added"] = store_bytes(store) - before
    return out


# ---- the reading side -------------------------------------------------------------------------


def report_times(store: Path, run_id: str, work: Path) -> dict[str, float]:
    times = {}
    for label, extra in (
        ("report (json)", ["--format", "json"]),
        ("static site", ["--format", "html", "--out", str(work / f"site-{store.name}")]),
    ):
        start = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "sweep",
                "report",
                "--store",
                str(store),
                "--run",
                run_id,
                *extra,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if proc.returncode != 0:
            raise SystemExit(f"{label} failed:\n{proc.stderr[-3000:]}")
        times[label] = time.perf_counter() - start
    return times


def dashboard_latency(store: Path, runs: list[str], requests: int) -> dict[str, tuple]:
    import httpx
    from dashboard_latency import free_port, model_path, timed

    from reports.store import Store

    ids = Store(store).read("results", runs[-1], columns=["model_id"]).column("model_id")
    models = random.Random(0).sample(sorted(set(ids.to_pylist())), k=min(requests, len(ids)))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweep", "dashboard", "--store", str(store), "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    cases = {
        "overview /": [base + "/"] * requests,
        "models table": [base + f"/models?page={i % 5 + 1}" for i in range(requests)],
        "model page": [base + "/models/" + model_path(m) for m in models],
        "model lookup (JSON)": [base + "/api/models/" + model_path(m) for m in models],
    }
    if len(runs) > 1:
        cases["diff of the last two nights"] = [
            base + f"/runs?a={runs[-2]}&b={runs[-1]}"
        ] * requests
    out: dict[str, tuple[float, float | None]] = {}
    try:
        start = time.perf_counter()
        with httpx.Client(timeout=1800) as client:
            while True:
                try:
                    client.get(base + "/api/health")
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            while client.get(base + "/api/health").json().get("warming"):
                time.sleep(0.2)
            out["ready (every run summarised)"] = (time.perf_counter() - start, None)
            for name, urls in cases.items():
                first = timed(client, urls[0])
                rest = [timed(client, u) for u in urls[1:]] or [first]
                out[name] = (first, statistics.median(rest))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return out


def machine_share() -> float:
    from sweep_throughput import machine_efficiency

    return machine_efficiency(2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalogs", default="bundled,synthetic:100000")
    parser.add_argument("--top", type=int, default=None, help="the first N of each catalog")
    parser.add_argument("--stages", default="load")
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--reuse", default="latest", help="--reuse of the passes after the first")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--work", default="/tmp/hfsweep-nightly-scale")
    parser.add_argument(
        "--stand-in",
        action="store_true",
        help="model tasks build nothing and pass (planning, dedup, reuse, the store, the report "
        "and the dashboard stay real): the pipeline's own cost at a size whose tiny models "
        "this machine could not run in a session",
    )
    parser.add_argument("--one-pass", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--catalog", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--run-id", help=argparse.SUPPRESS)
    parser.add_argument("--pass-reuse", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_pass:
        print(json.dumps(one_pass(args)))
        return 0

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    print(
        ("model tasks: a stand-in that builds nothing (--stand-in); " if args.stand_in else "")
        + f"stages {args.stages} on {args.device}, {args.workers} workers, {args.passes} passes "
        f"(after the first: --reuse {args.reuse}); two CPU-bound processes got "
        f"{100 * machine_share():.0f}% of 2 cores at the start",
        flush=True,
    )
    for spec in args.catalogs.split(","):
        catalog = catalog_path(spec, work)
        store = work / f"store-{spec.replace(':', '-')}" / (f"top{args.top}" if args.top else "all")
        passes = [run_pass(args, catalog, store, n) for n in range(1, args.passes + 1)]
        print(f"\n[{spec}] {passes[0]['requested']:,} entries", flush=True)
        print(
            f"{'pass':<6}{'wall s':>9}{'entries/s':>11}{'/plan core-s':>13}{'run':>8}"
            f"{'unique':>8}{'dedup':>7}{'reused':>8}{'plans re.':>10}{'Ray':>5}"
            f"{'store MB+':>10}{'driver MB':>10}"
        )
        for n, p in enumerate(passes, start=1):
            planned = p["requested"]
            per_core = f"{planned / p['plan_s']:.1f}" if p["plan_s"] else "-"  # no plan task
            print(
                f"{n:<6}{p['wall_s']:>9.1f}{planned / p['wall_s']:>11.1f}"
                f"{per_core:>13}{p['models_run']:>8,}"
                f"{p['unique']:>8,}{p['unique'] / max(1, p['models_run']):>7.2f}"
                f"{p['reused']:>8,}{p['plans_reused']:>10,}{'yes' if p['ray_started'] else 'no':>5}"
                f"{p['store_bytes_added'] / 1e6:>10.1f}"
                f"{p['driver_peak_rss_mb']:>10.0f}",
                flush=True,
            )
        if len(passes) > 1:
            print(
                f"pass {len(passes)} / pass 1 wall time: "
                f"{100 * passes[-1]['wall_s'] / passes[0]['wall_s']:.1f}%"
            )
        for label, seconds in report_times(store, passes[-1]["run_id"], work).items():
            print(f"{label}: {seconds:.1f} s", flush=True)
        lat = dashboard_latency(store, [p["run_id"] for p in passes], args.requests)
        for name, (first, median) in lat.items():
            if median is None:
                print(f"dashboard {name}: {first:.1f} s")
            else:
                print(f"dashboard {name}: first {first:.0f} ms, median {median:.0f} ms")
    print(f"\ntwo CPU-bound processes got {100 * machine_share():.0f}% of 2 cores at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
