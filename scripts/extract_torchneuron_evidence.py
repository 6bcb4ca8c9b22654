"""Derive the neuron compiler's evidence sets, and the eager kernels' facts, from a TorchNeuron
source snapshot (github.com/parmoham-aws/test-repo-parmoham). Writes data files; copies no code.

Read as text (ast), nothing of the snapshot run:
- `compile-decomposed.txt`: the ops of its compile decomposition table
  (neuron_dynamo_backend/decompositions.py: the `get_decompositions([...])` list it takes from
  PyTorch, its own `@register_decomposition` functions, and `get_compile_decomposition_table`'s
  compile-only additions);
- `compile-raises.txt`: every `raise` in those decomposition functions, with its line and
  message (the conditions the emulator applies are code in runners/devices/neuron/rules.py);
- `mlir-kernels.txt`: the Torch-MLIR kernels that serve eager calls (`@register_aten` in
  python_ops/torch_mlir/ops/*.py, less the names registered before them: C++ `m.impl`, the
  `aten_lib.impl` calls of python_ops/__init__.py and the `@neuron_*op` classes; the first
  registration wins);
- `host-args-raise.txt`: the registered overloads whose first implementation's `can_handle` is
  python_ops/base.py's default (or calls it), which raises on a non-0-dim host tensor argument;
- `python-kernels.txt`: every overload a Python implementation serves (the Torch-MLIR kernels,
  the `@neuron_*op` classes, python_ops/__init__.py's `aten_lib.impl`): their kernels write
  fresh output tensors (`io_tensor.empty` of the kernel's output spec, kernels/xla_kernel.py's
  `torch.empty`), contiguous whatever the inputs' layout.

Run (in a subprocess each, with torch), never imported by the project:
- `compile-registered.txt`: the ops of the eager Torch-MLIR kernels' traced bodies. Each kernel
  function (the `@register_aten` body, loaded from the snapshot with a stand-in `register_aten`)
  is traced with `make_fx` and functionalized, with the PyTorch decompositions TorchNeuron's table
  takes, on the ATen-level arguments its op receives when PyTorch's OpInfo samples run (float32
  and int64 samples, cast as TorchNeuron's dtype autocast casts: float64 to float32, int64 to
  int32; ops PyTorch decomposes above the dispatcher are taken from their Python calls). Kernel.py
  traces the same way before `convert_fx_to_stablehlo` (lines 177-178, 357): every op in a body
  is one the converter lowers, when the kernel works;
- `compile-tested.txt`: the ops of the graphs the snapshot's own compile tests
  (tests/neuron_dynamo_backend, `torch.compile(..., backend="neuron")`) hand to the backend, run
  on the emulated device with a backend that records each AOT graph (same decompositions) and
  then runs it eagerly (raising where TorchNeuron's compile raises). Only tests that pass count.

TorchNeuron's own decompositions (not PyTorch's) cannot be run outside TorchNeuron (they import
its NKI kernels), so ops they replace are left out of the traced and tested sets: they are
`decomposed`.

    python scripts/extract_torchneuron_evidence.py SNAPSHOT [--commit SHA] [--out DIR]
        [--parts static,registered,tested]

SNAPSHOT is a work tree or a git directory (then read at --commit, default HEAD).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = (
    ROOT / "runners" / "devices" / "neuron" / "data" / "profiles" / "torchneuron-2026-04-21"
)
DECOMPOSITIONS = "torch_neuronx/neuron_dynamo_backend/decompositions.py"
MLIR_OPS = "torch_neuronx/python_ops/torch_mlir/ops"
PYTHON_OPS = "torch_neuronx/python_ops"
BINDINGS = "torch_neuronx/csrc/core/NeuronBindings.cpp"
COMPILE_TESTS = "tests/neuron_dynamo_backend"
OPERATION_DECORATORS = ("neuron_op", "neuron_unary_op", "neuron_binary_op", "neuron_reduction_op")


class Snapshot:
    """Files of the snapshot: a work tree, or a git directory at one commit."""

    def __init__(self, path: Path, commit: str | None):
        self.path = path
        self.git = (path / "HEAD").is_file() and (path / "objects").is_dir()
        if self.git:
            rev = commit or "HEAD"
            self.commit = self._git("rev-parse", rev).strip()
        else:
            self.commit = commit or "(unknown commit)"

    def _git(self, *args: str) -> str:
        return subprocess.run(
            ["git", f"--git-dir={self.path}", *args], capture_output=True, text=True, check=True
        ).stdout

    def read(self, rel: str) -> str:
        if self.git:
            return self._git("show", f"{self.commit}:{rel}")
        return (self.path / rel).read_text(encoding="utf-8")

    def files(self, folder: str) -> list[str]:
        if self.git:
            out = self._git("ls-tree", "-r", "--name-only", self.commit, folder + "/")
            return sorted(out.split())
        base = self.path / folder
        return sorted(str(p.relative_to(self.path)) for p in base.rglob("*") if p.is_file())

    def materialize(self, folder: str, into: Path) -> Path:
        """The files under `folder`, written below `into` (a git snapshot has no work tree)."""
        if not self.git:
            return self.path
        for rel in self.files(folder):
            target = into / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(self.read(rel), encoding="utf-8")
        return into


# ---------------------------------------------------------------------------------------------
# Static facts (ast)


def _aten_name(node: ast.AST) -> str | None:
    """`aten.x.overload` -> `aten::x.overload`, `aten.x.default` -> `aten::x`, and a whole
    packet `aten.x` -> `aten::x.*` (also through `torch.ops.aten`)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    parts.reverse()
    if "aten" not in parts:
        return None
    rest = parts[parts.index("aten") + 1 :]
    if not rest:
        return None
    name = f"aten::{rest[0]}"
    if len(rest) == 1:
        return f"{name}.*"
    return name if rest[1] == "default" else f"{name}.{rest[1]}"


def _op_list(node: ast.AST) -> list[str]:
    items = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    return [n for n in (_aten_name(i) for i in items) if n]


def decomposition_table(snap: Snapshot) -> tuple[dict[str, tuple[int, str]], list[dict]]:
    """op -> (line, kind: pytorch | own | compile-only), and the raise sites of own functions."""
    tree = ast.parse(snap.read(DECOMPOSITIONS))
    ops: dict[str, tuple[int, str]] = {}
    raises: list[dict] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "get_decompositions"
            and node.args
        ):
            for item in getattr(node.args[0], "elts", []):
                name = _aten_name(item)
                if name:
                    ops.setdefault(name, (item.lineno, "pytorch"))
        if isinstance(node, ast.FunctionDef):
            registered: list[str] = []
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call) and getattr(dec.func, "id", "") == (
                    "register_decomposition"
                ):
                    registered += _op_list(dec.args[0])
            for name in registered:
                ops.setdefault(name, (node.lineno, "own"))
            if node.name == "get_compile_decomposition_table":
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Dict):
                        for key in sub.keys:
                            name = _aten_name(key) if key is not None else None
                            if name:
                                ops.setdefault(name, (key.lineno, "compile-only"))
    # raise sites, per function; attributed to ops through the registrations and the table
    by_function: dict[str, list[str]] = defaultdict(list)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call) and getattr(dec.func, "id", "") == (
                    "register_decomposition"
                ):
                    by_function[node.name] += _op_list(dec.args[0])
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=False):
                name = _aten_name(key) if key is not None else None
                if name and isinstance(value, ast.Name):
                    by_function[value.id].append(name)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in by_function:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Raise) and sub.exc is not None:
                    message = ""
                    exc = sub.exc
                    if isinstance(exc, ast.Call) and exc.args:
                        message = ast.unparse(exc.args[0])
                    kind = ast.unparse(exc.func if isinstance(exc, ast.Call) else exc)
                    for op in by_function[node.name]:
                        raises.append(
                            {"op": op, "line": sub.lineno, "type": kind, "message": message}
                        )
    return ops, raises


def _registration_names(text: str, pattern: str) -> list[str]:
    return [f"aten::{m}" for m in re.findall(pattern, text)]


def _decorated(tree: ast.AST) -> list[tuple[str, ast.ClassDef | ast.FunctionDef, int]]:
    """(aten name, the decorated class or function, priority) of `@neuron_*op(...)` uses."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            for dec in node.decorator_list:
                if (
                    isinstance(dec, ast.Call)
                    and getattr(dec.func, "id", "") in OPERATION_DECORATORS
                    and dec.args
                    and isinstance(dec.args[0], ast.Constant)
                ):
                    priority = 50
                    for kw in dec.keywords:
                        if kw.arg == "priority" and isinstance(kw.value, ast.Constant):
                            priority = int(kw.value.value)
                    if len(dec.args) > 1 and isinstance(dec.args[1], ast.Constant):
                        priority = int(dec.args[1].value)
                    found.append((str(dec.args[0].value), node, priority))
    return found


def _python_op_files(snap: Snapshot) -> list[str]:
    """python_ops modules the auto-registration imports (legacy/ and jax/ are skipped)."""
    return [
        f
        for f in snap.files(PYTHON_OPS)
        if f.endswith(".py") and "/legacy/" not in f and "/jax/" not in f
    ]


def _normalise(name: str) -> str:
    name = name if "::" in name else f"aten::{name}"
    return name[: -len(".default")] if name.endswith(".default") else name


def kernel_facts(
    snap: Snapshot,
) -> tuple[dict[str, str], dict[str, str], dict[str, str], dict[str, str]]:
    """(effective Torch-MLIR kernels op -> source, shadowed ones op -> by what,
    host-argument verdict op -> why, Python-served ops -> by what) for every registered
    overload the analysis can reach."""
    cpp = snap.read(BINDINGS)
    cpp_ops = {
        _normalise(m)
        for m in re.findall(r'^\s*m\.impl\(\s*"([\w.]+)"', cpp, flags=re.M)
        if not m.startswith("_has_compatible")
    }
    init = snap.read(f"{PYTHON_OPS}/__init__.py")
    common = {_normalise(m) for m in re.findall(r'aten_lib\.impl\(\s*"([\w.]+)"', init)}
    classes: dict[str, ast.ClassDef] = {}
    trees: dict[str, ast.AST] = {}
    for rel in _python_op_files(snap):
        tree = ast.parse(snap.read(rel))
        trees[rel] = tree
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, node)
    operations: dict[str, list[tuple[int, str]]] = defaultdict(list)  # op -> (priority, class)
    for _rel, tree in sorted(trees.items()):
        for name, node, priority in _decorated(tree):
            operations[_normalise(name)].append((priority, node.name))
    mlir: dict[str, str] = {}
    shadowed: dict[str, str] = {}
    for rel in snap.files(MLIR_OPS):
        if not rel.endswith(".py"):
            continue
        tree = trees.get(rel) or ast.parse(snap.read(rel))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call) and getattr(dec.func, "id", "") == "register_aten":
                    names = dec.args[0]
                    values = names.elts if isinstance(names, (ast.List, ast.Tuple)) else [names]
                    for v in values:
                        if not isinstance(v, ast.Constant):
                            continue
                        op = _normalise(str(v.value))
                        where = f"{rel.removeprefix('torch_neuronx/')}:{node.lineno} {node.name}"
                        if op in cpp_ops:
                            shadowed[op] = f"C++ m.impl ({where})"
                        elif op in common:
                            shadowed[op] = f"python_ops/__init__.py aten_lib.impl ({where})"
                        elif op in operations:
                            shadowed[op] = f"@neuron_op {operations[op][0][1]} ({where})"
                        else:
                            mlir[op] = where

    def default_can_handle(cls_name: str, seen: frozenset[str] = frozenset()) -> str:
        """'default' / 'super' / 'own': how `cls_name` resolves `can_handle`."""
        cls = classes.get(cls_name)
        if cls is None or cls_name in seen:
            return "default" if cls_name in ("OperationImplementation", "CompilableOpImpl") else "?"
        for item in cls.body:
            if isinstance(item, ast.FunctionDef) and item.name == "can_handle":
                if cls_name == "OperationImplementation":
                    return "default"
                calls = [
                    n
                    for n in ast.walk(item)
                    if isinstance(n, ast.Attribute)
                    and n.attr == "can_handle"
                    and isinstance(n.value, ast.Call)
                    and getattr(n.value.func, "id", "") == "super"
                ]
                return "super" if calls else "own"
        for base in cls.bases:
            base_name = ast.unparse(base).rsplit(".", 1)[-1]
            found = default_can_handle(base_name, seen | {cls_name})
            if found != "?":
                return found
        return "?"

    host: dict[str, str] = {}
    for op, impls in operations.items():
        if op in cpp_ops or op in common:
            continue
        first = sorted(impls, key=lambda pi: -pi[0])[0][1]
        how = default_can_handle(first)
        host[op] = f"{how} ({first})"
    for op, where in mlir.items():
        host[op] = f"default (TorchMlirOpImpl, {where})"
    python: dict[str, str] = {op: f"Torch-MLIR kernel {where}" for op, where in mlir.items()}
    for op, impls in operations.items():
        if op not in cpp_ops and op not in common:
            python[op] = f"@neuron_op {sorted(impls, key=lambda pi: -pi[0])[0][1]}"
    for op in common - cpp_ops:
        python[op] = "python_ops/__init__.py aten_lib.impl"
    return mlir, shadowed, host, python


# ---------------------------------------------------------------------------------------------
# Run in subprocesses: traced kernel bodies, compile tests


def _run_part(part: str, snap: Snapshot, work: Path, payload: dict, timeout: int) -> dict:
    """Run `part` of this script in a fresh interpreter (torch, the emulator, snapshot code)."""
    src = snap.materialize("torch_neuronx", work) if snap.git else snap.path
    if part == "tested" and snap.git:
        snap.materialize(COMPILE_TESTS, work)
    payload = {**payload, "snapshot": str(src)}
    out = work / f"{part}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, __file__, "--child", part, json.dumps(payload), str(out)]
    subprocess.run(command, env=env, timeout=timeout, check=True)
    return json.loads(out.read_text())


def _pytorch_decompositions(names: list[str]) -> dict:
    import torch
    from torch._decomp import get_decompositions

    ops = []
    for name in names:
        base, _, overload = name.removeprefix("aten::").removesuffix(".*").partition(".")
        packet = getattr(torch.ops.aten, base, None)
        if packet is not None:
            ops.append(getattr(packet, overload) if overload else packet)
    return get_decompositions(ops)


def _load_kernels(snapshot: str) -> dict[str, dict]:
    """op -> {fn, preprocessing} of every `@register_aten` in the snapshot's ops modules,
    loaded with a stand-in `register_aten` (the snapshot's module code runs: plain torch)."""
    import importlib.abc
    import importlib.machinery
    import types

    root = Path(snapshot)
    captured: dict[str, dict] = {}

    def register_aten(operations, output_params=None, static_argnums=None, static_argnames=None,
                      uses_preprocessing=False):  # fmt: skip
        names = [operations] if isinstance(operations, str) else list(operations)

        def decorator(fn):
            for name in names:
                captured.setdefault(
                    _normalise(name), {"fn": fn, "preprocessing": uses_preprocessing}
                )
            return fn

        return decorator

    prefix = "torch_neuronx.python_ops.torch_mlir"
    registry = types.ModuleType(f"{prefix}.operation_registry")
    registry.register_aten = register_aten  # type: ignore[attr-defined]
    # torch_neuronx.utils reads TorchNeuron's environment: its defaults, as stand-ins
    utils = types.ModuleType("torch_neuronx.utils")
    utils.skip_op_preconditions = lambda: False  # type: ignore[attr-defined]
    utils.use_mlir_aten_ops = lambda: True  # type: ignore[attr-defined]
    given = {registry.__name__: registry, utils.__name__: utils}

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name in given:
                return importlib.machinery.ModuleSpec(name, _Given(given[name]))
            if name.startswith("torch_neuronx"):
                rel = Path(*name.split("."))
                if (root / rel).is_dir():
                    spec = importlib.machinery.ModuleSpec(name, _Given(types.ModuleType(name)))
                    spec.submodule_search_locations = [str(root / rel)]
                    return spec
                if name.startswith(f"{prefix}.ops.") and (root / rel.with_suffix(".py")).is_file():
                    loader = importlib.machinery.SourceFileLoader(
                        name, str(root / rel.with_suffix(".py"))
                    )
                    return importlib.machinery.ModuleSpec(name, loader)
                raise ImportError(f"not loaded from the snapshot: {name}")
            return None

    class _Given(importlib.abc.Loader):
        def __init__(self, module):
            self.module = module

        def create_module(self, spec):
            return self.module

        def exec_module(self, module):
            module.__path__ = getattr(module, "__path__", [])

    sys.meta_path.insert(0, Finder())
    import importlib as _il

    for path in sorted((root / "torch_neuronx/python_ops/torch_mlir/ops").glob("*.py")):
        if path.stem == "__init__" or "register_aten" not in path.read_text():
            continue
        try:
            _il.import_module(f"{prefix}.ops.{path.stem}")
        except Exception as exc:  # a module needing more of TorchNeuron: reported, skipped
            print(f"# skipped {path.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return captured


def _child_registered(payload: dict) -> dict:
    """Trace every kernel body on the ATen arguments its op receives in OpInfo samples."""
    import torch
    import torch.utils._pytree as pytree
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.overrides import TorchFunctionMode
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.utils._python_dispatch import TorchDispatchMode

    kernels = _load_kernels(payload["snapshot"])
    table = _pytorch_decompositions(payload["pytorch_decompositions"])
    # a kernel function serves several overloads (functional, .out, in-place); its body is
    # traced once, on the ATen arguments of any overload of those base names
    functions: dict[Any, list[str]] = defaultdict(list)
    for op, kernel in kernels.items():
        functions[kernel["fn"]].append(op)
    wanted = {_base(op) for op in kernels}
    calls: dict[str, list] = defaultdict(list)

    def keep(x):
        """A copy of an argument, as TorchNeuron's dtype autocast hands it to the kernel."""
        if isinstance(x, torch.Tensor):
            dtype = {torch.float64: torch.float32, torch.int64: torch.int32}.get(x.dtype, x.dtype)
            return x.detach().clone().to(x.dtype if x.dim() == 0 else dtype)
        if isinstance(x, torch.dtype):
            return {torch.float64: torch.float32, torch.int64: torch.int32}.get(x, x)
        return x

    def note(name: str, args, kwargs) -> None:
        if _base(name) in wanted and len(calls[name]) < 3:
            with contextlib.suppress(Exception):
                calls[name].append(pytree.tree_map(keep, (args, kwargs)))

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            note(_normalise(func.name()), args, kwargs)
            return func(*args, **kwargs)

    class RecordComposites(TorchFunctionMode):
        """Ops PyTorch decomposes above the dispatcher (`linear`, `log_softmax`, `one_hot`)
        never reach a dispatch mode: their Python calls are taken by name."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if name and not name.startswith("_"):
                note(f"aten::{name}", args, kwargs)
            return func(*args, **kwargs)

    for info in op_db:
        for dtype in (torch.float32, torch.int64):
            if dtype not in info.supported_dtypes("cpu"):
                continue
            grad = dtype.is_floating_point and info.supports_autograd
            try:
                samples = list(info.sample_inputs("cpu", dtype, requires_grad=grad))[:3]
            except Exception:
                continue
            for sample in samples:
                try:
                    with RecordComposites(), Record():
                        out = info.op(sample.input, *sample.args, **sample.kwargs)
                        outs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
                        if grad and outs and outs[0].requires_grad:
                            outs[0].float().sum().backward()
                except Exception:
                    continue
    traced: dict[str, list[str]] = {}
    untraced: dict[str, str] = {}
    for fn, ops in functions.items():
        kernel = kernels[ops[0]]
        label = f"{fn.__name__} ({', '.join(sorted(ops))})"
        bases = {_base(op) for op in ops}
        candidates = [c for op in sorted(ops) for c in calls.get(op, [])]
        candidates += [
            c for name in sorted(calls) if _base(name) in bases and name not in ops
            for c in calls[name]
        ]  # fmt: skip
        if not candidates:
            untraced[label] = "no OpInfo sample reaches its ops"
            continue
        last = "?"
        for args, kwargs in candidates:
            flat, spec = pytree.tree_flatten((args, kwargs))
            positions = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]

            def body(*tensors, flat=flat, spec=spec, positions=positions, kernel=kernel):
                values = list(flat)
                for i, t in zip(positions, tensors, strict=True):
                    values[i] = t
                a, k = pytree.tree_unflatten(values, spec)
                k = {key: v for key, v in k.items() if key not in _PYTORCH_SPECIFIC}
                fn = kernel["fn"]
                if kernel["preprocessing"]:
                    prepared = fn(*a, **k)
                    fn, a, k = prepared[0], prepared[1], prepared[2]
                return fn(*a, **k)

            try:
                gm = make_fx(
                    torch.func.functionalize(body, remove="mutations_and_views"),
                    decomposition_table=table,
                    tracing_mode="real",
                )(*(flat[i] for i in positions))
            except Exception as exc:
                last = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
                continue
            body_ops = sorted(
                {
                    _normalise(n.target.name())
                    for n in gm.graph.nodes
                    if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                }
            )
            traced[label] = body_ops
            break
        else:
            untraced[label] = f"tracing failed: {last}"
    return {"traced": traced, "untraced": untraced, "kernels": len(functions)}


# python_ops/shared/config.py CompilationConfig.PYTORCH_SPECIFIC_PARAMS: dropped before tracing
_PYTORCH_SPECIFIC = frozenset(
    {"out", "device", "pin_memory", "memory_format", "layout", "requires_grad"}
)


def _base(op: str) -> str:
    name = op.split(".", 1)[0]
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def _child_tested(payload: dict) -> dict:
    """Run the snapshot's compile tests on the emulated device with a recording backend."""
    import pytest

    root = Path(payload["snapshot"])
    results: dict = {"tests": {}, "files": {}}
    plugin = _TestedPlugin(payload, results)
    for rel in payload["files"]:
        path = root / rel
        code = pytest.main(
            [str(path), "-q", "-p", "no:cacheprovider", "--rootdir", str(root)], plugins=[plugin]
        )
        results["files"][rel] = int(code)
    return results


class _TestedPlugin:
    """Installs the emulated device and a recording `neuron` backend; records per test the ops
    of every graph the backend received and the test's outcome."""

    def __init__(self, payload: dict, results: dict):
        self.payload = payload
        self.results = results
        self.current: str | None = None
        self.ops: dict[str, set[str]] = defaultdict(set)
        self._installed = False

    def pytest_configure(self, config):
        if self._installed:
            return
        self._installed = True
        import types

        import torch
        import torch._dynamo
        from torch._dynamo.backends.common import aot_autograd

        class _Any(types.ModuleType):  # a stand-in package: any attribute is a stand-in too
            __path__: list[str] = []

            def __getattr__(self, name):
                if name.startswith("__"):
                    raise AttributeError(name)
                from unittest import mock

                return mock.MagicMock(name=f"{self.__name__}.{name}")

        class _Finder:
            def find_spec(self, name, path=None, target=None):
                import importlib.machinery

                if name.split(".")[0] in ("torch_neuronx", "neuronxcc", "libneuronxla"):
                    return importlib.machinery.ModuleSpec(name, _Loader())
                return None

        class _Loader:
            def create_module(self, spec):
                return _Any(spec.name)

            def exec_module(self, module):
                return None

        sys.meta_path.insert(0, _Finder())
        table = _pytorch_decompositions(self.payload["pytorch_decompositions"])

        from runners.devices.neuron.rules import compile_raise_reason

        def record(gm, example_inputs):
            from functorch.compile import make_boxed_func

            seen = set()
            for node in gm.graph.nodes:
                if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
                    op = _normalise(node.target.name())
                    reason = compile_raise_reason(op, node)
                    if reason:  # where TorchNeuron's compile raises, so does this backend
                        raise RuntimeError(reason)
                    seen.add(op)
            self.ops[self.current or "?"] |= seen
            return make_boxed_func(gm.forward)

        backend = aot_autograd(
            fw_compiler=record, keep_inference_input_mutations=True, decompositions=table
        )
        torch._dynamo.register_backend(name="neuron", compiler_fn=backend)
        from runners.devices import get_device

        get_device("neuron-emulated").setup()

    def pytest_runtest_setup(self, item):
        import torch._dynamo

        torch._dynamo.reset()
        self.current = item.nodeid

    def pytest_runtest_logreport(self, report):
        if report.when != "call" and not (report.when == "setup" and report.skipped):
            return
        xfail = hasattr(report, "wasxfail")
        outcome = "xfail" if xfail else report.outcome
        self.results["tests"][report.nodeid] = {
            "outcome": outcome,
            "ops": sorted(self.ops.get(report.nodeid, ())),
        }


def _child(argv: list[str]) -> int:
    part, payload, out = argv[0], json.loads(argv[1]), Path(argv[2])
    result = _child_registered(payload) if part == "registered" else _child_tested(payload)
    out.write_text(json.dumps(result))
    os._exit(0)  # the emulator's backend and pytest's plugins: no teardown needed


# ---------------------------------------------------------------------------------------------
# Writing


def _header(snap: Snapshot, what: str, sources: list[str]) -> list[str]:
    return [
        f"# {what}",
        "# Derived by scripts/extract_torchneuron_evidence.py from the TorchNeuron source snapshot",
        f"# github.com/parmoham-aws/test-repo-parmoham at {snap.commit}",
        "# (pre-beta DEV build, 'snapshot 2026-04-21'), from: " + ", ".join(sources),
    ]


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {path} ({sum(1 for ln in lines if ln and not ln.startswith('#'))} entries)")


def _in(op: str, table: list[str]) -> bool:
    """`op` is in a decomposition table (exactly, or through its whole packet `aten::x.*`)."""
    return op in table or f"{op.split('.', 1)[0]}.*" in table


def compile_test_files(snap: Snapshot) -> list[str]:
    """Snapshot test files that compile with the `neuron` backend (single device)."""
    found = []
    for rel in snap.files(COMPILE_TESTS):
        if (
            rel.endswith(".py")
            and Path(rel).name.startswith("test_")
            and 'backend="neuron"' in snap.read(rel)
        ):
            found.append(rel)
    return found


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--child":
        return _child(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshot", type=Path)
    parser.add_argument("--commit")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--parts", default="static,registered,tested")
    parser.add_argument("--timeout", type=int, default=3600)
    args = parser.parse_args(argv)
    snap = Snapshot(args.snapshot, args.commit)
    args.out.mkdir(parents=True, exist_ok=True)
    parts = set(args.parts.split(","))
    decomposed, raises = decomposition_table(snap)
    own = sorted(op for op, (_, kind) in decomposed.items() if kind != "pytorch")
    pytorch = sorted(op for op, (_, kind) in decomposed.items() if kind == "pytorch")
    mlir, shadowed, host, python = kernel_facts(snap)
    if "static" in parts:
        _write(
            args.out / "compile-decomposed.txt",
            _header(
                snap, "Ops TorchNeuron's compile path decomposes before lowering", [DECOMPOSITIONS]
            )
            + [
                "# op (`.*`: every overload)  # line, kind (pytorch: PyTorch's decomposition;"
                " own / compile-only: TorchNeuron's)"
            ]
            + [f"{op}  # {line} {kind}" for op, (line, kind) in sorted(decomposed.items())],
        )
        _write(
            args.out / "compile-raises.txt",
            _header(snap, "Where TorchNeuron's compile decompositions raise", [DECOMPOSITIONS])
            + [
                "# op  # line, exception: message (conditions applied: runners/devices/neuron/rules.py)"
            ]
            + [
                f"{r['op']}  # {r['line']} {r['type']}: {r['message'][:100]}"
                for r in sorted(raises, key=lambda r: (r["op"], r["line"]))
            ],
        )
        _write(
            args.out / "mlir-kernels.txt",
            _header(
                snap,
                "Eager Torch-MLIR kernels that serve calls",
                [f"{MLIR_OPS}/*.py", BINDINGS, f"{PYTHON_OPS}/**"],
            )
            + [
                "# op  # kernel (file:line function); shadowed registrations (first one wins) below, commented"
            ]
            + [f"{op}  # {where}" for op, where in sorted(mlir.items())]
            + [f"# {op}  shadowed by {by}" for op, by in sorted(shadowed.items())],
        )
        raising = {op: why for op, why in host.items() if why.split()[0] in ("default", "super")}
        _write(
            args.out / "host-args-raise.txt",
            _header(
                snap,
                "Registered ops whose first implementation raises on a non-0-dim host tensor",
                [f"{PYTHON_OPS}/base.py", f"{PYTHON_OPS}/**"],
            )
            + [
                "# op  # how its first implementation's can_handle resolves (default / super: base.py's, which raises)"
            ]
            + [f"{op}  # {why}" for op, why in sorted(raising.items())]
            + [f"# {op}  not: {why}" for op, why in sorted(host.items()) if op not in raising],
        )
        _write(
            args.out / "python-kernels.txt",
            _header(
                snap,
                "Registered ops a Python implementation serves (fresh, contiguous outputs)",
                [f"{PYTHON_OPS}/**", BINDINGS],
            )
            + ["# op  # the implementation"]
            + [f"{op}  # {why}" for op, why in sorted(python.items())],
        )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "registered" in parts:
            result = _run_part(
                "registered", snap, work, {"pytorch_decompositions": pytorch}, args.timeout
            )
            shown: dict[str, list[str]] = defaultdict(list)
            for kernel_op, ops in result["traced"].items():
                for op in ops:
                    shown[op].append(kernel_op)
            shown = {op: ks for op, ks in shown.items() if not _in(op, own)}
            lines = _header(
                snap,
                "Ops the converter lowers: the ops of the eager Torch-MLIR kernels' traced bodies",
                [f"{MLIR_OPS}/*.py", "python_ops/torch_mlir/kernel.py"],
            ) + [
                f"# {len(result['traced'])} of {result['kernels']} kernel functions traced on OpInfo samples' ATen arguments;"
                " ops TorchNeuron decomposes itself are left out",
                "# op  # kernel functions whose body has it (first 3)",
            ]
            lines += [f"{op}  # {', '.join(sorted(ks)[:3])}" for op, ks in sorted(shown.items())]
            lines += [f"# untraced {op}: {why}" for op, why in sorted(result["untraced"].items())]
            _write(args.out / "compile-registered.txt", lines)
        if "tested" in parts:
            files = compile_test_files(snap)
            result = _run_part(
                "tested",
                snap,
                work,
                {"pytorch_decompositions": pytorch, "files": files},
                args.timeout,
            )
            counted = {t: r for t, r in result["tests"].items() if r["outcome"] == "passed"}
            where: dict[str, list[str]] = defaultdict(list)
            for test, r in counted.items():
                for op in r["ops"]:
                    where[op].append(test)
            where = {op: ts for op, ts in where.items() if not _in(op, own)}
            outcomes = defaultdict(int)
            for r in result["tests"].values():
                outcomes[r["outcome"]] += 1
            lines = _header(
                snap,
                "Ops in graphs TorchNeuron's own compile tests compile (backend='neuron')",
                files,
            ) + [
                "# test outcomes on the emulated device with a recording backend: "
                + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
                + " (only passed tests count: a failure here may be the stand-ins')",
                "# op  # tests whose graphs have it (first 2)",
            ]
            lines += [f"{op}  # {', '.join(sorted(ts)[:2])}" for op, ts in sorted(where.items())]
            _write(args.out / "compile-tested.txt", lines)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
