"""Does Hugging Face's own training stack run on the device? The hf_training stages, measured.

Sweeps the bundled catalog's top N on the emulated neuron device and on the CPU with the same
stages (by default the hf_training group plus optimizer and lora, to price the group against
them), through the real driver, in one run of this script, then prints:
- per device, the share of models and of downloads passing each hf_training stage;
- every model that passes a stage on the CPU and not on neuron, with its evidence: the failing
  op or collective (the device), or the library frame of its failure (a library's device path:
  `library_frame`), and the error;
- the cost per unique tiny model (rows of models that ran, not dedup copies): median seconds
  per stage, and the group against optimizer + lora.

    python bench/hf_training.py --top 20 --store /tmp/hf-bench [--dtype bf16]
    python bench/hf_training.py --top 20 --store /tmp/hf-bench --stages trainer,sft,accelerate_ddp,optimizer,lora

The same command resumes its runs (`hf-<device>-<dtype>-<N>`) where they stopped.
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

DEFAULT_STAGES = "hf_training,optimizer,lora"


def sweep(args: argparse.Namespace, device: str) -> tuple[str, float]:
    from runners.settings import ModelSettings
    from sweep.commands.options import stage_list

    task = ModelSettings(
        device=device, dtype=args.dtype, stages=tuple(stage_list(args.stages)),
        timeout_s=args.timeout,
    )  # fmt: skip
    return resumable_sweep(
        store=args.store, run_id=f"hf-{device}-{args.dtype}-{args.top}", top=args.top,
        num_cpus=args.num_cpus, task=task,
    )  # fmt: skip


def hf_stages(args: argparse.Namespace) -> list[str]:
    from runners.stages import group_stages
    from sweep.commands.options import stage_list

    wanted = {s.value for s in stage_list(args.stages)}
    return [s.value for s in group_stages("hf_training") if s.value in wanted]


def print_shares(store: Any, run_id: str, wall: float, stages: list[str]) -> None:
    rows = last_attempts(store, run_id)
    downloads = {
        r["model_id"]: r["downloads"] or 0 for r in store.read("results", run_id).to_pylist()
    }
    total = sum(downloads.values())
    took = f"{wall / 60:.1f} min this invocation" if wall else "from the store"
    print(f"\n== run {run_id}: {len(rows)} models, {dl(total)} downloads ({took})")
    print(f"  {'stage':<18} {'pass':>5} {'% dl':>7} {'fail':>5} {'skip':>5} {'not_run':>8}")
    for stage in stages:
        status = {m: s[stage]["status"] for m, s in rows.items() if stage in s}
        passed = [m for m, st in status.items() if st == "pass"]
        count = {st: sum(1 for v in status.values() if v == st) for st in ("skip", "not_run")}
        failed = len(status) - len(passed) - sum(count.values())
        print(
            f"  {stage:<18} {len(passed):>5} {pct(sum(downloads[m] for m in passed), total):>7}"
            f" {failed:>5} {count['skip']:>5} {count['not_run']:>8}"
        )


def evidence(row: dict[str, Any]) -> str:
    """What a failure rests on: its op or collective (the device), else the library frame."""
    message = (row.get("error_message") or "").splitlines()[0][:110] if row else ""
    if row.get("failing_op"):
        where = f"device: {row['failing_op']}"
    elif row.get("library_frame"):
        where = f"library: {row['library_frame']}"
    else:
        where = "model or library code (no frame of a Hugging Face library)"
    return f"{row['status']}; {where}; {row.get('error_type')}: {message}"


def print_cpu_vs_neuron(store: Any, cpu_run: str, neuron_run: str, stages: list[str]) -> None:
    cpu, neuron = last_attempts(store, cpu_run), last_attempts(store, neuron_run)
    print("\n== passes on cpu, not on neuron, with its evidence")
    for stage in stages:
        groups: dict[str, list[str]] = {}
        for model, by_stage in cpu.items():
            on_cpu, on_neuron = by_stage.get(stage), neuron.get(model, {}).get(stage)
            if on_cpu and on_neuron and on_cpu["status"] == "pass" != on_neuron["status"]:
                groups.setdefault(evidence(on_neuron), []).append(model)
        print(f"  {stage}: {sum(len(m) for m in groups.values())} models")
        for why, models in sorted(groups.items(), key=lambda g: (-len(g[1]), g[0])):
            print(f"    {len(models):>4}  {why}")
            print(f"          e.g. {', '.join(models[:3])}")


def print_cost(store: Any, run_id: str, stages: list[str]) -> None:
    rows = [
        r
        for r in store.read("results", run_id).to_pylist()
        if r["dedup_of"] is None and r["duration_s"] is not None and r["status"] != "skip"
    ]
    per_model: dict[str, dict[str, float]] = {}
    for r in rows:
        per_model.setdefault(r["model_id"], {})[r["stage"]] = r["duration_s"]
    print(f"\n== cost per unique tiny model, run {run_id} (seconds; median, total)")
    for stage in [*stages, "optimizer", "lora"]:
        secs = [m[stage] for m in per_model.values() if stage in m]
        if secs:
            print(
                f"  {stage:<18} {len(secs):>4} models  median {statistics.median(secs):8.2f}"
                f"  total {sum(secs):8.1f}"
            )
    ratios = []
    for m in per_model.values():
        group = sum(m.get(s, 0.0) for s in stages)
        base = m.get("optimizer", 0.0) + m.get("lora", 0.0)
        if group > 0 and base > 0:
            ratios.append(group / base)
    if ratios:
        print(
            f"  hf_training / (optimizer + lora), per model: median x{statistics.median(ratios):.1f}"
            f" ({len(ratios)} models that ran both)"
        )


def main() -> int:
    from reports.store import Store

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--store", required=True, help="results folder (kept: a rerun resumes)")
    parser.add_argument("--devices", default="neuron,cpu")
    parser.add_argument("--stages", default=DEFAULT_STAGES)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--num-cpus", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()

    runs = {device: sweep(args, device) for device in args.devices.split(",")}
    store = Store(args.store)
    stages = hf_stages(args)
    print(f"hf_training stages on the bundled catalog's top {args.top}, {args.dtype}, {args.store}")
    for run_id, wall in runs.values():
        print_shares(store, run_id, wall, stages)
    if "cpu" in runs and "neuron" in runs:
        print_cpu_vs_neuron(store, runs["cpu"][0], runs["neuron"][0], stages)
    for run_id, _ in runs.values():
        print_cost(store, run_id, stages)
    return 0


if __name__ == "__main__":
    sys.exit(main())
