"""The house's shape at one or more git revisions, side by side: lines in the folders and
per folder, import circles between modules and between the parts of a folder (its sub-folders
and top-level modules), the imports of `reports` from `model_configs` and `runners`, the largest
files and the ten longest functions, how many places declare each shared CLI option and the
tiny-input constants, where each library's code lives, what each device's folder leaves outside
it, where sizing's writing side lives and how many library config fields it names, the files
that name each stage (what adding a stage touches), and the `duplicates` pairs of each folder
(where that command is on the PATH).

What a device leaves outside its folder (the files a device like it touches besides its own
folder): the product files outside `runners/devices/<name>/` that hold what only it knows (its
`knowledge` and options' flags, as the working tree's devices declare them, applied to every
revision), name it as a whole string (`"mps"`: a registry entry, a data key) or list it in a
line naming three or more devices (a help text's device list).

The files that name a stage: the product files whose code names it (`Stage.LORA`, its member in
the `Stage` enum), or that hold a hand-written stage table or help that lists it (a module-level
`*_STAGES`, `STAGE_NEEDS`, `STAGE_GROUPS` or `STAGES_HELP` naming it, or text with its name as
a word). Adding a stage like it touches those files (and its tests).

Where a library's code lives: the modules its registry entry's adapter reaches through imports
(module level or inside a function), less those the rest of the house reaches without going
through an adapter (the interface, the spec, the shared helpers), counted by folder. A module two
libraries reach (sentence-transformers builds on transformers' shrink) counts for both.

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
    """The `duplicates` command's first line for the project's folders (pairs and files read)."""
    tool = shutil.which("duplicates")
    if tool is None:
        return "n/a (duplicates not on this machine)"
    lines = []
    for folder in FOLDERS:
        out = subprocess.run(
            [tool, "--repo", str(root / folder), "--seconds", "120"],
            capture_output=True,
            text=True,
        ).stdout
        lines.append(f"{folder}: {out.splitlines()[0] if out else '?'}")
    return "; ".join(lines)


part_circles = arch.part_circles


def reports_imports(graph: dict[str, frozenset[str]]) -> dict[str, int]:
    """How many imports of a `reports` module each of `model_configs` and `runners` makes."""
    return {
        folder: sum(
            1
            for module, targets in graph.items()
            if module.split(".")[0] == folder
            for t in targets
            if t.split(".")[0] == "reports"
        )
        for folder in ("model_configs", "runners")
    }


def _adapter_targets(root: Path) -> dict[str, str]:
    """Hub library name -> the adapter module its registry entry names (read as text)."""
    for registry in ("model_configs/libraries/__init__.py", "model_configs/adapters/__init__.py"):
        path = root / registry
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            found = re.findall(r'"([\w.-]+)":\s*\(?\s*"(model_configs[\w.]+):\w+"', text)
            return {library: module for library, module in found}
    return {}


def _graph(modules: dict[str, tuple[Path, bool]]) -> dict[str, set[str]]:
    """The import graph, with the modules a package loads by name from its `GROUPS` tuple
    (`importlib.import_module(f"{__name__}.{group}")`, which `ast` cannot follow)."""
    graph = {m: set(targets) for m, targets in arch.import_graph().items()}
    for module, (path, package) in modules.items():
        text = path.read_text(encoding="utf-8")
        found = re.search(r"^GROUPS = \(([^)]*)\)", text, flags=re.M)
        if package and found and 'import_module(f"{__name__}.' in text:
            for group in re.findall(r'"(\w+)"', found.group(1)):
                graph[module].add(f"{module}.{group}")
    return graph


def _reach(graph: dict[str, set[str]], start: set[str], stop: set[str]) -> set[str]:
    seen, todo = set(start), list(start)
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen and nxt not in stop:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _token(adapter: str) -> str:
    """The name a library's modules carry: `...adapters.timm` / `...libraries.timm.adapter`."""
    parts = adapter.split(".")
    return parts[-2] if parts[-1] == "adapter" else parts[-1]


def _names(module: str, token: str) -> bool:
    parts = module.split(".")
    return token in parts or parts[-1].startswith(token + "_")


def library_homes(root: Path) -> dict[str, tuple[int, int, list[str]]]:
    """Hub library -> (modules, lines, the folders holding them) of its own code; the modules
    several libraries reach and none owns are listed under `(shared by libraries)`."""
    modules = arch.project_modules()
    graph = _graph(modules)
    targets = _adapter_targets(root)
    adapters = set(targets.values())
    # a library's reach stops at another library's adapter (what it borrows from it is that
    # library's code, not its own)
    reach = {lib: _reach(graph, {module}, adapters - {module}) for lib, module in targets.items()}
    reached = set().union(*reach.values())
    # what the rest of the house reaches without an adapter is shared, no library's own
    roots = {m for m in graph if m not in reached}
    shared = _reach(graph, roots, adapters)
    owner: dict[str, str | None] = {}
    for module in sorted(reached - shared):
        libs = [lib for lib in reach if module in reach[lib]]
        named = [lib for lib in libs if _names(module, _token(targets[lib]))]
        if len(libs) == 1 or len(named) == 1:
            owner[module] = libs[0] if len(libs) == 1 else named[0]
    changed = True
    while changed:  # a module every importer of which one library owns is that library's too
        changed = False
        for module in sorted(reached - shared - set(owner)):
            importers = {owner.get(m, "?") for m in graph if module in graph[m] and m in reached}
            importers -= {None}
            if len(importers) == 1 and "?" not in importers:
                owner[module], changed = importers.pop(), True
    for module in reached - shared - set(owner):
        owner[module] = None
    out = {}
    for library in sorted(targets) + [None]:
        own = [m for m, lib in owner.items() if lib == library and m in modules]
        files = [modules[m][0] for m in own]
        lines = sum(len(f.read_text(encoding="utf-8").splitlines()) for f in files)
        folders = sorted({f.parent.relative_to(root).as_posix() + "/" for f in files})
        if files or library is not None:
            out[library or "(shared by libraries)"] = (len(files), lines, folders)
    return out


def sizing_homes(root: Path) -> tuple[list[str], dict[str, int]]:
    """Sizing's writing side: the files of `sizing/` and, outside it and the reading side
    (`reports/`), the modules and data files named for sizing or hardware; and, per such module,
    how many of a library's config fields it names (`tests/test_architecture.py`'s
    `LIBRARY_FIELDS`, what the adapter says instead)."""
    found = sorted(
        p.relative_to(root).as_posix()
        for folder in FOLDERS
        if folder != "reports"
        for p in (root / folder).rglob("*")
        if p.suffix in (".py", ".json")
        and "__pycache__" not in p.parts
        and (folder == "sizing" or "sizing" in p.stem or "hardware" in p.stem)
    )
    fields = {}
    for rel in found:
        if rel.endswith(".py"):
            names = arch._names_in_code((root / rel).read_text(encoding="utf-8"))
            fields[rel] = len(names & arch.LIBRARY_FIELDS)
    return found, fields


def device_outside(root: Path) -> dict[str, list[str]]:
    """Registered device (the working tree's) -> the product files outside its folder that
    hold its knowledge, name it as a whole string, or list it among three or more devices."""
    homes = arch.device_homes()
    names = sorted(homes)
    out: dict[str, set[str]] = {name: set() for name in names}
    for line in arch.knowledge_outside(root, homes):
        path, _, rest = line.partition(": ")
        out[rest.split(" knows ", 1)[0]].add(path)
    listing = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    for path in arch.product_files(root):
        rel = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        listed = {
            m
            for line in text.splitlines()
            if len(set(listing.findall(line))) >= 3
            for m in listing.findall(line)
        }
        for name, (home, _) in homes.items():
            if rel.startswith(home):
                continue
            if re.search(rf"([\"']){re.escape(name)}\1", text) or name in listed:
                out[name].add(rel)
    return {name: sorted(files) for name, files in out.items()}


_TABLE = re.compile(r"[A-Z_]*_STAGES|STAGE_NEEDS|STAGE_GROUPS|STAGES_HELP")


def stage_files(root: Path) -> dict[str, list[str]]:
    """Stage value -> the product files that name it (see the module docstring)."""
    schema = ast.parse((root / "ground" / "schema.py").read_text(encoding="utf-8"))
    members: dict[str, str] = {}
    for node in ast.walk(schema):
        if isinstance(node, ast.ClassDef) and node.name == "Stage":
            for item in node.body:
                if isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant):
                    members[item.targets[0].id] = item.value.value  # type: ignore[attr-defined]
    found: dict[str, list[str]] = {v: [] for v in members.values()}
    for path in sources(root):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        named: set[str] = set()
        tables: dict[str, set[str]] = {}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "Stage"
                and node.attr in members
            ):
                named.add(members[node.attr])
            if (
                isinstance(node, ast.ClassDef)
                and node.name == "Stage"
                and rel == "ground/schema.py"
            ):
                named.update(members.values())
        for node in tree.body:
            targets = [getattr(node, "target", None), *getattr(node, "targets", [])]
            names = [t.id for t in targets if isinstance(t, ast.Name) and _TABLE.fullmatch(t.id)]
            if not names or getattr(node, "value", None) is None:
                continue
            text = ast.unparse(node.value)  # type: ignore[attr-defined]
            listed = {v for n, v in members.items() if f"Stage.{n}" in text}
            for value in members.values():
                if isinstance(node.value, ast.Constant | ast.BinOp | ast.JoinedStr) and re.search(  # type: ignore[attr-defined]
                    rf"(?<![a-z_]){value}(?![a-z_])", text
                ):
                    listed.add(value)
            for name in names:
                tables[name] = listed
        for listed in tables.values():
            named |= listed
        for value in named:
            found[value].append(rel)
    return found


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
    graph = arch.import_graph()
    return {
        "lines": sum(n for n, _ in sizes),
        "lines_per_folder": {
            folder: sum(n for n, p in sizes if p.parts[0] == folder) for folder in FOLDERS
        },
        "part_circles": part_circles(graph),
        "reports_imports": reports_imports(graph),
        "files": len(files),
        "circles": arch.circles(graph),
        "largest_files": sizes[:3],
        "largest_functions": funcs[:10],
        "declarations": declarations(root),
        "libraries": library_homes(root),
        "duplicates": duplicate_pairs(root),
        "stage_files": stage_files(root),
        "sizing": sizing_homes(root),
        "devices": device_outside(root),
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
        print(f"  python in the {len(FOLDERS)} folders: {r['lines']:,} lines in {r['files']} files")
        print(
            "  lines per folder: "
            + ", ".join(f"{f} {n:,}" for f, n in r["lines_per_folder"].items())
        )
        print(f"  import circles between modules: {len(r['circles'])}")
        for c in r["circles"]:
            print(f"    {' <-> '.join(c)}")
        print(f"  import circles between a folder's parts: {len(r['part_circles'])}")
        for c in r["part_circles"]:
            print(f"    {' <-> '.join(c)}")
        print(
            "  imports of reports: "
            + ", ".join(f"from {f} {n}" for f, n in r["reports_imports"].items())
        )
        print("  largest files: " + ", ".join(f"{p} {n}" for n, p in r["largest_files"]))
        print("  the ten longest functions (lines):")
        for n, q in r["largest_functions"]:
            print(f"    {q} {n}")
        print("  places declaring: " + ", ".join(f"{k} {v}" for k, v in r["declarations"].items()))
        print("  where each library's code lives (modules, lines: folders):")
        for library, (n, lines, folders) in r["libraries"].items():
            print(f"    {library}: {n} modules, {lines:,} lines: {', '.join(folders)}")
        counts = sorted(len(f) for f in r["stage_files"].values())
        print(
            f"  files that name a stage: {counts[0]} to {counts[-1]} "
            f"(median {counts[len(counts) // 2]}) over {len(counts)} stages"
        )
        for stage in ("generate", "lora", "shapes", "tp", "sft"):
            print(f"    {stage}: {', '.join(r['stage_files'].get(stage, []))}")
        homes, fields = r["sizing"]
        for kind, suffix in (("code", ".py"), ("data", ".json")):
            mine = [h for h in homes if h.endswith(suffix)]
            folders = sorted({h.rpartition("/")[0] + "/" for h in mine})
            print(f"  sizing's writing side, {kind}: {len(mine)} files in {len(folders)} folders "
                  f"({', '.join(folders)}): {', '.join(mine)}")  # fmt: skip
        print(
            "  library config fields named there: "
            + (", ".join(f"{m} {n}" for m, n in fields.items() if n) or "none")
        )
        print("  what each device leaves outside its folder (files):")
        for device, paths in r["devices"].items():
            print(f"    {device}: {len(paths)}: {', '.join(paths)}")
        print("  duplicates, per folder:")
        for line in r["duplicates"].split("; "):
            print(f"    {line}")


if __name__ == "__main__":
    main()
