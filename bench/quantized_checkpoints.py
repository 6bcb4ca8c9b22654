"""The quantized checkpoints of the bundled top 1,000, by method: how many, their share of the
catalog's downloads, how many run (and which stages pass, on each device) and how many are
skipped, after this branch and before it (a run made by code that ran them as plain models).

The method of each repo is `model_configs.quantization`'s, from the catalog's tags (offline
the bundled catalog has no configs). "After" sweeps those repos with this checkout's `hfsweep
run` on each device; "before" reads runs of the same repos made by another checkout (pass its
store and run ids), or sweeps them with another checkout's `hfsweep` (`--before-hfsweep`).

    flock /tmp/hfsweep-cpu.lock .venv/bin/python bench/quantized_checkpoints.py \\
        --store /tmp/quant-bench --devices neuron,cpu --before-hfsweep /work/main/.venv/bin/hfsweep
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STAGES = ("load", "forward", "backward", "compile", "generate")


def quantized_entries(top: int) -> tuple[list[Any], dict[str, str], int]:
    from model_configs import quantization
    from model_configs.catalog import load_catalog

    entries = load_catalog("bundled").top(top)
    total = sum(e.downloads or 0 for e in entries)
    method = {e.model_id: quantization.method_of(None, e.tags) for e in entries}
    chosen = [e for e in entries if method[e.model_id]]
    return chosen, {k: v for k, v in method.items() if v}, total


def sweep(
    hfsweep: str, ids: list[str], device: str, store: Path, run_id: str, workers: int
) -> float:
    """One `hfsweep run` over `ids`; its wall seconds (a finished run is not run again)."""
    start = time.perf_counter()
    command = [
        hfsweep, "run", "--models", ",".join(ids), "--device", device, "--store", str(store),
        "--run-id", run_id, "--num-cpus", str(workers), "--no-report",
    ]  # fmt: skip
    if device == "cpu":
        command += ["--compile-backend", "aot_eager"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    # run from the checkout the hfsweep belongs to (CHECKOUT/.venv/bin/hfsweep): Ray puts the
    # driver's working directory on its workers' sys.path, so another cwd would plan with the
    # code found there
    checkout = Path(hfsweep).absolute().parent.parent.parent
    done = subprocess.run(
        command,
        env=env,
        cwd=checkout if (checkout / "sweep").is_dir() else None,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if done.returncode not in (0, 1):
        sys.stderr.write(done.stderr.decode(errors="replace")[-4000:])
        raise SystemExit(f"hfsweep run exited {done.returncode} ({device}, {run_id})")
    return time.perf_counter() - start


def outcomes(store: Path, run_id: str) -> dict[str, dict[str, Any]]:
    from reports.query import StoreQuery

    q = StoreQuery(str(store))
    q.ensure_summaries([run_id])
    stage_cols = ", ".join(f"s_{s}" for s in STAGES)
    rows = q.fetch(
        f"SELECT model_id, outcome, skip_reason, {stage_cols} FROM model_runs WHERE run_id = $run",
        {"run": run_id},
    )
    return {r["model_id"]: r for r in rows}


def table(
    label: str,
    entries: list[Any],
    method: dict[str, str],
    total: int,
    runs: dict[str, dict[str, dict[str, Any]]],
) -> None:
    """Per method: models, share of downloads, then per device: run / skipped and the models
    (and shares of downloads) passing each stage."""
    by_method: dict[str, list[Any]] = defaultdict(list)
    for e in entries:
        by_method[method[e.model_id]].append(e)
    print(f"\n== {label} ==")
    for device, rows in runs.items():
        print(f"\n-- device {device} --")
        header = f"{'method':<20}{'models':>7}{'% dl':>7}{'run':>5}{'skip':>6}"
        header += "".join(f"{s[:4]:>6}" for s in STAGES) + f"{'% dl all pass':>15}  skip reasons"
        print(header)
        for name in sorted(by_method, key=lambda m: -sum(e.downloads or 0 for e in by_method[m])):
            group = by_method[name]
            dl = sum(e.downloads or 0 for e in group)
            got = [rows.get(e.model_id) for e in group]
            run = sum(1 for r in got if r and r["outcome"] != "skipped")
            skipped = sum(1 for r in got if r and r["outcome"] == "skipped")
            passes = [sum(1 for r in got if r and r[f"s_{s}"] == "pass") for s in STAGES]
            all_pass = sum(
                e.downloads or 0
                for e, r in zip(group, got, strict=True)
                if r and r["outcome"] == "passed"
            )
            reasons = sorted({r["skip_reason"] for r in got if r and r["skip_reason"]})
            print(
                f"{name:<20}{len(group):>7}{100 * dl / total:>6.2f}%{run:>5}{skipped:>6}"
                + "".join(f"{n:>6}" for n in passes)
                + f"{100 * all_pass / total:>14.2f}%  {', '.join(reasons)}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=1000)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--devices", default="neuron,cpu")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--hfsweep", default=str(ROOT / ".venv" / "bin" / "hfsweep"))
    parser.add_argument("--before-hfsweep", help="another checkout's hfsweep (the baseline)")
    parser.add_argument("--before-store", type=Path, help="a store holding baseline runs")
    parser.add_argument("--run-prefix", default="quant")
    parser.add_argument("--models", help="only these of the quantized repos (a quick check)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    entries, method, total = quantized_entries(args.top)
    if args.models:
        wanted = set(args.models.split(","))
        entries = [e for e in entries if e.model_id in wanted]
    ids = [e.model_id for e in entries]
    dl = sum(e.downloads or 0 for e in entries)
    print(
        f"bundled top {args.top}: {len(entries)} repos tagged quantized, "
        f"{100 * dl / total:.2f}% of the catalog's downloads (30-day counts)"
    )
    devices = [d for d in args.devices.split(",") if d]
    before_store = args.before_store or args.store
    before: dict[str, dict[str, dict[str, Any]]] = {}
    after: dict[str, dict[str, dict[str, Any]]] = {}
    for device in devices:
        if args.before_hfsweep:
            run_id = f"{args.run_prefix}-before-{device}"
            seconds = sweep(args.before_hfsweep, ids, device, before_store, run_id, args.workers)
            print(f"before, {device}: {seconds:.0f} s", file=sys.stderr)
        if args.before_hfsweep or args.before_store:
            before[device] = outcomes(before_store, f"{args.run_prefix}-before-{device}")
        run_id = f"{args.run_prefix}-after-{device}"
        seconds = sweep(args.hfsweep, ids, device, args.store, run_id, args.workers)
        print(f"after, {device}: {seconds:.0f} s", file=sys.stderr)
        after[device] = outcomes(args.store, run_id)
    if before:
        table("before: quantized repos run as plain architectures", entries, method, total, before)
    table("after: quantized checkpoints as what they are", entries, method, total, after)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
