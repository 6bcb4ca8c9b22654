"""Result reuse by content (`hfsweep run --reuse`), measured on the bundled catalog: what a night
costs when nothing changed, when a setting in the key changed, and when one model's config did.

Each run is the real command (`hfsweep run --catalog ... --device neuron`, embedded Ray,
`--num-cpus --workers`, `--no-report`) in a process of its own, timed from outside, into one
store:
  1 full        the top N, nothing to reuse
  2 no change   the same command with `--reuse latest`: wall time against run 1, and every row
                compared with run 1's (equal but for run_id, finished_at and reused_from)
  3 profile     the top `--profile-top` with `--profile torch-mlir --reuse all`: a setting in the
                key, so nothing may be reused
  4 one config  a copy of the top N's catalog in which one model (the first transformers model
                whose default config has a layer-norm epsilon) has a config file of its own,
                its default config with that epsilon changed, `--reuse <run 1>`: only its task
                may run
  5, 6 no change again  run 2 again (`--reuse <run 1>`), through Ray and then with `--local`
                back to back: Ray's share of a night with nothing to run
For each run: wall time, models, unique tiny models run, models reused (and from which run),
entries whose plan was taken from an earlier run, and whether Ray was started.

    python bench/reuse_runs.py --top 100 --profile-top 30
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

COPY_CHANGES = {"run_id", "finished_at", "reused_from"}


LINES: dict[str, str] = {}  # run id -> the last line `hfsweep run` printed (what it did)


def hfsweep(store: Path, run_id: str, *args: str) -> float:
    """Run `hfsweep run` to the end; its wall time as seen from outside (start-up included)."""
    cmd = [sys.executable, "-m", "sweep", "run", "--store", str(store), "--run-id", run_id]
    start = time.perf_counter()
    proc = subprocess.run(
        [*cmd, "--no-report", *args], cwd=ROOT, capture_output=True, text=True, timeout=24 * 3600
    )
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"run {run_id} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    LINES[run_id] = proc.stderr.strip().splitlines()[-1]
    print(f"  {run_id}: {LINES[run_id][:400]}", flush=True)
    return wall


def what_ran(store: Path, run_id: str) -> dict[str, Any]:
    from reports.store import Store

    rows = Store(store).read("results", run_id).to_pylist()
    ran = {
        r["task_key"]
        for r in rows
        if r["reused_from"] is None and r["dedup_of"] is None and r["task_key"]
    }
    reused = {r["model_id"]: r["reused_from"] for r in rows if r["reused_from"]}
    return {
        "rows": rows,
        "models": len({r["model_id"] for r in rows}),
        "ran": len(ran),
        "ran_models": sorted(  # the leads of the tasks that ran (a skip has no task)
            {
                r["model_id"]
                for r in rows
                if r["reused_from"] is None and r["dedup_of"] is None and r["task_key"]
            }
        ),
        "reused": len(reused),
        "reused_from": dict(Counter(reused.values())),
    }


def compare(a: list[dict], b: list[dict], skip: set[str] = frozenset()) -> tuple[int, int, Counter]:
    """(rows compared, rows that differ in more than a copy changes, the columns that differ)."""
    by_a = {(r["model_id"], r["stage"]): r for r in a if r["model_id"] not in skip}
    by_b = {(r["model_id"], r["stage"]): r for r in b if r["model_id"] not in skip}
    assert by_a.keys() == by_b.keys(), "the two runs have different models or stages"
    columns: Counter = Counter()
    bad = 0
    for k, row in by_a.items():
        differ = {c for c in row if row[c] != by_b[k][c]} - COPY_CHANGES
        columns.update(differ)
        bad += bool(differ)
    return len(by_a), bad, columns


def changed_catalog(top: int, work: Path) -> tuple[Path, str]:
    """The top `top` of the bundled catalog as a file, one model with a config of its own."""
    from transformers import AutoConfig

    from model_configs.catalog import load_catalog, write_catalog

    entries = list(load_catalog("bundled").top(top))
    path = work / f"top{top}-one-changed.csv"
    write_catalog(entries, path)
    for e in entries:
        if e.library != "transformers" or not e.model_type_hint:
            continue
        try:
            config = AutoConfig.for_model(e.model_type_hint).to_dict()
        except Exception:
            continue
        eps = next((k for k in ("layer_norm_eps", "rms_norm_eps") if k in config), None)
        if eps is None:
            continue
        config[eps] = config[eps] * 10
        folder = path.with_suffix("") / e.model_id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, default=str))
        return path, e.model_id
    raise SystemExit("no model in the top to change")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=100)
    parser.add_argument("--profile-top", type=int, default=30)
    parser.add_argument("--stages", default="default")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work", default="/tmp/hfsweep-reuse-runs")
    parser.add_argument(
        "--store",
        help="an earlier run's store: the runs it has finished are not run again (their wall "
        "time is not known: '-')",
    )
    args = parser.parse_args()
    from sweep_throughput import machine_efficiency

    from reports.store import Store

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    store = Path(args.store) if args.store else work / f"store-{int(time.time())}"
    common = ["--device", "neuron", "--stages", args.stages, "--num-cpus", str(args.workers)]
    print(
        f"bundled top {args.top}, stages {args.stages}, emulated neuron, {args.workers} workers; "
        f"two CPU-bound processes got {100 * machine_efficiency(2):.0f}% of 2 cores at the start",
        flush=True,
    )
    walls: dict[str, float | None] = {}
    ids: dict[str, str] = {}  # run -> its run id in the store
    stamp = int(time.time())

    def step(name: str, *run_args: str, always: bool = False) -> None:
        ids[name] = f"{name}-{stamp}" if always else name
        done = store.exists() and (Store(store).run(ids[name]) or {}).get("status") == "finished"
        walls[name] = None if done else hfsweep(store, ids[name], *run_args)

    bundled = ["--catalog", "bundled", "--top", str(args.top), *common]
    step("full", *bundled)
    step("no-change", *bundled, "--reuse", "latest")
    profile = ["--catalog", "bundled", "--top", str(args.profile_top), *common]
    step("profile", *profile, "--profile", "torch-mlir", "--reuse", "all")
    catalog, changed = changed_catalog(args.top, work)
    one = ["--catalog", str(catalog), "--top", str(args.top), *common]
    step("one-config", *one, "--reuse", "full")
    # the no-change night again through Ray and then without it (tasks in children of the
    # driver), back to back: Ray's share of it
    step("no-change-ray", *bundled, "--reuse", "full", always=True)
    step("no-change-local", *bundled, "--local", "--reuse", "full", always=True)

    runs = {name: what_ran(store, ids[name]) for name in walls}
    print(
        f"\n{'run':<16}{'wall s':>9}{'models':>8}{'unique run':>12}{'reused':>8}"
        f"{'plans reused':>14}{'Ray':>6}  reused from"
    )
    for name, wall in walls.items():
        r = runs[name]
        line = LINES.get(ids[name], "")
        plans = re.search(r"(\d+) plans reused", line)
        ray = "-" if not line else ("no" if "no Ray started" in line else "yes")
        print(
            f"{name:<16}{'-' if wall is None else f'{wall:.1f}':>9}{r['models']:>8}"
            f"{r['ran']:>12}{r['reused']:>8}{plans.group(1) if plans else '-':>14}{ray:>6}"
            f"  {r['reused_from'] or '-'}"
        )
    full = walls["full"]
    for name in ("no-change", "no-change-ray", "no-change-local"):
        wall = walls[name]
        if full and wall:
            print(
                f"{name} / full wall time: {100 * wall / full:.1f}% ({wall:.1f} s / {full:.1f} s)"
            )
    n, bad, cols = compare(runs["full"]["rows"], runs["no-change"]["rows"])
    print(
        f"no-change rows vs full: {n} compared, {bad} differ beyond {sorted(COPY_CHANGES)} {dict(cols)}"
    )
    print(
        f"profile (top {args.profile_top}, --reuse all): {runs['profile']['ran']} unique run, "
        f"{runs['profile']['reused']} reused"
    )
    print(
        f"one config changed ({changed}): models run {runs['one-config']['ran_models']}, "
        f"{runs['one-config']['reused']} reused"
    )
    n, bad, cols = compare(runs["full"]["rows"], runs["one-config"]["rows"], skip={changed})
    print(
        f"one-config rows vs full, the changed model aside: {n} compared, {bad} differ {dict(cols)}"
    )
    print(f"two CPU-bound processes got {100 * machine_efficiency(2):.0f}% of 2 cores at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
