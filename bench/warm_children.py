"""What a forked op-sweep child imports and how long it takes to its first rows, from a parent
warmed by `runners.warm.warm_parent` and from a cold one, side by side.

Each trial is a fresh interpreter: the parent does what an op-sweep task does before its first
fork (cold: PyTorch's OpInfo database only, as before the op sweep warmed; warm: that and
`warm_parent(*CHILD_MODULES)`), then forks one child that runs the op child's own body
(`runners.op_sweep.isolation._op_child`: the device set up, then every sample of the OpInfos
asked for) and reports the modules it imported and its seconds.

    .venv/bin/python bench/warm_children.py [--device neuron] [--ops sin,add] [--trials 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TRIAL = """
import json, os, sys, time
from runners.op_sweep.isolation import CHILD_MODULES, _op_child
from runners.op_sweep.opdb import get_opinfo, op_db
from runners.op_sweep.units import Unit
from runners.settings import OpSettings
from runners.warm import warm_parent

device, ops, warm = sys.argv[1], sys.argv[2].split(","), sys.argv[3] == "warm"
op_db()
if warm:
    warm_parent(*CHILD_MODULES)
units = []
for key in ops:
    op = get_opinfo(key)
    units.append(Unit(key, op.name, op.variant_test_name or None, ("fp32",)))
settings = OpSettings(device=device, dtypes=("fp32",))
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    before = set(sys.modules)
    start = time.perf_counter()
    rows = []
    _op_child(lambda m: rows.append(m) if m[0] == "row" else None, units, (0, 0, 0), settings)
    out = {"modules": len(set(sys.modules) - before), "s": time.perf_counter() - start,
           "rows": len(rows)}
    os.write(write, json.dumps(out).encode())
    os._exit(0)
os.close(write)
os.waitpid(pid, 0)
print(os.read(read, 1 << 20).decode())
"""


def trial(device: str, ops: str, mode: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", TRIAL, device, ops, mode],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="neuron")
    p.add_argument("--ops", default="sin,add")
    p.add_argument("--trials", type=int, default=3)
    args = p.parse_args()
    results = {}
    for _ in range(args.trials):  # interleaved, so both see the same load on the machine
        for mode in ("cold", "warm"):
            results.setdefault(mode, []).append(trial(args.device, args.ops, mode))
    print(f"op child on {args.device}, OpInfos {args.ops}, {args.trials} trials (medians)")
    print(f"{'parent':<8}{'modules imported':>18}{'seconds':>10}{'rows':>6}")
    med = {}
    for mode, runs in results.items():
        med[mode] = {k: statistics.median(r[k] for r in runs) for k in ("modules", "s", "rows")}
        m = med[mode]
        print(f"{mode:<8}{m['modules']:>18.0f}{m['s']:>10.2f}{m['rows']:>6.0f}")
    print(f"warm / cold seconds: {med['warm']['s'] / med['cold']['s']:.2f}")


if __name__ == "__main__":
    main()
