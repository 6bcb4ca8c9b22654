"""Where a unique tiny model's compile stage spends its time, on the emulated neuron device.

The compile stage (`runners/stages/core/compile.py`, `CompileStage`) compiles a training step with the
device's backend and runs it twice: the first step (`compile_s`: compile and first run), then
one steady step (`step_s`). This bench runs the top N of the bundled catalog's unique tiny
models (planned here, then load, forward, backward and compile back to back in this one warm
process, one thread, as a sweep child runs them) with timers around the parts:

  dynamo tracing        Dynamo's frame compiles (`convert_frame._compile`) less the backend
  AOTAutograd           the backend less the neuron compiler: functionalisation, the joint
                        forward+backward trace, the partition into forward and backward graphs
    of which decompositions   the decomposition table's functions (TorchNeuron's selection)
  lowering check        the neuron compiler itself (`_graph_compiler`): which graph ops the
                        profile cannot lower, and the partitions the rows count
  running the graphs    the compiled graphs run op by op on the device (`_CompiledGraph.run`)
  the rest of the stage dynamo.reset, guards, the loss and backward driven from Python, ...
Recompiles (frames compiled again: `frame_compile_id > 0`) are counted, with their share of
the backend's time. Each part is summed over the models; per model, the median and the total
are printed.

    python bench/compile_breakdown.py --top 50
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PARTS = (
    "dynamo tracing",
    "AOTAutograd",
    "  of which decompositions",
    "lowering check",
    "  of which partitions",
    "running the graphs",
    "rest of the stage",
)


class Timers:
    """Seconds per part for the model being compiled (nesting-aware where a part re-enters)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.depth: dict[str, int] = defaultdict(int)
        self.recompile_s = 0.0
        self.recompiles = 0

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]

    @contextlib.contextmanager
    def timing(self, part: str) -> Iterator[None]:
        outer = self.depth[part] == 0
        inside_backend = self.depth["backend"] > 0
        self.depth[part] += 1
        start = time.perf_counter()
        try:
            yield
        finally:
            self.depth[part] -= 1
            if outer:
                seconds = time.perf_counter() - start
                self.seconds[part] += seconds
                if part == "lowering check" and inside_backend:
                    self.seconds["lowering check in the backend"] += seconds

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.timing(part):
                return fn(*args, **kwargs)

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed


def instrument(timers: Timers) -> None:
    """Put the timers around Dynamo's frame compile, the neuron backend, its compiler, the
    decomposition table and the compiled graphs' runs."""
    import torch
    import torch._dynamo.convert_frame as convert_frame
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

    from runners.devices.neuron import compiler as nc

    convert_frame._compile = timers.wrap("dynamo", convert_frame._compile)
    nc._graph_compiler = timers.wrap("lowering check", nc._graph_compiler)
    CapabilityBasedPartitioner.propose_partitions = timers.wrap(
        "  of which partitions", CapabilityBasedPartitioner.propose_partitions
    )
    nc._CompiledGraph.run = timers.wrap("running the graphs", nc._CompiledGraph.run)
    table = nc.decompositions
    nc.decompositions = lambda: {
        op: timers.wrap("  of which decompositions", fn) for op, fn in table().items()
    }
    backend = nc.neuron_backend

    def timed_backend(gm: Any, example_inputs: Any, **options: Any) -> Any:
        compile_id = torch._guards.CompileContext.current_compile_id()
        start = time.perf_counter()
        try:
            with timers.timing("backend"):
                return backend(gm, example_inputs, **options)
        finally:
            if compile_id is not None and (compile_id.frame_compile_id or 0) > 0:
                timers.recompiles += 1
                timers.recompile_s += time.perf_counter() - start

    from torch._dynamo.backends.registry import _COMPILER_FNS

    nc.register_backend()
    _COMPILER_FNS[nc.BACKEND_NAME] = timed_backend  # register_backend keeps it from now on


def breakdown(timers: Timers, compile_s: float, stage_s: float) -> dict[str, float]:
    """The parts, none counted twice: the lowering check of a backward graph runs when the
    backward first runs (AOTAutograd compiles it lazily), outside Dynamo's frame compile."""
    s = timers.seconds
    backend = s.get("backend", 0.0)
    check_inside = s.get("lowering check in the backend", 0.0)
    check_outside = s.get("lowering check", 0.0) - check_inside
    return {
        "dynamo tracing": s.get("dynamo", 0.0) - backend,
        "AOTAutograd": backend - check_inside,
        "  of which decompositions": s.get("  of which decompositions", 0.0),
        "lowering check": s.get("lowering check", 0.0),
        "  of which partitions": s.get("  of which partitions", 0.0),
        "running the graphs": s.get("running the graphs", 0.0),
        "rest of the stage": stage_s
        - s.get("dynamo", 0.0)
        - check_outside
        - s.get("running the graphs", 0.0),
        "stage": stage_s,
        "compile_s (first step)": compile_s,
        "recompiles": float(timers.recompiles),
        "recompiles' backend s": timers.recompile_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=50)
    parser.add_argument("--device", default="neuron")
    parser.add_argument(
        "--children",
        action="store_true",
        help="first run each model in a forked child of this process, as the sweep does, and "
        "compare its compile stage with the same model's in this warm process",
    )
    args = parser.parse_args()

    import torch

    from ground.schema import Stage
    from model_configs.catalog import load_catalog
    from runners.devices import get_device
    from runners.run_model import run_model
    from runners.settings import ModelSettings
    from sweep.plan import group_tasks, plan_entries

    torch.set_num_threads(1)  # as each sweep child runs
    stages = [Stage.LOAD, Stage.FORWARD, Stage.BACKWARD, Stage.COMPILE]
    settings = ModelSettings(device=args.device, stages=tuple(stages))
    tasks = group_tasks(plan_entries(load_catalog("bundled").top(args.top), list(Stage)), settings)
    in_child: dict[str, float] = {}
    if args.children:  # before this process sets the device up: forks must not inherit it
        from runners.isolation import run_isolated

        for task in tasks:
            outcome = run_isolated(task.spec, settings)
            row = next(r.row() for r in outcome.stages if r.stage == Stage.COMPILE.value)
            if row["status"] not in ("not_run", "skip") and row["duration_s"] is not None:
                in_child[task.key] = row["duration_s"]
    timers = Timers()
    instrument(timers)
    device = get_device(args.device)
    device.setup()
    in_process: dict[str, float] = {}
    per_model: list[dict[str, float]] = []
    statuses: dict[str, int] = defaultdict(int)
    start = time.perf_counter()
    for task in tasks:
        timers.reset()
        outcome = run_model(task.spec, settings, device=device, release_memory=False)
        row = next(r.row() for r in outcome.stages if r.stage == Stage.COMPILE.value)
        statuses[row["status"]] += 1
        if row["status"] in ("not_run", "skip") or row["duration_s"] is None:
            continue
        per_model.append(breakdown(timers, row.get("compile_s") or 0.0, row["duration_s"]))
        in_process[task.key] = row["duration_s"]
    wall = time.perf_counter() - start
    print(
        f"top {args.top} of the bundled catalog on {args.device}: {len(tasks)} unique tiny "
        f"models, {len(per_model)} reached compile ({dict(statuses)}); {wall:.0f} s for the "
        f"four stages of all of them, torch {torch.__version__}"
    )
    keys = [*PARTS, "stage", "compile_s (first step)", "recompiles", "recompiles' backend s"]
    total_stage = sum(m["stage"] for m in per_model) or 1.0
    print(f"{'per compile stage':<28}{'median s':>10}{'total s':>10}{'share':>8}")
    for key in keys:
        values = [m[key] for m in per_model]
        share = f"{100 * sum(values) / total_stage:7.1f}%" if key in PARTS else ""
        print(f"{key:<28}{statistics.median(values):>10.3f}{sum(values):>10.1f}{share:>8}")
    both = [k for k in in_child if k in in_process]
    if both:
        child = [in_child[k] for k in both]
        warm = [in_process[k] for k in both]
        print(
            f"compile stage of the same {len(both)} models in a forked child of a warm parent "
            f"(as the sweep) / in this process after other models: median {statistics.median(child):.2f} "
            f"/ {statistics.median(warm):.2f} s, total {sum(child):.1f} / {sum(warm):.1f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
