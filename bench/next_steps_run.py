"""Every next step a store's answers print, checked: no placeholder, and each command run.

Over one store (the demo's: `bash scripts/demo.sh`, or `hfsweep run --top 50 --device neuron
--store S`), it collects what a user reads: the report (`hfsweep report`), `hfsweep lookup` of
every model of the newest run (text and JSON: the next step and its command, the reproduce
command), `lookup` of a catalog model the store lacks and of an id that is nowhere. It counts
the placeholders in them (a lone `?` where a value belongs, `STORE` where the store is known),
then runs each distinct command once (one model per failure class, the store's path pointing at
a copy, so that a suggested `hfsweep run` does not write into the store read) and prints its
exit status. Target: 0 placeholders, and no command exits 2 (bad usage: a suggestion that
cannot work). `bash scripts/install.sh ...` is listed, not run (it installs packages).

    python bench/next_steps_run.py --store /tmp/demo-store
    python bench/next_steps_run.py --store /tmp/demo-store --no-run    # placeholders only
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

LONE_QUESTION = re.compile(r"(?<=[\s(])\?(?=[\s,:;)]|$)", re.M)
STORE_WORD = re.compile(r"--store STORE\b")
GARBAGE_ID = "no-such-org/no-such-model-zz9"
NOT_RUN = ("bash scripts/install.sh",)  # installs packages: listed, not run


def cli(*argv: str) -> tuple[int, str]:
    """`hfsweep ARGV` in this process: (exit status, stdout)."""
    from sweep.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(argv))
    return code, out.getvalue()


def placeholders(text: str) -> list[str]:
    found = [m.group(0) for m in LONE_QUESTION.finditer(text)]
    return found + [m.group(0) for m in STORE_WORD.finditer(text)]


def collect(store: str) -> tuple[dict[str, int], list[tuple[str, str, str]]]:
    """(placeholders per answer kind, [(failure class or answer, model, command)])."""
    from reports.query import StoreQuery

    q = StoreQuery(store)
    run_id = q.available_runs()[0][0]
    models = [
        r["model_id"]
        for r in q.fetch(
            "SELECT DISTINCT model_id, min(rank) AS rank FROM model_runs WHERE run_id = $run "
            "GROUP BY model_id ORDER BY rank",
            {"run": run_id},
        )
    ]
    counts = {"report": 0, "lookup text": 0, "lookup json": 0, "not found": 0}
    commands: list[tuple[str, str, str]] = []
    _, report = cli("report", "--store", store)
    counts["report"] += len(placeholders(report))
    for model in models:
        _, text = cli("lookup", model, "--store", store)
        counts["lookup text"] += len(placeholders(text))
        _, raw = cli("lookup", model, "--store", store, "--format", "json")
        data = json.loads(raw)
        step = data.get("next_step") or {}
        counts["lookup json"] += len(placeholders(json.dumps(step)))
        if step.get("command"):
            commands.append((step["failure"], model, step["command"]))
        commands.append(("reproduce", model, data["reproduce"]))
    from sweep.commands.options import catalog_models

    stored = set(models)
    absent = next(c.model_id for c in catalog_models("bundled") if c.model_id not in stored)
    for asked, kind in ((absent, "lookup: in the catalog, not the store"), (GARBAGE_ID, "")):
        _, raw = cli("lookup", asked, "--store", store, "--format", "json")
        data = json.loads(raw)
        counts["not found"] += len(placeholders(data["message"] + data["hint"]))
        if data.get("check"):
            commands.append((kind or "lookup: an unknown id", asked, data["check"]))
    return counts, commands


def run_commands(
    commands: list[tuple[str, str, str]], store: str, timeout: float
) -> list[dict[str, Any]]:
    """Each failure class's first command (the most downloaded model's), run once in a shell
    from the repository, its store a copy of `store`."""
    copy = Path(tempfile.mkdtemp(prefix="next-steps-")) / "store"
    shutil.copytree(store, copy)
    seen: set[str] = set()
    out = []
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"}
    try:
        for kind, model, command in commands:
            if kind in seen:
                continue
            seen.add(kind)
            line = {"class": kind, "model": model, "command": command}
            if command.startswith(NOT_RUN):
                out.append({**line, "exit": None, "seconds": 0.0, "note": "installs: not run"})
                continue
            shell = command.replace(shlex.quote(store), shlex.quote(str(copy)))
            start = time.monotonic()
            try:
                proc = subprocess.run(
                    shell,
                    shell=True,
                    cwd=ROOT,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                )
                code: int | None = proc.returncode
                tail = (proc.stderr.strip().splitlines() or [""])[-1][:160]
            except subprocess.TimeoutExpired:
                code, tail = None, f"timed out after {timeout:.0f} s"
            out.append({**line, "exit": code, "seconds": time.monotonic() - start, "note": tail})
            print(f"  {kind}: exit {code} ({time.monotonic() - start:.0f} s)", file=sys.stderr)
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--no-run", action="store_true", help="count placeholders only")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per command")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    store = str(Path(args.store).resolve())
    counts, commands = collect(store)
    print("placeholders ('?' for a value, 'STORE' where the store is known):")
    for kind, n in counts.items():
        print(f"  {kind:<12} {n}")
    ran = [] if args.no_run else run_commands(commands, store, args.timeout)
    if ran:
        print(f"\n{'class':<40} {'exit':>4} {'s':>5}  command")
        for r in ran:
            code = "-" if r["exit"] is None else str(r["exit"])
            print(f"{r['class']:<40} {code:>4} {r['seconds']:>5.0f}  {r['command']}")
            if r["exit"] not in (0, 1, 5):
                print(f"{'':<52}{r['note']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"placeholders": counts, "commands": ran}, indent=1))
    bad = sum(counts.values()) + sum(1 for r in ran if r["exit"] == 2)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
