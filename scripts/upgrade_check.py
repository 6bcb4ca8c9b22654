"""The upgrade check's steps, after scripts/upgrade_check.sh installed the newest stack: the
packages whose versions differ between the two venvs, the test suite under the newest stack,
one sweep per stack of the same models on the emulated neuron device into one store (two run
ids), and `hfsweep diff` between them, with every model whose outcome changed listed with the
stage and the error as raised on each side.

Both stacks run this checkout's code (PYTHONPATH is the repository), so what differs between
the runs is the libraries. Exit status: see scripts/upgrade_check.sh.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The categories of `hfsweep diff` whose models changed outcome between the two stacks.
CHANGED = ("newly_failing", "newly_passing", "flaky", "other_change", "added", "removed")
VERSIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): d.version "
    "for d in m.distributions() if d.metadata['Name']}))"
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="scripts/upgrade_check.sh",
        description="what the newest allowed versions change: tests, and a sweep diff",
    )
    p.add_argument("--locked", default=".venv", help="the venv installed from the lock")
    p.add_argument("--newest", default=".venv-upgrade", help="the venv of the newest versions")
    p.add_argument("--top", type=int, default=50, help="models of the catalog (default 50)")
    p.add_argument("--catalog", default="bundled", help="'bundled' (default) or a catalog CSV")
    p.add_argument("--device", default="neuron", help="the sweeps' device (default neuron)")
    p.add_argument(
        "--sweep-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for both `hfsweep run`s (repeat it: --sweep-arg=--local)",
    )
    p.add_argument(
        "--out", default=".upgrade-check", help="store and logs (default .upgrade-check)"
    )
    p.add_argument("--no-tests", action="store_true", help="skip the test suite")
    p.add_argument("--no-sweep", action="store_true", help="skip the sweeps and the diff")
    p.add_argument("--no-install", action="store_true", help="(scripts/upgrade_check.sh's)")
    p.add_argument("pytest_args", nargs="*", help="after --: pytest's (default: the whole suite)")
    args = p.parse_args(argv)
    if args.top < 1:
        p.error(f"--top must be 1 or more, not {args.top}")
    locked, newest = Path(args.locked), Path(args.newest)
    for venv in (locked, newest):
        if not (venv / "bin" / "hfsweep").exists():
            p.error(f"no hfsweep in {venv}: install it first (scripts/install.sh)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),  # both stacks run this checkout's code
        "HF_HUB_OFFLINE": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "TOKENIZERS_PARALLELISM": "false",
        "YOLO_OFFLINE": "True",
        "YOLO_VERBOSE": "False",
    }
    env.pop("HFSWEEP_TEST_FAULTS", None)

    print(f"hfsweep upgrade check: {locked} (the lock) against {newest} (the newest allowed)")
    print(f"commit {git_sha()}, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC\n")
    print("== versions that differ")
    a, b = versions(locked, env), versions(newest, env)
    differ = sorted(n for n in set(a) | set(b) if n != "hfsweep" and a.get(n) != b.get(n))
    width = max((len(n) for n in differ), default=0)
    for name in differ:
        print(f"  {name:<{width}}  {a.get(name, '-')} -> {b.get(name, '-')}")
    if not differ:
        print("  none: the lock holds the newest allowed versions")

    status = 0
    if not args.no_tests:
        status |= run_tests(newest, args.pytest_args, out, env)
    if not args.no_sweep:
        status |= sweep_and_diff(args, locked, newest, out, env)
    return status


def git_sha() -> str:
    proc = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return proc.stdout.strip() or "unknown"


def versions(venv: Path, env: dict[str, str]) -> dict[str, str]:
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", VERSIONS],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return dict(json.loads(proc.stdout))


def run_tests(newest: Path, pytest_args: list[str], out: Path, env: dict[str, str]) -> int:
    """The suite (or `pytest_args`) under the newest stack: its summary and what failed; 1 if
    anything failed."""
    cmd = [str(newest / "bin" / "pytest"), *pytest_args]
    log = out / "pytest.log"
    print(f"\n== tests under the newest stack: {' '.join(cmd)} (log: {log})", flush=True)
    wide = {**env, "COLUMNS": "400"}  # pytest's summary keeps each failure's error line
    with log.open("w") as fh:
        proc = subprocess.run(cmd, cwd=ROOT, env=wide, stdout=fh, stderr=subprocess.STDOUT)
    lines = log.read_text(errors="replace").splitlines()
    failed = [ln for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
    summary = next(
        (ln.strip("= ") for ln in reversed(lines) if re.search(r"\d+ (passed|failed)", ln)),
        f"pytest exited {proc.returncode}",
    )
    print(f"  {summary} (exit {proc.returncode})")
    for line in failed:
        print(f"  {line}")
    return 0 if proc.returncode == 0 else 1


def sweep_and_diff(
    args: argparse.Namespace, locked: Path, newest: Path, out: Path, env: dict[str, str]
) -> int:
    store = out / "store"
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    runs = {"locked": f"lock-{stamp}", "newest": f"newest-{stamp}"}
    status = 0
    for name, venv in (("locked", locked), ("newest", newest)):
        run_id = runs[name]
        cmd = [str(venv / "bin" / "hfsweep"), "run", "--device", args.device]
        cmd += ["--catalog", args.catalog, "--top", str(args.top), "--store", str(store)]
        cmd += ["--run-id", run_id, "--no-report", *args.sweep_arg]
        log = out / f"{run_id}.log"
        print(f"\n== sweep, {name} stack: {' '.join(cmd)}", flush=True)
        with log.open("w") as fh:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
        tail = log.read_text(errors="replace").splitlines()[-3:]
        print(f"  exit {proc.returncode} (log: {log})")
        if proc.returncode != 0:
            print("\n".join(f"  {ln}" for ln in tail))
            status = 3
    hfsweep = str(locked / "bin" / "hfsweep")
    diff = [hfsweep, "diff", runs["locked"], runs["newest"], "--store", str(store)]
    print(f"\n== {' '.join(diff[1:])}", flush=True)
    text = subprocess.run(diff, cwd=ROOT, env=env, capture_output=True, text=True)
    if text.returncode != 0:
        print(text.stderr.rstrip())
        return 3
    print(text.stdout.rstrip())
    doc = subprocess.run(
        [*diff, "--format", "json", "--limit", "100000"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(doc.stdout)
    changed = changed_models(data)
    print("\n== models whose outcome changed, with the stage and the error as raised")
    for cat, model in changed:
        print(f"  {model['model_id']} [{cat}]")
        for side, label in (("a", "lock  "), ("b", "newest")):
            print(f"    {label} {outcome(model, side)}")
    if not changed:
        print("  none")
    if data["summary"]["newly_failing"]["models"]:
        status |= 4
    return status


def changed_models(diff: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every model of a changed category, and those failing on both stacks whose failure
    changed (another stage, status or error)."""
    found = [(cat, m) for cat in CHANGED for m in diff["models"].get(cat, [])]
    for m in diff["models"].get("still_failing", []):
        a = (m["failed_stage_a"], m["failed_status_a"], m["signature_a"])
        b = (m["failed_stage_b"], m["failed_status_b"], m["signature_b"])
        if a != b:
            found.append(("failing_differently", m))
    return found


def outcome(model: dict[str, Any], side: str) -> str:
    result = model[f"outcome_{side}"] or "absent"
    stage = model[f"failed_stage_{side}"]
    if not stage:
        return result
    error = ": ".join(
        filter(None, (model[f"error_type_{side}"], first_line(model[f"error_message_{side}"])))
    )
    return f"{result} at {stage} ({model[f'failed_status_{side}']}): {error or '-'}"


def first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


if __name__ == "__main__":
    sys.exit(main())
