"""The warm parent (`runners.warm.warm_parent`) imports what a forked child's first compile
would otherwise import for itself (each sweep child compiles once: that import time was a fifth
to a third of its compile stage, `bench/compile_breakdown.py --children`). With the pinned torch,
a child's first training-step compile (AOTAutograd, as the neuron backend and aot_eager run it)
imports almost nothing new."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

# One fresh interpreter imports what all three cases import first (torch, transformers, the
# model child's runner), then forks one child per case: each starts from that same state, as
# its own fresh interpreter would after those imports, and warms itself as the case says.
# The compile case goes on in the no-compile case's child: its `warm_parent(*CHILD_MODULES)`
# (every device's modules, the compile stack) warms a superset of what that case's three calls
# did, so the state its fork compiles from is the one a fresh parent's same call gives.
WARM_CASES = textwrap.dedent(
    """
    import json, os, sys
    import torch, transformers
    from runners.isolation import CHILD_MODULES
    from runners.warm import warm_model, warm_parent

    def in_child(case):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            out = case()
            os.write(write, json.dumps(out).encode())
            os._exit(0)
        os.close(write)
        chunks = []
        while chunk := os.read(read, 1 << 20):
            chunks.append(chunk)
        os.close(read)
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
        return json.loads(b"".join(chunks))

    def held():
        return [m in sys.modules for m in (
            "torch._inductor.compile_fx", "torch._dynamo", "runners.devices.neuron.compiler"
        )]

    def first_compile_imports():
        def step(x, w):
            return torch.tanh(x @ w).mean() * 2
        torch.set_num_threads(1)
        before = set(sys.modules)
        x = torch.randn(4, 8, requires_grad=True)
        w = torch.randn(8, 8, requires_grad=True)
        torch.compile(step, backend="aot_eager", dynamic=False)(x, w).backward()
        return sorted(set(sys.modules) - before)

    def no_compile_then_compile():
        assert "torch._dynamo" not in sys.modules  # the parent's imports warmed nothing of it
        warm_parent(*CHILD_MODULES, compiles=False, device="cpu")
        cpu = held()
        warm_parent(*CHILD_MODULES, compiles=False, device="neuron")
        neuron = held()
        warm_parent(*CHILD_MODULES, device="neuron")
        compiling = held()
        warm_parent(*CHILD_MODULES)
        return {"no_compile": [cpu, neuron, compiling],
                "first_compile": in_child(first_compile_imports)}

    def model_child():
        from model_configs.spec import TinySpec
        from tests.test_runner import tiny
        spec = tiny("llama", "LlamaForCausalLM")
        warm_model(spec)
        warm_model(TinySpec("ultralytics", None, "DetectionModel", {}))
        parent = set(sys.modules)

        def build():
            from model_configs.libraries import get_adapter
            start = set(sys.modules)
            get_adapter("transformers").build_model(spec)
            return sorted(set(sys.modules) - start)

        return [in_child(build), sorted(parent)]

    print(json.dumps({**in_child(no_compile_then_compile), "model_child": in_child(model_child)}))
    """
)
WARM_GROUP = pytest.mark.xdist_group("warm_parent_cases")  # one worker reads one run of them


@pytest.fixture(scope="module")
def warm_cases() -> dict:
    # the three cases' work in one process: a guard twice theirs, against a hang, not a speed
    done = subprocess.run(
        [sys.executable, "-c", WARM_CASES], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@WARM_GROUP
def test_a_forked_childs_first_compile_imports_almost_nothing(warm_cases: dict) -> None:
    new = warm_cases["first_compile"]
    # before the warm parent imported AOTAutograd's and Inductor's modules: 174 of them
    assert len(new) <= 5, new
    assert not [m for m in new if m.startswith(("torch._inductor", "torch._dynamo", "sympy"))]


@WARM_GROUP
def test_a_forked_child_builds_its_model_without_importing_its_class_again(
    warm_cases: dict,
) -> None:
    """`warm_model`: the parent imports the model's class once (the first transformers class
    brings transformers' modeling stack, seconds of every child's time); a library whose
    adapter does not allow it (ultralytics) is left to the child."""
    new, parent = warm_cases["model_child"]
    assert "transformers.models.llama.modeling_llama" in parent
    assert "transformers.modeling_utils" in parent
    assert not [m for m in parent if m.startswith("ultralytics")]
    assert not [m for m in new if m.startswith("transformers")], new


@WARM_GROUP
def test_a_parent_whose_children_never_compile_warms_no_compile_stack(warm_cases: dict) -> None:
    """`compiles=False` (no stage of the run compiles): on the CPU, neither Dynamo nor any
    compiler (its children never import them); on the emulated neuron device, whose set-up
    registers its compile backend, its compiler and Dynamo's backends, not the rest of the
    compile stack a first compile imports; a later parent call that needs it adds it."""
    cpu, neuron, compiling = warm_cases["no_compile"]
    assert cpu == [False, False, False]
    assert neuron == [False, True, True]
    assert compiling == [True, True, True]


def test_which_stage_lists_compile():
    from ground.schema import Stage
    from runners.stages import compiles, default_stages, group_stages

    assert compiles(default_stages()) and compiles(group_stages("shapes")[1:])
    assert not compiles([Stage.LOAD, Stage.FORWARD, Stage.BACKWARD, Stage.OPTIMIZER, Stage.DDP])


LOCAL_DRIVER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from runners import preflight
    def fresh(*args):
        raise SystemExit("the device check started a fresh interpreter")
    preflight._fresh = fresh
    from reports.store import Store
    from sweep.commands.options import stage_list
    from sweep.driver import run_sweep
    from tests.conftest import write_catalog
    from tests.test_driver_faults import config
    folder = Path(sys.argv[1])
    catalog = write_catalog(folder / "catalog.csv", [
        {"model_id": "org/llama", "library_name": "transformers", "model_type_hint": "llama"}
    ])
    before = "torch" in sys.modules
    run_sweep(config(folder / "store", catalog, device="cpu", stages=stage_list("load")))
    rows = Store(folder / "store").read("results", "r").to_pylist()
    print(json.dumps([before, sorted({(r["stage"], r["status"]) for r in rows})]))
    """
)


def test_a_local_driver_is_warmed_first_and_its_device_check_forked_from_it(tmp_path):
    """A driver that runs its tasks itself (`--local`) imports what its first task would,
    then checks the device in a child forked from itself, not in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", LOCAL_DRIVER, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    torch_before, rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert torch_before is False  # the check's fork could only start from the warmed driver
    assert rows == [["load", "pass"]]
