"""Rewrite the README's text samples from what the demo prints, and record their figures.

The README's report, lookup and check samples sit between `<!-- --8<-- [start:NAME] -->` and
`<!-- --8<-- [end:NAME] -->` markers (the docs site includes them). This script runs the demo's
commands in the demo's environment (`HF_HUB_OFFLINE=1`, the bundled catalog, the emulated
neuron device, `--top 50`) and writes each block from their output:

  report  `hfsweep report --store S`: its head and the sections in `REPORT_SECTIONS`
  lookup  `hfsweep lookup LOOKUP_MODEL --store S`
  check   `hfsweep check CHECK_MODEL --device neuron` (stdout)

It also writes `docs/results/readme-samples.json`: the report's figures (every number of the
sections above, by line label) and how they were made (command, commit, torch). The test
(`tests/test_docs.py::test_the_readme_report_sample_has_the_recorded_figures`) holds the
README's block to that file; `--check` holds the file to a fresh sweep (a store the demo just
wrote): a sample that drifted from what the demo prints fails one or the other.

    python scripts/readme_samples.py                      # sweep the demo's top 50, rewrite
    python scripts/readme_samples.py --store hfsweep-store   # from a demo store already there
    python scripts/readme_samples.py --store S --check    # compare only; exit 1 on a difference
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SUMMARY = ROOT / "docs" / "results" / "readme-samples.json"
HFSWEEP = [str(ROOT / ".venv" / "bin" / "hfsweep")]
DEMO_RUN = ["run", "--device", "neuron", "--top", "50"]  # scripts/demo.sh's
REPORT_SECTIONS = ("Denominators", "Funnel: models that passed each stage")
LOOKUP_MODEL = "openai/gpt-oss-20b"
CHECK_MODEL = "openai-community/gpt2"
_NUMBER = re.compile(r"\d[\d,.]*[%MBKk]?")


def demo_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def hfsweep(*args: str) -> str:
    done = subprocess.run(
        [*HFSWEEP, *args], cwd=ROOT, env=demo_env(), capture_output=True, text=True
    )
    if done.returncode not in (0, 1):
        raise SystemExit(f"hfsweep {' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return done.stdout


def report_excerpt(report: str) -> str:
    """The report's head (up to its first section) and the sections `REPORT_SECTIONS`."""
    lines = report.splitlines()
    out: list[str] = []
    keep = True
    for line in lines:
        header = re.match(r"^== (.*) ==$", line)
        if header:
            keep = header.group(1) in REPORT_SECTIONS
            if keep and out and out[-1] != "":
                out.append("")
        if keep:
            out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out)


def figures(report_text: str) -> dict[str, list[str]]:
    """Every number of the report text's table rows, by the row's label (the text before its
    first number): what a sample and a fresh run must agree on."""
    found: dict[str, list[str]] = {}
    section = ""
    for line in report_text.splitlines():
        header = re.match(r"^== (.*) ==$", line)
        if header:
            section = header.group(1)
            continue
        first = _NUMBER.search(line)
        if first is None or set(line.strip()) <= set("-  "):
            continue
        label = line[: first.start()].strip()
        if not label or label.startswith(("hfsweep report", "store:", "EMULATED")):
            continue
        found[f"{section}: {label}"] = _NUMBER.findall(line[first.start() :])
    return found


def block(name: str, text: str) -> str:
    return f"<!-- --8<-- [start:{name}] -->\n```text\n{text.rstrip()}\n```\n<!-- --8<-- [end:{name}] -->"


def readme_block(name: str, readme: str | None = None) -> str:
    """The text of the README's block `name` (between its markers, inside its fence)."""
    readme = readme if readme is not None else README.read_text(encoding="utf-8")
    match = re.search(
        rf"<!-- --8<-- \[start:{name}\] -->\n```text\n(.*?)\n```\n<!-- --8<-- \[end:{name}\] -->",
        readme,
        re.S,
    )
    if match is None:
        raise SystemExit(f"README.md has no {name} block between its --8<-- markers")
    return match.group(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store",
        help="a store the demo wrote, relative to the checkout as the demo's is (default: sweep "
        "the demo's top 50 into hfsweep-store now, as scripts/demo.sh does)",
    )
    parser.add_argument("--check", action="store_true", help="compare with the summary only")
    args = parser.parse_args(argv)
    store = args.store
    if store is None:
        store = "hfsweep-store"  # the demo's, named as the demo names it (samples print it)
        subprocess.run(
            [*HFSWEEP, *DEMO_RUN, "--store", store, "--no-report"],
            cwd=ROOT,
            env=demo_env(),
            check=True,
        )
    report = report_excerpt(hfsweep("report", "--store", store))
    fresh = figures(report)
    if args.check:
        recorded = json.loads(SUMMARY.read_text(encoding="utf-8"))["figures"]
        differ = {
            k: (recorded.get(k), fresh.get(k))
            for k in set(recorded) | set(fresh)
            if recorded.get(k) != fresh.get(k)
        }
        for key, (was, now) in sorted(differ.items()):
            print(f"{key}: README {was}, this store {now}")
        print(f"{len(differ)} differing figures")
        return 1 if differ else 0
    lookup = hfsweep("lookup", LOOKUP_MODEL, "--store", store)
    check = hfsweep("check", CHECK_MODEL, "--device", "neuron")
    readme = README.read_text(encoding="utf-8")
    for name, text in (("report", report), ("lookup", lookup), ("check", check)):
        start = readme.index(f"<!-- --8<-- [start:{name}] -->")
        end_marker = f"<!-- --8<-- [end:{name}] -->"
        end = readme.index(end_marker) + len(end_marker)
        readme = readme[:start] + block(name, text) + readme[end:]
    README.write_text(readme, encoding="utf-8")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    SUMMARY.write_text(
        json.dumps(
            {
                "made_by": "python scripts/readme_samples.py"
                + (f" --store {args.store}" if args.store else ""),
                "demo_run": "hfsweep " + " ".join(DEMO_RUN) + " (HF_HUB_OFFLINE=1)",
                "commit": commit,
                # what the demo's environment has: the default install leaves ultralytics out
                "ultralytics_installed": importlib.util.find_spec("ultralytics") is not None,
                "figures": fresh,
            },
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )
    print(f"README.md: report, lookup and check rewritten; {SUMMARY.relative_to(ROOT)} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
