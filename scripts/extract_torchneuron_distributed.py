"""Derive what the emulated device's process group follows from a TorchNeuron source snapshot
(github.com/parmoham-aws/test-repo-parmoham). Writes one data file; copies no code, runs nothing
of the snapshot (every fact is read with `ast` or `json`).

`distributed.json` (beside the op profile, runners/devices/neuron/data/profiles/torchneuron-2026-04-21/):
- `backend`: the name and devices `dist.Backend.register_backend` gets, and the class
  (torch_neuronx/distributed/backend.py);
- `one_device_per_process`: the assertion its runtime set-up makes;
- `collectives`: every c10d collective a `ProcessGroup` may implement, as `ProcessGroupNeuron`
  treats it: `implemented` (a method of its own), `raises` (the method raises
  NotImplementedError unconditionally), `limited` (it raises NotImplementedError for some
  arguments: the messages are kept), or `absent` (no method: c10d's base class answers); each
  with its line, and the snapshot's own tests that call it (tests/distributed/collective_ops,
  one file per collective, and tests/distributed/process_group);
- `reduce_ops`: the reductions its collectives' XLA kernels accept
  (python_ops/xla_ops/reduce_functions.py `SUPPORTED_REDUCE_OPS`);
- `all_to_all_world_sizes`: the group sizes the all-to-all kernel accepts
  (python_ops/xla_ops/all_to_all_xla.py `can_handle`: a set of sizes and a multiple);
- `functional_collectives`: the `_c10d_functional` ops it registers for the device
  (distributed/ops/functional_collectives.py);
- `sharding`: the ATen ops it adds DTensor sharding strategies for
  (distributed/tensor/register_sharding.py `@register_op_strategy`);
- `suites`: per distributed API the project checks (ddp, fsdp, tp), the snapshot's own tests of
  it: test files under tests/distributed with their test counts, and the upstream PyTorch
  suites it runs (tests/pytorch_tests/specs/fsdp_v2_spec.json, dtensor_tp_spec.json) with
  their sanity methods, skips and xfails, each with its reason.

    python scripts/extract_torchneuron_distributed.py SNAPSHOT [--commit SHA] [--out FILE]

SNAPSHOT is a work tree or a git directory (then read at --commit, default HEAD).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from extract_torchneuron_evidence import DEFAULT_OUT, Snapshot  # noqa: E402

BACKEND = "torch_neuronx/distributed/backend.py"
FUNCTIONAL = "torch_neuronx/distributed/ops/functional_collectives.py"
SHARDING = "torch_neuronx/distributed/tensor/register_sharding.py"
REDUCE_FUNCTIONS = "torch_neuronx/python_ops/xla_ops/reduce_functions.py"
ALL_TO_ALL = "torch_neuronx/python_ops/xla_ops/all_to_all_xla.py"
COLLECTIVE_TESTS = "tests/distributed/collective_ops"
PROCESS_GROUP_TESTS = "tests/distributed/process_group"
SPECS = "tests/pytorch_tests/specs"
PG_CLASS = "ProcessGroupNeuron"

# Every collective a c10d ProcessGroup may implement: torch 2.14's `ProcessGroup` methods
# (the `*_single` ones are newer than the snapshot's torch; FSDP2 and c10d's
# `all_gather_into_tensor` call them in 2.14).
COLLECTIVES = (
    "allreduce",
    "allreduce_coalesced",
    "allgather",
    "_allgather_base",
    "allgather_coalesced",
    "allgather_into_tensor_coalesced",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_tensor_coalesced",
    "reduce_scatter_coalesced",
    "alltoall",
    "alltoall_base",
    "barrier",
    "monitored_barrier",
    "send",
    "recv",
    "recv_anysource",
    "all_gather_single",
    "all_gather_single_coalesced",
    "reduce_scatter_single",
    "reduce_scatter_single_coalesced",
    "all_to_all_single",
    "gather_single",
    "gather_into_tensor",
)
# The snapshot's collective test files are named after the collective they test.
TEST_FILE_COLLECTIVE = {
    "test_all_reduce.py": "allreduce",
    "test_all_reduce_coalesced.py": "allreduce_coalesced",
    "test_all_gather.py": "allgather",
    "test_all_gather_base.py": "_allgather_base",
    "test_all_gather_coalesced.py": "allgather_coalesced",
    "test_all_gather_into_tensor_coalesced.py": "allgather_into_tensor_coalesced",
    "test_broadcast.py": "broadcast",
    "test_reduce.py": "reduce",
    "test_gather.py": "gather",
    "test_scatter.py": "scatter",
    "test_reduce_scatter.py": "reduce_scatter",
    "test_reduce_scatter_base.py": "_reduce_scatter_base",
    "test_reduce_scatter_tensor_coalesced.py": "reduce_scatter_tensor_coalesced",
    "test_alltoall.py": "alltoall",
    "test_alltoall_base.py": "alltoall_base",
}
# torch.distributed's functions a test calls -> the ProcessGroup method they reach.
DIST_FUNCTIONS = {
    "all_reduce": "allreduce",
    "broadcast": "broadcast",
    "all_gather": "allgather",
    "all_gather_into_tensor": "_allgather_base",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "_reduce_scatter_base",
    "barrier": "barrier",
}
# The distributed APIs the project's stages use -> where the snapshot tests them.
SUITES = {
    "ddp": {"tests": ("tests/distributed/ddp_tests",), "specs": ()},
    "fsdp": {"tests": (), "specs": ("fsdp_v2_spec.json",)},
    "tp": {
        "tests": (
            "tests/distributed/neuron_dynamo_backend/tensor_parallel",
            "tests/distributed/dtensor",
        ),
        "specs": ("dtensor_tp_spec.json",),
    },
}


def _tree(snap: Snapshot, rel: str) -> ast.Module:
    return ast.parse(snap.read(rel), filename=rel)


def _dotted(node: ast.AST) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _text(node: ast.AST | None) -> str | None:
    """A message as written: a string constant, or an f-string's source."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return ast.unparse(node)
    return ast.unparse(node)


def _raises_not_implemented(node: ast.AST) -> list[ast.Raise]:
    return [
        n
        for n in ast.walk(node)
        if isinstance(n, ast.Raise)
        and n.exc is not None
        and _dotted(n.exc.func if isinstance(n.exc, ast.Call) else n.exc) == "NotImplementedError"
    ]


def backend_facts(snap: Snapshot) -> dict[str, Any]:
    tree = _tree(snap, BACKEND)
    out: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func).endswith("Backend.register_backend"):
            devices = next((k.value for k in node.keywords if k.arg == "devices"), None)
            out["backend"] = {
                "name": node.args[0].value,  # type: ignore[attr-defined]
                "devices": ast.literal_eval(devices) if devices is not None else None,
                "class": PG_CLASS,
                "where": f"{BACKEND}:{node.lineno}",
            }
        if isinstance(node, ast.Assert) and node.msg is not None:
            message = _text(node.msg) or ""
            if "one device per process" in message:
                out["one_device_per_process"] = {
                    "message": message,
                    "where": f"{BACKEND}:{node.lineno}",
                }
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == PG_CLASS)
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    collectives: dict[str, Any] = {}
    for name in COLLECTIVES:
        method = methods.get(name)
        if method is None:
            collectives[name] = {"status": "absent", "where": f"{BACKEND}: no {PG_CLASS}.{name}"}
            continue
        raises = _raises_not_implemented(method)
        body = [s for s in method.body if not isinstance(s, ast.Expr)]  # less the docstring
        if raises and len(body) == 1 and isinstance(body[0], ast.Raise):
            status = "raises"
        elif raises:
            status = "limited"
        else:
            status = "implemented"
        entry: dict[str, Any] = {"status": status, "where": f"{BACKEND}:{method.lineno}"}
        if raises:
            entry["messages"] = [
                m
                for r in raises
                if (
                    m := _text(
                        r.exc.args[0] if isinstance(r.exc, ast.Call) and r.exc.args else None
                    )
                )
            ]
        collectives[name] = entry
    out["collectives"] = collectives
    return out


def reduce_ops(snap: Snapshot) -> dict[str, Any]:
    for node in ast.walk(_tree(snap, REDUCE_FUNCTIONS)):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "SUPPORTED_REDUCE_OPS" for t in node.targets
        ):
            return {
                "supported": sorted(ast.literal_eval(node.value)),
                "where": f"{REDUCE_FUNCTIONS}:{node.lineno}",
            }
    raise SystemExit(f"SUPPORTED_REDUCE_OPS not found in {REDUCE_FUNCTIONS}")


def all_to_all_sizes(snap: Snapshot) -> dict[str, Any]:
    """`world_size not in {a, b} and world_size % m != 0`: the sizes and the multiple."""
    for node in ast.walk(_tree(snap, ALL_TO_ALL)):
        if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And)):
            continue
        sizes = multiple = None
        for value in node.values:
            if isinstance(value, ast.Compare) and isinstance(value.ops[0], ast.NotIn):
                sizes = sorted(ast.literal_eval(value.comparators[0]))
            if (
                isinstance(value, ast.Compare)
                and isinstance(value.left, ast.BinOp)
                and isinstance(value.left.op, ast.Mod)
            ):
                multiple = ast.literal_eval(value.left.right)
        if sizes is not None and multiple is not None:
            return {"sizes": sizes, "multiple_of": multiple, "where": f"{ALL_TO_ALL}:{node.lineno}"}
    raise SystemExit(f"the world-size condition was not found in {ALL_TO_ALL}")


def functional_collectives(snap: Snapshot) -> list[dict[str, Any]]:
    out = []
    for node in ast.walk(_tree(snap, FUNCTIONAL)):
        if isinstance(node, ast.Call) and _dotted(node.func) == "torch.library.impl":
            out.append(
                {
                    "op": node.args[0].value,  # type: ignore[attr-defined]
                    "key": node.args[1].value,  # type: ignore[attr-defined]
                    "where": f"{FUNCTIONAL}:{node.lineno}",
                }
            )
    return out


def sharding_rules(snap: Snapshot) -> list[dict[str, Any]]:
    out = []
    for node in ast.walk(_tree(snap, SHARDING)):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and _dotted(deco.func) == "register_op_strategy":
                packet = _dotted(deco.args[0]).split(".")  # aten.<name>.<overload>
                name = f"aten::{packet[1]}" + ("" if packet[2] == "default" else f".{packet[2]}")
                out.append(
                    {"op": name, "function": node.name, "where": f"{SHARDING}:{node.lineno}"}
                )
    return out


def _test_count(source: str) -> int:
    tree = ast.parse(source)
    return sum(
        1 for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
    )


def collective_tests(snap: Snapshot) -> dict[str, list[str]]:
    """Collective -> the snapshot's test files that call it."""
    tested: dict[str, list[str]] = {}
    for rel in snap.files(COLLECTIVE_TESTS):
        name = TEST_FILE_COLLECTIVE.get(rel.rsplit("/", 1)[-1])
        if name and _test_count(snap.read(rel)):
            tested.setdefault(name, []).append(rel)
    for rel in snap.files(PROCESS_GROUP_TESTS):
        if not rel.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(snap.read(rel))):
            if isinstance(node, ast.Call):
                parts = _dotted(node.func).split(".")
                if parts[0] == "dist" and len(parts) == 2 and parts[1] in DIST_FUNCTIONS:
                    found = tested.setdefault(DIST_FUNCTIONS[parts[1]], [])
                    if rel not in found:
                        found.append(rel)
    return {k: sorted(v) for k, v in sorted(tested.items())}


def _spec(snap: Snapshot, name: str) -> dict[str, Any]:
    """An upstream suite's spec: its sanity methods, skips and xfails, each with a reason."""
    data = json.loads(snap.read(f"{SPECS}/{name}"))
    sanity: list[str] = []
    marked: list[dict[str, Any]] = []
    for config in data.get("test_configurations", []):
        where = config.get("file", "")
        sanity += [f"{where}::{m}" for m in config.get("sanity_methods", [])]
        for kind in ("xfail", "skip_tests"):
            for group in config.get(kind, []):
                if "tests" in group:  # {"reason": ..., "tests": [...]}
                    items = [(t, group.get("reason", "")) for t in group["tests"]]
                else:  # {"test_name": {"reason": ...}}
                    items = [(t, v.get("reason", "")) for t, v in group.items()]
                marked += [
                    {
                        "test": f"{where}::{t}",
                        "kind": "xfail" if kind == "xfail" else "skip",
                        "reason": reason,
                    }
                    for t, reason in items
                ]
    return {"spec": f"{SPECS}/{name}", "sanity": sanity, "marked": marked}


def suites(snap: Snapshot) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for api, where in SUITES.items():
        tests = []
        for folder in where["tests"]:
            for rel in snap.files(folder):
                if rel.rsplit("/", 1)[-1].startswith("test_") and rel.endswith(".py"):
                    tests.append({"file": rel, "tests": _test_count(snap.read(rel))})
        out[api] = {"tests": tests, "specs": [_spec(snap, s) for s in where["specs"]]}
    return out


def extract(snap: Snapshot) -> dict[str, Any]:
    facts = backend_facts(snap)
    tested = collective_tests(snap)
    for name, entry in facts["collectives"].items():
        entry["tests"] = tested.get(name, [])
    return {
        "source": {
            "repository": "github.com/parmoham-aws/test-repo-parmoham",
            "commit": snap.commit,
            "written_by": "scripts/extract_torchneuron_distributed.py (read with ast; nothing run)",
        },
        **facts,
        "reduce_ops": reduce_ops(snap),
        "all_to_all_world_sizes": all_to_all_sizes(snap),
        "functional_collectives": functional_collectives(snap),
        "sharding": sharding_rules(snap),
        "suites": suites(snap),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshot", type=Path)
    parser.add_argument("--commit")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "distributed.json")
    args = parser.parse_args(argv)
    data = extract(Snapshot(args.snapshot, args.commit))
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
