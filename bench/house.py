"""The house's shape at one or more git revisions, side by side: lines in the five folders,
import circles, the largest file and function, how many places declare each shared CLI option
and the tiny-input constants, and the `duplicates` pairs of the tree (where that tool is on the
machine).

    python bench/house.py                      # the working tree
    python bench/house.py --rev 7ecad25 --rev HEAD

Each revision is read from `git archive` into a temporary folder; nothing is imported from it
(the import graph is drawn with `ast`, by tests/test_architecture.py's functions).
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import test_architecture as arch  # noqa: E402

FOLDERS = arch.FOLDERS
# CLI options every sweep command shares, and tiny-input constants: how many places declare each
OPTIONS = ("--store", "--address", "--num-cpus", "--local", "--run-id", "--retries", "--no-report")
CONSTANTS = ("BATCH",)
DUPLICATES = REPO.parent / ".library" / "duplicates"


def export(rev: str, into: Path) -> Path:
    """The tree of `rev` in `into` (from `git archive`)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def sources(root: Path) -> list[Path]:
    return [p for folder in FOLDERS for p in sorted((root / folder).rglob("*.py"))]


def functions(path: Path) -> list[tuple[int, str]]:
    """(lines, qualified name) of every function in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.append((node.end_lineno - node.lineno + 1, node.name))  # type: ignore[operator]
    return out


def declarations(root: Path) -> dict[str, int]:
    """How many places declare each shared option (`add_argument("--x"`) and each constant."""
    counts = dict.fromkeys(OPTIONS + CONSTANTS, 0)
    for path in sources(root):
        text = path.read_text(encoding="utf-8")
        for option in OPTIONS:
            counts[option] += len(
                re.findall(rf"""add_argument\(\s*["']{re.escape(option)}["']""", text)
            )
        for name in CONSTANTS:
            counts[name] += len(re.findall(rf"^{name}\s*[:=]", text, flags=re.M))
    return counts


def duplicate_pairs(root: Path) -> str:
    """The `duplicates` tool's first line for the five folders (pairs and files read)."""
    if not (DUPLICATES / "duplicates").exists() and shutil.which("duplicates") is None:
        return "n/a (duplicates not on this machine)"
    tool = shutil.which("duplicates") or str(DUPLICATES / "duplicates")
    lines = []
    for folder in FOLDERS:
        out = subprocess.run(
            [tool, "--repo", str(root / folder), "--seconds", "120"],
            capture_output=True,
            text=True,
        ).stdout
        lines.append(f"{folder}: {out.splitlines()[0] if out else '?'}")
    return "; ".join(lines)


def measure(root: Path) -> dict[str, Any]:
    arch.ROOT = root
    arch._edges.cache_clear()
    files = sources(root)
    sizes = sorted(
        ((len(p.read_text(encoding="utf-8").splitlines()), p.relative_to(root)) for p in files),
        reverse=True,
    )
    funcs = sorted(
        ((n, f"{p.relative_to(root)}:{name}") for p in files for n, name in functions(p)),
        reverse=True,
    )
    return {
        "lines": sum(n for n, _ in sizes),
        "files": len(files),
        "circles": arch.circles(arch.import_graph()),
        "largest_files": sizes[:3],
        "largest_functions": funcs[:3],
        "declarations": declarations(root),
        "duplicates": duplicate_pairs(root),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rev", action="append", help="git revision (repeat; default: working tree)")
    args = p.parse_args()
    results: list[tuple[str, dict[str, Any]]] = []
    for rev in args.rev or [None]:
        if rev is None:
            results.append(("working tree", measure(REPO)))
            continue
        with tempfile.TemporaryDirectory() as tmp:
            results.append((rev, measure(export(rev, Path(tmp)))))
    for name, r in results:
        print(f"== {name}")
        print(f"  python in the five folders: {r['lines']:,} lines in {r['files']} files")
        print(f"  import circles: {len(r['circles'])}")
        for c in r["circles"]:
            print(f"    {' <-> '.join(c)}")
        print("  largest files: " + ", ".join(f"{p} {n}" for n, p in r["largest_files"]))
        print("  largest functions: " + ", ".join(f"{q} {n}" for n, q in r["largest_functions"]))
        print("  places declaring: " + ", ".join(f"{k} {v}" for k, v in r["declarations"].items()))
        print(f"  duplicates: {r['duplicates']}")


if __name__ == "__main__":
    main()
