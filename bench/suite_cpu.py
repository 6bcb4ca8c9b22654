"""Where the test suite's CPU goes, test by test: pytest run as `.ci/run` runs it (or on the
tests given), with `bench/suite_cpu_plugin.py` charging every process's CPU to the test that
started it, then the totals by kind of process (Ray's services, Ray workers, drivers, forks of
each, the browser, ...), by file, and the most expensive tests. The suite is CPU-bound on a
2-core machine (both cores busy for the whole run), so its wall time follows its CPU: this says
what to cut. Also prints the machine's busy time over the run (`/proc/stat`) and what
`import torch` costs in a fresh interpreter, the yardstick for comparing machines and days.

    python bench/suite_cpu.py                              # the whole suite, 3 workers
    python bench/suite_cpu.py tests/test_cli.py -n 0       # a part, in one process
    python bench/suite_cpu.py --top 40 -- -m slow          # pytest arguments after --
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def busy_jiffies() -> tuple[int, int]:
    """The machine's busy and total time in clock ticks (user, nice, system, irq, softirq)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6]
    return busy, busy + fields[3] + fields[4]


def import_torch_cpu() -> float:
    before = os.times()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    after = os.times()
    return (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25, help="the most expensive tests listed")
    parser.add_argument(
        "pytest_args", nargs="*", help="passed to pytest (default: -n 3 --dist loadgroup)"
    )
    args = parser.parse_args(argv)
    out = Path(tempfile.mkdtemp(prefix="suite-cpu-"))
    pytest_args = args.pytest_args or ["-n", "3", "--dist", "loadgroup"]
    env = {
        **os.environ,
        "SUITE_CPU_OUT": str(out),
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT / "bench"), os.environ.get("PYTHONPATH")) if p
        ),
        "HF_HUB_OFFLINE": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "TOKENIZERS_PARALLELISM": "false",
        "YOLO_OFFLINE": "True",
        "YOLO_VERBOSE": "False",
    }
    torch_cpu = import_torch_cpu()
    busy0, total0 = busy_jiffies()
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "suite_cpu_plugin", "-q", *pytest_args],
        cwd=ROOT,
        env=env,
    )
    wall = time.monotonic() - start
    busy1, total1 = busy_jiffies()
    ticks = os.sysconf("SC_CLK_TCK")
    lines = [json.loads(x) for f in sorted(out.glob("*.jsonl")) for x in f.read_text().splitlines()]
    by_file: collections.Counter = collections.Counter()
    for line in lines:
        by_file[line["test"].split("::")[0]] += line["cpu_s"]
    charged = sum(line["cpu_s"] for line in lines)
    procs = sum(line.get("procs", 0) for line in lines)
    print(f"\npytest exit {proc.returncode}; {len(lines)} tests; wall {wall:.0f} s; lines in {out}")
    print(f"processes started by tests (seen by the sampler): {procs:,}")
    print(
        f"machine: {(busy1 - busy0) / ticks:,.0f} CPU s busy over the run "
        f"({(busy1 - busy0) / max(total1 - total0, 1):.1%} of its cores); "
        f"{charged:,.0f} CPU s charged to tests; `import torch` {torch_cpu:.2f} CPU s"
    )
    by_kind: collections.Counter = collections.Counter()
    for line in lines:
        by_kind.update(line.get("kinds", {}))
    print(f"\n{'CPU s':>8}  kind of process")
    for name, cpu in by_kind.most_common(20):
        print(f"{cpu:8.1f}  {name}")
    print(f"\n{'CPU s':>8}  file")
    for name, cpu in by_file.most_common(15):
        print(f"{cpu:8.1f}  {name}")
    print(f"\n{'CPU s':>8} {'wall s':>7}  test")
    for line in sorted(lines, key=lambda x: -x["cpu_s"])[: args.top]:
        print(f"{line['cpu_s']:8.1f} {line['wall_s']:7.1f}  {line['test']}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
