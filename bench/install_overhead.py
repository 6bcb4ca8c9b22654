"""Time the library adapters' optional packages add to an install, in a fresh virtualenv.

The demo (`scripts/demo.sh`) installs `.[all]` and CI (`scripts/test.sh`) `.[all,ultralytics,dev]`;
before the adapters they installed `.` and `.[dev]`. This creates a venv, installs the pinned
torch pair (not timed: both installs need it), then times `pip install --no-cache-dir` of the
base install and, in the same venv, of the adapters' extras on top (what the new packages add),
for the demo's and CI's sets. Needs PyPI (the package registry) and ~7 GB of disk.

    .venv/bin/python bench/install_overhead.py [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PINS = ("torch==2.14.1", "torchvision==0.29.1")


def pip(venv: Path, *args: str) -> float:
    start = time.perf_counter()
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args], check=True)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the venvs")
    parser.add_argument("--only", choices=["demo", "ci"], help="one of the two sets")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="hfsweep-install-"))
    constraints = work / "constraints.txt"
    constraints.write_text("\n".join(PINS) + "\n")
    results = {}
    try:
        for name, base, full in (
            ("demo", ".", ".[all]"),
            ("ci", ".[dev]", ".[all,ultralytics,dev]"),
        ):
            venv = work / name
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            pip(venv, "--upgrade", "pip")
            torch_s = pip(venv, *PINS)
            base_s = pip(venv, "--no-cache-dir", "-c", str(constraints), "-e", f"{ROOT}{base[1:]}")
            extra_s = pip(venv, "--no-cache-dir", "-c", str(constraints), "-e", f"{ROOT}{full[1:]}")
            results[name] = (torch_s, base_s, extra_s)
            print(f"{name}: torch pair {torch_s:.0f} s (not counted), `pip install -e {base}` "
                  f"{base_s:.0f} s, then the adapters' extras (`-e {full}`) +{extra_s:.0f} s "
                  f"(+{extra_s / base_s:.0%} of the base install)", flush=True)  # fmt: skip
            if not args.keep:
                shutil.rmtree(venv, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
