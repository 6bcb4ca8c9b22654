"""Can the catalog's top models be sharded on the device? The distributed stages, measured.

Sweeps the bundled catalog's top N with load, forward, backward, ddp, fsdp and tp on the
emulated neuron device and on the CPU (gloo), through the real driver on an embedded Ray (a
task of W ranks asks Ray for W CPUs), in one invocation, then prints:
- per device, the share of models and downloads passing ddp, fsdp and tp, and the models
  with no tensor-parallel plan;
- what stops sharding on each device: the collective or op each failed stage names, ranked by
  the downloads it blocks, with the evidence its verdict rests on;
- every model that passes a distributed stage on the CPU and not on neuron, grouped by what
  stopped it on neuron and the evidence that verdict rests on;
- what the stages cost per unique tiny model (rows of the models that ran, not dedup copies):
  median seconds per stage, of the distributed group (ddp + fsdp + tp) and of the training
  group (optimizer + lora), the distributed group against load + forward + backward and
  against the training group, and the rank groups the run started (a distributed stage's
  time is from its request to the warm group to its result, the group's start included
  where the stage started one).

    python bench/distributed_stages.py --top 200 --store /tmp/dist-bench

The same command resumes its runs (`dist-<device>-<N>`, or `dist-<label>-<device>-<N>` with
`--label`) where they stopped. Two labels over the same store compare code before and after a
change, run by run (`hfsweep diff dist-before-cpu-30 dist-after-cpu-30 --store ...`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.sweep_runs import dl, last_attempts, pct  # noqa: E402

STAGES = "load,forward,backward,optimizer,lora,ddp,fsdp,tp"
BASE = ("load", "forward", "backward")
TRAINING = ("optimizer", "lora")
SHARDING = ("ddp", "fsdp", "tp")
GROUP_STARTS: dict[str, float] = {}  # run id -> rank groups its tasks started (this invocation)


def sweep(args: argparse.Namespace, device: str) -> tuple[str, float]:
    from runners.settings import ModelSettings
    from sweep.commands.options import stage_list

    task = ModelSettings(
        device=device,
        stages=tuple(stage_list(STAGES)),
        timeout_s=args.timeout,
        world_size=args.world_size,
    )
    from reports.store import Store
    from sweep.driver import run_sweep
    from sweep.settings import JobSettings, ModelRun

    label = f"{args.label}-" if args.label else ""
    run_id = f"dist-{label}{device}-{args.top}"
    run = Store(args.store).run(run_id)
    if run is not None and run.get("status") == "finished":
        return run_id, 0.0
    start = time.perf_counter()
    job = JobSettings(store=args.store, run_id=run_id, num_cpus=args.num_cpus, progress=False)
    summary = run_sweep(ModelRun(job=job, task=task, top=args.top))
    if "group_starts" in summary.timings:  # code without a warm group does not count them
        GROUP_STARTS[run_id] = summary.timings["group_starts"]
    return run_id, time.perf_counter() - start


def print_sharding(q: Any, run_id: str, wall: float) -> None:
    from reports import coverage
    from reports.sharding import sharding

    d = coverage.denominators(q, run_id)
    sh = sharding(q, run_id)
    took = f"{wall / 60:.1f} min this invocation" if wall else "from the store"
    print(
        f"\n== {d['device_label']}: run {run_id}, {sh['models']} models, {dl(sh['downloads'])} "
        f"downloads, world size {', '.join(map(str, sh['world_sizes'])) or '-'} ({took})"
    )
    print(f"  {'stage':<60} {'passed':>7} {'% models':>9} {'% dl':>7} {'failed':>7} {'skip':>5}")
    for line in sh["stages"]:
        print(
            f"  {line['label']:<60} {line['passed']:>7} {pct(line['passed'], sh['models']):>9} "
            f"{pct(line['passed_downloads'], sh['downloads']):>7} {line['failed']:>7} "
            f"{line['skipped']:>5}"
        )
    no_plan = sh["no_plan"]
    print(
        f"  no tensor-parallel plan: {no_plan['models']} models, "
        f"{pct(no_plan['downloads'], sh['downloads'])} of downloads"
    )
    print("  what stops sharding (ranked by downloads):")
    for b in sh["blockers"][:15]:
        print(
            f"    {b['op']:<48} {','.join(b['stages']):<14} {b['models']:>4} models "
            f"{pct(b['downloads'], sh['downloads']):>7}  evidence {','.join(b['evidence']) or '-'}"
        )


def cause(rows: dict[str, dict[str, Any]], stage: str) -> str:
    """What stopped a distributed stage on neuron, and what that verdict rests on."""
    row = rows[stage]
    if row["status"] == "not_run":
        for before in BASE:
            if rows.get(before, {}).get("status") != "pass":
                return f"{before} {rows.get(before, {}).get('status')} (built on)"
        return "not_run"
    evidence = f" [evidence {row['sharding_evidence']}]" if row.get("sharding_evidence") else ""
    if row["failing_op"]:
        return f"{row['status']} at {row['failing_op']}{evidence}"
    message = (row["error_message"] or "").split(": ", 1)[-1].splitlines()[0][:80]
    return f"{row['status']}: {row['error_type']}: {message}{evidence}"


def print_cpu_vs_neuron(store: Any, cpu_run: str, neuron_run: str) -> None:
    cpu, neuron = last_attempts(store, cpu_run), last_attempts(store, neuron_run)
    print("\n== passes a distributed stage on cpu, not on neuron, by what stopped it on neuron")
    for stage in SHARDING:
        groups: dict[str, list[str]] = {}
        for model, by_stage in cpu.items():
            on_cpu, on_neuron = by_stage.get(stage), neuron.get(model, {}).get(stage)
            if not on_cpu or on_cpu["status"] != "pass" or not on_neuron:
                continue
            if on_neuron["status"] != "pass":
                groups.setdefault(cause(neuron[model], stage), []).append(model)
        print(f"  {stage}: {sum(len(m) for m in groups.values())} models")
        for why, models in sorted(groups.items(), key=lambda g: (-len(g[1]), g[0])):
            print(f"    {len(models):>4}  {why}")
            print(f"          e.g. {', '.join(models[:3])}")


def print_cost(store: Any, run_id: str) -> None:
    rows = [
        r
        for r in store.read("results", run_id).to_pylist()
        if r["dedup_of"] is None and r["status"] != "not_run"
        and (r["duration_s"] is not None or r["status"] == "skip")
    ]  # fmt: skip
    # a skip's time is what it cost: a rank loads the model to find tp has no plan (timed),
    # LoRA finds no target modules before it starts (untimed: 0 s)
    per_model: dict[str, dict[str, float]] = {}
    for r in rows:
        per_model.setdefault(r["model_id"], {})[r["stage"]] = r["duration_s"] or 0.0
    print(f"\n== cost per unique tiny model, run {run_id} (seconds, median)")
    for stage in (*BASE, *SHARDING):
        secs = [m[stage] for m in per_model.values() if stage in m]
        if secs:
            print(
                f"  {stage:<10} {len(secs):>5} models  median {statistics.median(secs):7.2f}"
                f"  total {sum(secs):8.1f}"
            )
    models = len(per_model)
    for name, group in (("training group", TRAINING), ("distributed group", SHARDING)):
        secs = [sum(m.get(s, 0.0) for s in group) for m in per_model.values() if _ran(m, group)]
        if secs:
            print(
                f"  {name} ({' + '.join(group)}): {len(secs)} models  median "
                f"{statistics.median(secs):7.2f}  total {sum(secs):8.1f}"
            )
    for against, label in ((BASE, "load + forward + backward"), (TRAINING, "optimizer + lora")):
        ratios = [
            sum(m.get(s, 0.0) for s in SHARDING) / sum(m.get(s, 0.0) for s in against)
            for m in per_model.values()
            if _ran(m, SHARDING) and _ran(m, against) and sum(m.get(s, 0.0) for s in against) > 0
        ]
        if ratios:
            print(
                f"  ddp + fsdp + tp against {label}, per model: median "
                f"x{statistics.median(ratios):.1f} ({len(ratios)} models with a row for each)"
            )
    if run_id in GROUP_STARTS:
        print(f"  rank groups started: {GROUP_STARTS[run_id]:.0f} for {models} unique models")


def _ran(by_stage: dict[str, float], group: tuple[str, ...]) -> bool:
    """Whether a model has a timed row (pass, fail or skip: not `not_run`) for every stage of
    `group` (a model whose base failed has none to compare)."""
    return all(s in by_stage for s in group)


def main() -> int:
    from reports.query import StoreQuery
    from reports.store import Store

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=200)
    parser.add_argument("--store", required=True, help="results folder (kept: a rerun resumes)")
    parser.add_argument("--devices", default="neuron,cpu")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--num-cpus", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--label", default="", help="run ids dist-<label>-<device>-<N>")
    args = parser.parse_args()

    runs: dict[str, tuple[str, float]] = {}
    for device in args.devices.split(","):
        runs[device] = sweep(args, device)
    store = Store(args.store)
    q = StoreQuery(store)
    print(f"distributed stages on the bundled catalog's top {args.top}, store {args.store}")
    for run_id, wall in runs.values():
        print_sharding(q, run_id, wall)
    if "cpu" in runs and "neuron" in runs:
        print_cpu_vs_neuron(store, runs["cpu"][0], runs["neuron"][0])
    for run_id, _ in runs.values():
        print_cost(store, run_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
