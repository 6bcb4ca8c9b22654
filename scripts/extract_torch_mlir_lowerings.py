"""List the ATen ops Torch-MLIR can lower to StableHLO, from a torch-mlir source checkout.

Two sources, read as text (nothing is built):
- the conversions of lib/Conversion/TorchToStablehlo/*.cpp: every op class marked illegal there
  (`target.addIllegalOp<...>()`, and the `INSERT_*_PATTERN(AtenXOp, ...)` macros that do it);
- the ops the backend contract decomposes before that conversion: the `addIllegalOp` calls of
  `markDecomposedOpsAsIllegal` in lib/Dialect/Torch/Transforms/LowerToBackendContract.cpp.
Op classes map to ATen names through include/torch-mlir/Dialect/Torch/IR/GeneratedTorchOps.td.
Macro- and template-registered patterns are what a plain `patterns.add<ConvertAtenXOp>` grep
misses (aten::new_ones, aten::zeros_like, aten::addcmul, aten::scalar_tensor, ...).

    python scripts/extract_torch_mlir_lowerings.py /path/to/torch-mlir > lowerings.txt
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def _show(repo: Path, path: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "show", f"HEAD:{path}"], capture_output=True, text=True
    )
    if done.returncode == 0:
        return done.stdout
    return (repo / path).read_text()


def _files(repo: Path, folder: str) -> list[str]:
    done = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "--name-only", "HEAD", folder + "/"],
        capture_output=True,
        text=True,
    )
    if done.returncode == 0:
        return done.stdout.split()
    return [str(p.relative_to(repo)) for p in sorted((repo / folder).glob("*"))]


def _illegal(text: str) -> set[str]:
    found: set[str] = set()
    for group in re.findall(r"addIllegalOp<([^>]*)>", text):
        found |= set(re.findall(r"\b(Aten\w+Op)\b", group))
    found |= set(re.findall(r"\bINSERT_\w+\(\s*(Aten\w+Op)\b", text))
    return found


def lowerings(repo: Path) -> tuple[list[str], str]:
    td = _show(repo, "include/torch-mlir/Dialect/Torch/IR/GeneratedTorchOps.td")
    names = dict(re.findall(r'def Torch_(\w+)\s*:\s*Torch_Op<"([\w.]+)"', td))
    classes: set[str] = set()
    for path in _files(repo, "lib/Conversion/TorchToStablehlo"):
        if path.endswith(".cpp"):
            classes |= _illegal(_show(repo, path))
    contract = _show(repo, "lib/Dialect/Torch/Transforms/LowerToBackendContract.cpp")
    start = contract.rindex("static void markDecomposedOpsAsIllegal")
    classes |= _illegal(contract[start : contract.index("\n}\n", start)])
    ops = set()
    for cls in classes:
        op = names.get(cls, "")
        if op.startswith("aten."):
            base, _, overload = op[len("aten.") :].partition(".")
            ops.add(f"aten::{base}" + (f".{overload}" if overload else ""))
    commit = subprocess.run(
        ["git", "-C", str(repo), "log", "-1", "--format=%H %cs"], capture_output=True, text=True
    ).stdout.strip()
    return sorted(ops), commit


def main(argv: list[str]) -> int:
    repo = Path(argv[0] if argv else ".")
    ops, commit = lowerings(repo)
    print(f"# torch-mlir {commit or '(unknown commit)'}: {len(ops)} ops")
    print("\n".join(ops))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
