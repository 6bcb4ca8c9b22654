"""Can the catalog's top models fine-tune on the device? The training stages, measured.

Sweeps the bundled catalog's top N on the emulated neuron device with every stage (the five and
the training stages) and on the CPU as the reference (the stages the training ones build on and
the training stages), through the real driver, then prints:
- per device, the funnel (models and downloads passing each stage, and with no CPU fallback);
- on neuron: the share that fine-tunes with no CPU fallback with PyTorch's default AdamW
  against `fused=True`, the optimizer ops that fall back ranked by downloads, the device op
  calls of the optimizer's part of a step, the LoRA share, the autocast step against the fp32
  step (the optimizer stage);
- every model that passes a training stage on the CPU and not on neuron, with what the device
  data says of it (the failing op's class under the profile, a TorchNeuron precondition, the
  stage it builds on);
- what the stages cost per unique tiny model (rows of the models that ran, not dedup copies):
  median seconds of a single-threaded model process per stage, the training stages against the
  five (wall time of one thread: core-seconds where the core is not shared).

    python bench/training_stages.py --top 1000 --store /tmp/train-bench

The same command resumes its runs (`train-<device>-<N>`) where they stopped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.sweep_runs import dl, last_attempts, pct, resumable_sweep  # noqa: E402


def sweep(args: argparse.Namespace, device: str, stages: str) -> tuple[str, float]:
    from runners.settings import ModelSettings
    from sweep.commands.options import stage_list

    task = ModelSettings(device=device, stages=tuple(stage_list(stages)), timeout_s=args.timeout)
    return resumable_sweep(
        store=args.store, run_id=f"train-{device}-{args.top}", top=args.top,
        num_cpus=args.num_cpus, task=task,
    )  # fmt: skip


def print_funnel(q: Any, run_id: str, wall: float) -> None:
    from reports import coverage

    d = coverage.denominators(q, run_id)
    took = f"{wall / 60:.1f} min this invocation" if wall else "from the store"
    print(
        f"\n== {d['device_label']}: run {run_id}, {d['models']} models, {dl(d['downloads'])} "
        f"downloads ({took})"
    )
    print(f"  {'stage':<30} {'passed':>7} {'% dl':>7} {'no fallback':>12} {'% dl':>7}")
    for line in coverage.funnel(q, run_id):
        extra = (
            f"{line['no_fallback']:>12} {pct(line['no_fallback_downloads'], d['downloads']):>7}"
            if line["stage"]
            else ""
        )
        print(
            f"  {line['line']:<30} {line['passed']:>7} "
            f"{pct(line['passed_downloads'], d['downloads']):>7} {extra}"
        )


def print_fine_tune(q: Any, run_id: str) -> None:
    from reports.fine_tune import fine_tune

    f = fine_tune(q, run_id)
    lines = {line["stage"]: line for line in f["stages"]}
    total = f["downloads"]
    print("\n  can fine-tune with no CPU fallback (the optimizer stage passed, nothing fell back):")
    for stage in ("optimizer", "optimizer_fused"):
        line = lines[stage]
        print(
            f"    {line['label']:<45} {line['no_fallback']:>5} models "
            f"{pct(line['no_fallback_downloads'], total):>7} of downloads "
            f"(passed {line['passed']}, {pct(line['passed_downloads'], total)})"
        )
    amp, fp32 = lines["amp"], lines["optimizer"]
    print(
        f"  autocast step: passed {amp['passed']} models ({pct(amp['passed_downloads'], total)} "
        f"of downloads), no fallback {amp['no_fallback']} "
        f"({pct(amp['no_fallback_downloads'], total)}); the fp32 step (optimizer): passed "
        f"{fp32['passed']} ({pct(fp32['passed_downloads'], total)}), no fallback "
        f"{fp32['no_fallback']} ({pct(fp32['no_fallback_downloads'], total)})"
    )
    lora = f["lora"]
    print(
        f"  LoRA: ran on {lora['ran']} models ({dl(lora['ran_downloads'])}, "
        f"{pct(lora['ran_downloads'], total)} of downloads), passed {lora['passed']} "
        f"({pct(lora['passed_downloads'], total)} of all downloads, "
        f"{pct(lora['passed_downloads'], lora['ran_downloads'])} of theirs); skipped: "
        + ", ".join(f"{r['reason']} {r['models']}" for r in lora["skipped_by_reason"])
    )
    calls = f["step_op_calls"]
    if calls:
        print(
            "  device op calls in the optimizer's part of one step: "
            + "; ".join(
                f"{stage} median {c['median']:.0f} (min {c['min']}, max {c['max']}, "
                f"{c['models']} models)"
                for stage, c in sorted(calls.items())
            )
        )
    ops = f["optimizer_ops"]
    print(f"  optimizer ops that fall back (ranked by downloads): {len(ops)}")
    for o in ops[:20]:
        print(
            f"    {o['op']:<45} default {o['models']:>4} models {dl(o['downloads']):>8}; fused "
            f"{o['fused_models']:>4}; fused removes it for {o['removed_by_fused']} "
            f"({dl(o['removed_by_fused_downloads'])})"
        )


def cause(rows: dict[str, dict[str, Any]], stage: str, profile: Any) -> str:
    """What the device data says of a training stage that did not pass on neuron: the stage
    that stopped it, its status, and the op it names with that op's class under the profile
    (or the error type)."""
    from ground.schema import Stage
    from runners.stages import stage_needs

    row = rows[stage]
    if row["status"] == "not_run":
        for need in stage_needs()[Stage(stage)]:
            before = rows.get(need.value)
            if before and before["status"] != "pass":
                return cause(rows, need.value, profile)
        return f"{stage} not_run"
    op = row["failing_op"]
    where = f"{stage} {row['status']}"
    if op:
        return f"{where} at {op} ({profile.classify(op).value} under the profile)"
    message = (row["error_message"] or "").splitlines()[0][:90]
    return f"{where}: {row['error_type']}: {message}"


def print_cpu_vs_neuron(store: Any, cpu_run: str, neuron_run: str) -> None:
    from runners.stages import group_stages

    TRAINING_STAGES = group_stages("training")
    from runners.devices.neuron.profiles import load_profile

    profile = load_profile(None)
    cpu, neuron = last_attempts(store, cpu_run), last_attempts(store, neuron_run)
    print("\n== passes a training stage on cpu, not on neuron, by what stopped it on neuron")
    for stage in (s.value for s in TRAINING_STAGES):
        groups: dict[str, list[str]] = {}
        for model, by_stage in cpu.items():
            on_cpu = by_stage.get(stage)
            on_neuron = neuron.get(model, {}).get(stage)
            if not on_cpu or on_cpu["status"] != "pass" or not on_neuron:
                continue
            if on_neuron["status"] != "pass":
                groups.setdefault(cause(neuron[model], stage, profile), []).append(model)
        total = sum(len(m) for m in groups.values())
        print(f"  {stage}: {total} models")
        for why, models in sorted(groups.items(), key=lambda g: (-len(g[1]), g[0])):
            print(f"    {len(models):>4}  {why}")
            print(f"          e.g. {', '.join(models[:3])}")


def print_cost(store: Any, run_id: str) -> None:
    from runners.stages import default_stages, group_stages

    DEFAULT_STAGES, TRAINING_STAGES = default_stages(), group_stages("training")

    rows = [
        r
        for r in store.read("results", run_id).to_pylist()
        if r["dedup_of"] is None and r["duration_s"] is not None and r["status"] != "skip"
    ]
    per_model: dict[str, dict[str, float]] = {}
    for r in rows:
        per_model.setdefault(r["model_id"], {})[r["stage"]] = r["duration_s"]
    print(f"\n== cost per unique tiny model, run {run_id} (seconds of one thread; median)")
    for group, stages in (("the five", DEFAULT_STAGES), ("training", TRAINING_STAGES)):
        for stage in stages:
            secs = [m[stage.value] for m in per_model.values() if stage.value in m]
            if secs:
                print(
                    f"  {stage.value:<16} {len(secs):>5} models  median {statistics.median(secs):7.3f}"
                    f"  total {sum(secs):8.1f}"
                )
        sums = [sum(m.get(s.value, 0.0) for s in stages) for m in per_model.values()]
        sums = [s for s in sums if s > 0]
        if sums:
            print(
                f"  {group} stages together: median {statistics.median(sums):.3f} s per model, "
                f"total {sum(sums):.0f} s over {len(sums)} models"
            )
    both = [
        (
            sum(m.get(s.value, 0.0) for s in TRAINING_STAGES),
            sum(m.get(s.value, 0.0) for s in DEFAULT_STAGES),
        )
        for m in per_model.values()
    ]
    ratios = [t / d for t, d in both if t > 0 and d > 0]
    if ratios:
        print(
            f"  training / the five, per model: median x{statistics.median(ratios):.2f} "
            f"({len(ratios)} models that ran both)"
        )


def main() -> int:
    from reports.query import StoreQuery
    from reports.store import Store

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=50)
    parser.add_argument("--store", required=True, help="results folder (kept: a rerun resumes)")
    parser.add_argument("--devices", default="neuron,cpu")
    parser.add_argument("--neuron-stages", default="all")
    parser.add_argument("--cpu-stages", default="training")
    parser.add_argument("--num-cpus", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()

    runs: dict[str, tuple[str, float]] = {}
    for device in args.devices.split(","):
        stages = args.neuron_stages if device == "neuron" else args.cpu_stages
        runs[device] = sweep(args, device, stages)
    store = Store(args.store)
    q = StoreQuery(store)
    print(f"training stages on the bundled catalog's top {args.top}, store {args.store}")
    for run_id, wall in runs.values():
        print_funnel(q, run_id, wall)
        print_fine_tune(q, run_id)
    if "cpu" in runs and "neuron" in runs:
        print_cpu_vs_neuron(store, runs["cpu"][0], runs["neuron"][0])
    for run_id, _ in runs.values():
        print_cost(store, run_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
