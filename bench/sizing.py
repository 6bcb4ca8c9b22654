"""At full size and the shape stages, measured (docs/sizing.md, docs/stages-shapes.md).

    python bench/sizing.py time --top 1000 [--sweep-wall 2402 --workers 2]
    python bench/sizing.py ratio --store DIR --run RUN
    python bench/sizing.py shapes --store DIR --run RUN

- `time`: plans the catalog's top N offline (resolve, shrink, size: what a plan task does) in
  this process and prints what sizing adds per catalog entry (median, p90, max; a config met
  again costs a cache look-up), per distinct config built, its resident memory, its share of
  planning, and, given a sweep's wall time and workers, its share of that sweep's core time;
  then the share of the top N's downloads per count of cores needed (serve, full fine-tune,
  LoRA) on each Trainium hardware type.
- `ratio`: for each unique tiny model of a run (its lead's rows), the tiny model's own sizing
  (its meta build) against the device peak its stages measured: forward against weights and
  the KV cache of its inputs, backward against weights, gradients and the activation headroom
  of the formula; median and spread of measured / predicted.
- `shapes`: the shape stages of a run by downloads: compiled forwards that recompile per input
  shape (`static`), reuse a graph, break at a data-dependent op, are refused; models that
  generate compiled with 0 recompiles after warm-up, and whose tokens equal eager decoding's.
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
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pct(part: float, whole: float) -> str:
    return "-" if not whole else f"{100.0 * part / whole:.1f}%"


def rss() -> int:
    """This process's resident memory (bytes), from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


# ---- time ------------------------------------------------------------------------------------


def measure_time(args: argparse.Namespace) -> None:
    from model_configs.catalog import load_catalog
    from runners.run_model import quiet_libraries
    from runners.stages import default_stages
    from sizing import cores, hardware
    from sizing import measure as sizing
    from sweep import plan

    quiet_libraries()
    entries = load_catalog(args.catalog).top(args.top)
    calls: list[dict[str, Any]] = []
    real = sizing.size_model

    def timed(resolved: Any, spec: Any) -> Any:
        key = (spec.library, spec.architecture, spec.generative, resolved.hash)
        hit = key in sizing._CACHE
        before, start = rss(), time.perf_counter()
        size = real(resolved, spec)
        calls.append(
            {
                "s": time.perf_counter() - start,
                "hit": hit,
                "rss_delta": rss() - before,
                "size": size,
                "model_id": resolved.model_id,
            }
        )
        return size

    sizing.size_model = timed  # plan_entry imports it by name at each call
    planned = []
    start_rss, start = rss(), time.perf_counter()
    for entry in entries:
        planned.append(plan.plan_entry(entry, list(default_stages())))
    planning_s = time.perf_counter() - start
    sizing.size_model = real
    per_entry = {c["model_id"]: c["s"] for c in calls}
    all_entries = [per_entry.get(e.model_id, 0.0) for e in entries]
    built = [c for c in calls if not c["hit"]]
    total = sum(c["s"] for c in calls)
    statuses: dict[str, int] = {}
    for c in calls:
        statuses[c["size"].status] = statuses.get(c["size"].status, 0) + 1
    print(f"== sizing time: the bundled top {len(entries)}, planned offline in one process ==")
    print(f"entries {len(entries)}; sized {len(calls)} (a tiny spec planned); distinct full-size "
          f"configs built {len(built)}; cache hits {len(calls) - len(built)}")  # fmt: skip
    print(f"statuses: {', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))}")
    print(
        f"per catalog entry (0 where not sized): median {statistics.median(all_entries) * 1e3:.1f}"
        f" ms, p90 {quantile(all_entries, 0.9) * 1e3:.1f} ms, max {max(all_entries):.2f} s"
    )
    if built:
        b = [c["s"] for c in built]
        slowest = max(built, key=lambda c: c["s"])
        print(
            f"per distinct config built: median {statistics.median(b) * 1e3:.1f} ms, p90 "
            f"{quantile(b, 0.9) * 1e3:.1f} ms, max {max(b):.2f} s ({slowest['model_id']}, "
            f"{slowest['size'].parameters or 0:,} parameters)"
        )
    print(
        f"sizing in all {total:.1f} s of {planning_s:.1f} s planning ({pct(total, planning_s)}); "
        f"{total / len(entries) * 1e3:.1f} ms per catalog entry"
    )
    print(
        f"resident memory: largest growth over one sizing {max(c['rss_delta'] for c in calls) / 2**20:.1f}"
        f" MiB; the process grew {(rss() - start_rss) / 2**20:.0f} MiB over the whole planning"
    )
    if args.sweep_wall:
        core_s = args.sweep_wall * args.workers
        print(
            f"against a sweep of {args.sweep_wall:.0f} s wall at {args.workers} workers "
            f"({core_s:.0f} core-seconds): sizing is {pct(total, core_s)} of its core time, "
            f"{pct(total, args.sweep_wall)} of its wall time if it ran alone"
        )
    downloads = {e.model_id: e.downloads or 0 for e in entries}
    total_dl = sum(downloads.values())
    ok = [(p, p.size) for p in planned if p.size is not None and p.size.ok]
    from reports.coverage import DEFAULT_CONFIG_SOURCES

    default_dl = sum(
        downloads[p.entry.model_id] for p, _ in ok if p.config_source in DEFAULT_CONFIG_SOURCES
    )
    print()
    print(
        f"== cores needed, by downloads (the top {len(entries)}: {len(ok)} models sized, "
        f"{pct(sum(downloads[p.entry.model_id] for p, _ in ok), total_dl)} of downloads; "
        f"{pct(default_dl, total_dl)} of downloads sized from a library's default config) =="
    )
    print(f"serving at bf16, context {cores.SERVE_CONTEXT}, batch {cores.SERVE_BATCH}")
    for hw in hardware.hardware_for("neuron"):
        buckets: dict[str, dict[str, int]] = {}
        for p, size in ok:
            need = cores.cores_needed(size, hw)
            for what in ("serve", "finetune", "lora"):
                cores = getattr(need, f"{what}_cores")
                label = "none fits" if cores is None else str(cores)
                buckets.setdefault(label, {}).setdefault(what, 0)
                buckets[label][what] += downloads[p.entry.model_id]
        order = sorted(buckets, key=lambda k: (k == "none fits", int(k) if k.isdigit() else 0))
        print(f"{hw.name} ({hw.core_memory_bytes / 2**30:.0f} GiB per core, {hw.cores_per_chip} "
              f"per chip, {hw.cores_per_instance} per {hw.instance}):")  # fmt: skip
        print(
            f"  {'cores':>10} {'serve':>8} {'fine-tune':>10} {'LoRA':>8}   (% of the top's downloads)"
        )
        for label in order:
            row = buckets[label]
            print(
                f"  {label:>10} {pct(row.get('serve', 0), total_dl):>8} "
                f"{pct(row.get('finetune', 0), total_dl):>10} {pct(row.get('lora', 0), total_dl):>8}"
            )


# ---- ratio -----------------------------------------------------------------------------------


def measure_ratio(args: argparse.Namespace) -> None:
    from model_configs import build
    from model_configs.catalog import load_catalog
    from reports.store import Store
    from runners.run_model import quiet_libraries
    from runners.stages import default_stages
    from sizing import cores
    from sizing.measure import _measure
    from sweep import plan

    quiet_libraries()
    rows = Store(args.store).read("results", args.run).to_pylist()
    leads = {
        r["model_id"]: r for r in rows if r["dedup_of"] is None and r["stage"] == "load"
        and r["status"] == "pass"
    }  # fmt: skip
    peaks = {(r["model_id"], r["stage"]): r["peak_memory_bytes"] for r in rows}
    catalog = load_catalog(args.catalog)
    widths = {"fp32": 4, "bf16": 2, "fp16": 2}
    fwd: list[float] = []
    bwd: list[float] = []
    missed = 0
    for model_id, row in sorted(leads.items(), key=lambda kv: kv[1]["rank"] or 0):
        entry = catalog.get(model_id)
        if entry is None:
            continue
        planned = plan.plan_entry(entry, list(default_stages()))
        if planned.spec is None or planned.spec.hash != row["shrunk_config_hash"]:
            missed += 1
            continue
        try:
            tiny = _measure(build.build_on_meta(planned.spec), planned.spec, 0.0)
        except Exception:
            missed += 1
            continue
        width = widths[row["dtype"]]
        weights = (tiny.float_elements or 0) * width + (tiny.other_bytes or 0)
        kv = (tiny.kv_elements_per_token or 0) + (tiny.kv_window_elements_per_token or 0)
        from model_configs.tiny_inputs import BATCH, SEQ

        forward = weights + kv * width * SEQ * BATCH
        backward = 2 * weights + cores.ACTIVATION_HEADROOM * weights
        for stage, predicted, out in (("forward", forward, fwd), ("backward", backward, bwd)):
            measured = peaks.get((model_id, stage))
            if measured and predicted:
                out.append(measured / predicted)
    print(f"== predicted vs measured device peak, run {args.run} ({len(leads)} unique tiny models "
          f"that loaded; {missed} not re-planned to the same tiny config) ==")  # fmt: skip
    for label, ratios in (("forward (weights + KV cache)", fwd),
                          ("backward (weights + gradients + headroom)", bwd)):  # fmt: skip
        if not ratios:
            print(f"{label}: no rows")
            continue
        print(
            f"{label}: {len(ratios)} models; measured / predicted median {statistics.median(ratios):.2f}, "
            f"p10 {quantile(ratios, 0.1):.2f}, p90 {quantile(ratios, 0.9):.2f}, min {min(ratios):.2f}, "
            f"max {max(ratios):.2f}; within 0.5-2x: {pct(sum(0.5 <= r <= 2 for r in ratios), len(ratios))}"
        )


# ---- shapes ----------------------------------------------------------------------------------


def measure_shapes(args: argparse.Namespace) -> None:
    from reports.store import Store

    rows = Store(args.store).read("results", args.run).to_pylist()
    models = {r["model_id"]: r["downloads"] or 0 for r in rows}
    total = sum(models.values())
    by = {(r["model_id"], r["stage"]): r for r in rows}
    print(f"== shape stages, run {args.run}: {len(models)} models, {total / 1e6:.1f}M downloads ==")
    for stage in ("shapes", "generate_compiled"):
        counts: dict[str, list[int]] = {}
        for model, dl in models.items():
            r = by.get((model, stage))
            if r is None:
                key = "no row"
            elif stage == "shapes" and r["status"] == "pass":
                key = f"pass: {r['shape_verdict']}"
            elif stage == "shapes" and r["shape_verdict"]:
                key = f"{r['status']}: {r['shape_verdict']}"
            elif stage == "generate_compiled" and r["status"] == "pass":
                key = f"pass: {r['recompile_count']} recompiles after warm-up"
            else:
                key = r["status"] + (f" ({r['reason']})" if r["reason"] else "")
            c = counts.setdefault(key, [0, 0])
            c[0] += 1
            c[1] += dl
        print(f"{stage}:")
        for key, (n, dl) in sorted(counts.items(), key=lambda kv: -kv[1][1]):
            print(f"  {key:<48} {n:>5} models {pct(dl, total):>7} of downloads")
    static = sum(dl for m, dl in models.items() if (by.get((m, "shapes")) or {}).get("shape_verdict") == "static"
                 and by[(m, "shapes")]["status"] == "pass")  # fmt: skip
    zero = sum(dl for m, dl in models.items() if (by.get((m, "generate_compiled")) or {}).get("status") == "pass"
               and by[(m, "generate_compiled")]["recompile_count"] == 0)  # fmt: skip
    print(f"compiled forward recompiles per input shape: {pct(static, total)} of downloads")
    print(f"generate compiled with 0 recompiles after warm-up: {pct(zero, total)} of downloads")
    reasons: dict[str, int] = {}
    for r in rows:
        if r["stage"] == "shapes":
            for reason in r["recompile_reasons"] or []:
                kind = reason.split(" at index")[0].split(". expected")[0]
                reasons[kind] = reasons.get(kind, 0) + 1
    if reasons:
        print("recompile reasons (shapes), most frequent first:")
        for kind, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:8]:
            print(f"  {n:>5}  {kind}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    t = sub.add_parser("time")
    t.add_argument("--top", type=int, default=1000)
    t.add_argument("--catalog", default="bundled")
    t.add_argument("--sweep-wall", type=float, help="a sweep's wall seconds, to compare with")
    t.add_argument("--workers", type=int, default=2)
    for name in ("ratio", "shapes"):
        s = sub.add_parser(name)
        s.add_argument("--store", required=True)
        s.add_argument("--run", required=True)
        s.add_argument("--catalog", default="bundled")
    args = p.parse_args()
    {"time": measure_time, "ratio": measure_ratio, "shapes": measure_shapes}[args.what](args)


if __name__ == "__main__":
    main()
