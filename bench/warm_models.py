"""What a model's forked child costs when its parent imported the model's class first
(`runners.warm.warm_model`) and when it did not, side by side, as a Ray worker that did not plan
the model sees it.

The bundled catalog's top N are planned in one process, then each mode runs in a fresh
interpreter that does what a run task does before its first fork (`warm_parent`), then runs the
models one by one through `runners.isolation.run_isolated` (cold: with `warm_model` turned
off). Printed per mode: the parent's one-time warm seconds, the children's seconds in all and
their CPU seconds (user + system, from the kernel's accounting of reaped children).

    .venv/bin/python bench/warm_models.py [--top 12] [--stages load,forward] [--trials 2]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TRIAL = """
import json, pickle, resource, sys, time
import runners.isolation as isolation
from runners.warm import warm_model, warm_parent

specs, settings = pickle.load(open(sys.argv[1], "rb"))
mode = sys.argv[2]
warm_parent(*isolation.CHILD_MODULES)
started = time.perf_counter()
if mode == "warm":
    for spec in specs:
        warm_model(spec)
warm_s = time.perf_counter() - started
isolation.warm_model = lambda spec: None  # warmed above, or not at all
child_s, statuses = 0.0, []
for spec in specs:
    outcome = isolation.run_isolated(spec, settings)
    child_s += outcome.timings["child_s"]
    statuses.append([str(r.status) for r in outcome.stages])
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"warm_s": warm_s, "child_s": child_s, "child_cpu_s": usage.ru_utime + usage.ru_stime, "statuses": statuses}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--stages", default="load,forward")
    parser.add_argument("--trials", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the bundled catalog's configs, offline
    sys.path.insert(0, str(ROOT))
    from model_configs.catalog import load_catalog
    from runners.settings import DeviceChoice, ModelSettings
    from sweep.commands.options import stage_list
    from sweep.plan import plan_entry

    stages = stage_list(args.stages)
    planned = [plan_entry(e, stages) for e in load_catalog().entries[: args.top]]
    specs = [p.spec for p in planned if p.spec is not None]
    settings = ModelSettings(device=DeviceChoice("cpu"), stages=stages, timeout_s=300)
    with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as fh:
        pickle.dump((specs, settings), fh)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    results: dict[str, list[dict]] = {"cold": [], "warm": []}
    for _ in range(args.trials):
        for mode in results:  # alternating, so both see the same machine
            done = subprocess.run(
                [sys.executable, "-c", TRIAL, fh.name, mode],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                sys.exit(f"the {mode} trial failed:\n{done.stderr[-3000:]}")
            results[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    os.unlink(fh.name)
    assert results["cold"][0]["statuses"] == results["warm"][0]["statuses"], "modes disagree"
    print(
        f"{len(specs)} models of the bundled top {args.top}, stages {args.stages}, "
        f"{args.trials} trials per mode (medians)"
    )
    print(f"{'mode':6} {'parent warm s':>14} {'children s':>11} {'children CPU s':>15}")
    med = {
        m: {k: statistics.median(r[k] for r in rs) for k in ("warm_s", "child_s", "child_cpu_s")}
        for m, rs in results.items()
    }
    for mode, m in med.items():
        print(f"{mode:6} {m['warm_s']:14.2f} {m['child_s']:11.2f} {m['child_cpu_s']:15.2f}")
    ratio = med["warm"]["child_cpu_s"] / med["cold"]["child_cpu_s"]
    print(
        f"children's CPU, warm/cold: {ratio:.2f}x; "
        f"saved per child: {(med['cold']['child_cpu_s'] - med['warm']['child_cpu_s']) / len(specs):.2f} s "
        f"for a one-time {med['warm']['warm_s']:.2f} s in the parent"
    )


if __name__ == "__main__":
    main()
