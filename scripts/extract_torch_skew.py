"""What differs between the torch a device profile was written for and the torch it runs on,
for what the profile touches. Writes `torch-skew.json` beside the profile's data; copies no
code and runs nothing of either torch (every fact is read from files with `ast` or a regex).

The profile's torch comes from the profile's own source: the TorchNeuron snapshot's
`pyproject.toml` (`torch~=2.10` at 98154b8). Each torch is read from its files: a wheel
(`pip download --no-deps torch==2.10.0`) or an installed `site-packages` folder (default: the
torch this interpreter imports, read as files). What is compared, and from which file:
- `aten`: the ATen operators and overloads each registers
  (`torchgen/packaged/ATen/native/native_functions.yaml`, shipped in every wheel);
- `process_group`: the methods of c10d's `ProcessGroup` (`torch/_C/_distributed_c10d.pyi`);
- `c10d_functional`: the `_c10d_functional` ops each version's Python calls
  (`torch/**/*.py`: `torch.ops._c10d_functional.NAME`), a lower bound of what it registers;
- `autocast`: the op lists autocast kernels are compiled from (`AT_FORALL_*` in
  `torch/include/ATen/autocast_mode.h`: what a backend such as TorchNeuron registers);
- `equivalent`: the ProcessGroup methods the newer torch added in place of older ones, where
  torch itself says so (`torch/distributed/distributed_c10d.py`): a public function that is
  a deprecated forwarder (`@deprecated(... use X ...)` whose body returns `X(...)`), or the
  same public function, called on the group in the older torch with one method and in the
  newer with another;
- `profile`: the names of the profile's own lists that one torch registers and the other not
  (native ops the newer torch dropped; autocast-policy ops the older torch lacked).

    python scripts/extract_torch_skew.py --old torch-2.10.0-...whl [--new SITE_PACKAGES]
        [--snapshot SNAPSHOT --commit SHA] [--out DIR]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from extract_torchneuron_evidence import DEFAULT_OUT, Snapshot  # noqa: E402

NATIVE_FUNCTIONS = "torchgen/packaged/ATen/native/native_functions.yaml"
PG_STUB = "torch/_C/_distributed_c10d.pyi"
C10D = "torch/distributed/distributed_c10d.py"
AUTOCAST_HEADER = "torch/include/ATen/autocast_mode.h"
VERSION = "torch/version.py"
FUNCTIONAL = re.compile(r"_c10d_functional\.([A-Za-z_][A-Za-z0-9_]*)")
FUNC_LINE = re.compile(r"^- func: ([A-Za-z0-9_.]+)\(", re.M)
AUTOCAST_LIST = re.compile(r"#define (AT_FORALL_[A-Z0-9_]+)\(_\)((?:[^\n]*\\\n)*[^\n]*)")
AUTOCAST_ENTRY = re.compile(r"_\(\s*([A-Za-z0-9_]+)\s*(?:,\s*([A-Za-z0-9_]+)\s*)?[,)]")


class Torch:
    """The files of one torch: a wheel or an installed site-packages folder."""

    def __init__(self, path: Path):
        self.path = path
        self.wheel = path.is_file() and path.suffix == ".whl"
        self._zip = zipfile.ZipFile(path) if self.wheel else None

    def read(self, rel: str) -> str:
        if self._zip is not None:
            return self._zip.read(rel).decode("utf-8")
        return (self.path / rel).read_text(encoding="utf-8")

    def python_files(self) -> list[str]:
        if self._zip is not None:
            return [n for n in self._zip.namelist() if n.startswith("torch/") and n.endswith(".py")]
        return [str(p.relative_to(self.path)) for p in (self.path / "torch").rglob("*.py")]

    def describe(self) -> dict[str, Any]:
        version = re.search(r"__version__ = '([^']+)'", self.read(VERSION))
        git = re.search(r"git_version = '([^']+)'", self.read(VERSION))
        found: dict[str, Any] = {
            "version": version.group(1) if version else None,
            "git_version": git.group(1) if git else None,
        }
        if self.wheel:
            digest = hashlib.sha256(self.path.read_bytes()).hexdigest()
            found.update({"read_from": "wheel", "file": self.path.name, "sha256": digest})
        else:
            found["read_from"] = "installed files"
        return found


def aten_ops(torch: Torch) -> set[str]:
    """`aten::name` or `aten::name.overload`, every registered overload."""
    return {f"aten::{name}" for name in FUNC_LINE.findall(torch.read(NATIVE_FUNCTIONS))}


def process_group_methods(torch: Torch) -> set[str]:
    tree = ast.parse(torch.read(PG_STUB))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ProcessGroup":
            return {
                item.name
                for item in node.body
                if isinstance(item, ast.FunctionDef) and not item.name.startswith("__")
            }
    raise SystemExit(f"no ProcessGroup class in {PG_STUB}")


def functional_ops(torch: Torch) -> set[str]:
    found: set[str] = set()
    for rel in torch.python_files():
        if "distributed" in rel or rel.startswith("torch/_"):
            found |= {f"_c10d_functional::{n}" for n in FUNCTIONAL.findall(torch.read(rel))}
    return found


def autocast_lists(torch: Torch) -> dict[str, set[str]]:
    """Each `AT_FORALL_*` list: the ops in it (`aten::name` or `aten::name.overload`)."""
    lists: dict[str, set[str]] = {}
    for name, body in AUTOCAST_LIST.findall(torch.read(AUTOCAST_HEADER)):
        if "DEPRECATED" in name:
            continue
        ops = set()
        for op, overload in AUTOCAST_ENTRY.findall(body.replace("\\\n", " ")):
            ops.add(f"aten::{op}.{overload}" if overload else f"aten::{op}")
        lists[name] = ops
    return lists


def _forwarders_and_calls(
    source: str,
) -> tuple[dict[str, tuple[str, int]], dict[str, list[tuple[str, int]]]]:
    """(deprecated function -> (what it forwards to, line)), (public function -> the
    ProcessGroup methods it calls on `group`, with lines)."""
    tree = ast.parse(source)
    forwards: dict[str, tuple[str, int]] = {}
    calls: dict[str, list[tuple[str, int]]] = {}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        deprecated = any(
            isinstance(d, ast.Call) and getattr(d.func, "id", None) == "deprecated"
            for d in node.decorator_list
        )
        body = [s for s in node.body if not isinstance(s, ast.Expr)]  # past the docstring
        if deprecated and len(body) == 1 and isinstance(body[0], ast.Return):
            value = body[0].value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
                forwards[node.name] = (value.func.id, node.lineno)
        for inner in ast.walk(node):
            if (
                isinstance(inner, ast.Call)
                and isinstance(inner.func, ast.Attribute)
                and isinstance(inner.func.value, ast.Name)
                and inner.func.value.id == "group"
            ):
                calls.setdefault(node.name, []).append((inner.func.attr, inner.lineno))
    return forwards, calls


def equivalences(old: Torch, new: Torch, new_methods: set[str], old_methods: set[str]) -> dict:
    """For each ProcessGroup method of the newer torch that the older lacks: the older method
    torch says it stands for, and where it says so (None where nothing does)."""
    old_forwards, old_calls = _forwarders_and_calls(old.read(C10D))
    new_forwards, new_calls = _forwarders_and_calls(new.read(C10D))
    found: dict[str, Any] = {}
    for method in sorted(new_methods - old_methods):
        callers = [f for f, cs in new_calls.items() if any(m == method for m, _ in cs)]
        for caller in callers:
            # the public names that reach `caller` in the newer torch: itself and the deprecated
            # forwarders to it; the older torch's same names, and what they called on the group
            names = [caller] + [f for f, (to, _) in new_forwards.items() if to == caller]
            for name in names:
                olds = {m for m, _ in old_calls.get(name, []) if m in old_methods}
                if len(olds) != 1:
                    continue
                old_method = olds.pop()
                new_line = next(line for m, line in new_calls[caller] if m == method)
                old_line = next(line for m, line in old_calls[name] if m == old_method)
                how = (
                    f"`{name}` is a deprecated forwarder to `{caller}` "
                    f"({C10D}:{new_forwards[name][1]})"
                    if name != caller
                    else f"the same public function `{name}`"
                )
                found[method] = {
                    "stands_for": old_method,
                    "declared_by": (
                        f"{how}: the newer torch calls ProcessGroup.{method} "
                        f"({C10D}:{new_line}), the older ProcessGroup.{old_method} "
                        f"({C10D}:{old_line})"
                    ),
                }
                break
            if method in found:
                break
        if method not in found:
            found[method] = None
    return found


def profile_torch(snapshot: Snapshot) -> dict[str, Any]:
    """The torch the profile's source asks for, and where it says so."""
    text = snapshot.read("pyproject.toml")
    for number, line in enumerate(text.splitlines(), start=1):
        match = re.search(r'"torch\s*([~=<>!]=?\s*[0-9][0-9.]*)"', line)
        if match:
            spec = match.group(1).replace(" ", "")
            version = re.search(r"[0-9]+(?:\.[0-9]+)*", spec)
            return {
                "requirement": f"torch{spec}",
                "version": version.group(0) if version else None,
                "where": f"pyproject.toml:{number}",
            }
    raise SystemExit("the snapshot's pyproject.toml asks for no torch")


def _profile_names(out: Path, name: str) -> set[str]:
    ops = set()
    for raw in (out / name).read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip().split("\t", 1)[0]
        if line:
            ops.add(line if "::" in line else f"aten::{line}")
    return ops


def _diff(old: set[str], new: set[str]) -> dict[str, list[str]]:
    return {"added": sorted(new - old), "removed": sorted(old - new)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the profile's torch: a wheel")
    parser.add_argument("--new", type=Path, default=None, help="site-packages of the run's torch")
    parser.add_argument("--snapshot", type=Path, required=True, help="TorchNeuron's snapshot")
    parser.add_argument("--commit", default=None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.new is None:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            raise SystemExit("no torch installed: pass --new")
        args.new = Path(spec.origin).parents[1]
    old, new = Torch(args.old), Torch(args.new)
    snapshot = Snapshot(args.snapshot, args.commit)
    old_aten, new_aten = aten_ops(old), aten_ops(new)
    old_pg, new_pg = process_group_methods(old), process_group_methods(new)
    old_auto, new_auto = autocast_lists(old), autocast_lists(new)
    native = _profile_names(args.out, "native-ops.txt")
    autocast_policy = _profile_names(args.out, "autocast-policy.txt")
    data = {
        "written_by": "scripts/extract_torch_skew.py (files read with ast and regexes; nothing run)",
        "profile_torch": {
            **profile_torch(snapshot),
            "source": {
                "repository": "github.com/parmoham-aws/test-repo-parmoham",
                "commit": snapshot.commit,
            },
        },
        "old": old.describe(),
        "new": new.describe(),
        "aten": {"read_from": NATIVE_FUNCTIONS, **_diff(old_aten, new_aten)},
        "process_group": {
            "read_from": PG_STUB,
            **_diff(old_pg, new_pg),
            "equivalent": equivalences(old, new, new_pg, old_pg),
            "equivalent_read_from": C10D,
        },
        "c10d_functional": {
            "read_from": "torch/**/*.py: torch.ops._c10d_functional.NAME (the ops its Python calls)",
            **_diff(functional_ops(old), functional_ops(new)),
        },
        "autocast": {
            "read_from": AUTOCAST_HEADER,
            "lists": {
                name: _diff(old_auto.get(name, set()), new_auto.get(name, set()))
                for name in sorted(set(old_auto) | set(new_auto))
            },
        },
        "profile": {
            # registered by the snapshot under a name its torch had and the newer has not
            "native_ops_gone_in_new": sorted((native & old_aten) - new_aten),
            # the autocast policy's ops (the newer torch's lists) the profile's torch lacked
            "autocast_policy_not_in_old": sorted(autocast_policy - old_aten),
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "torch-skew.json"
    target.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    counts = {
        "aten added": len(data["aten"]["added"]),
        "aten removed": len(data["aten"]["removed"]),
        "ProcessGroup added": len(data["process_group"]["added"]),
        "equivalent": sum(1 for v in data["process_group"]["equivalent"].values() if v),
        "c10d_functional added": len(data["c10d_functional"]["added"]),
        "autocast changes": sum(
            len(v["added"]) + len(v["removed"]) for v in data["autocast"]["lists"].values()
        ),
    }
    print(f"{target}: " + ", ".join(f"{k} {v}" for k, v in counts.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
