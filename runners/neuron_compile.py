"""The `neuron` torch.compile backend: AOTAutograd graphs checked against the device profile.

`torch.compile(model, backend="neuron")` traces with Dynamo, lowers through AOTAutograd with the
core ATen decompositions, and hands each forward and backward graph to a compiler that (like a
real lowering would) finds the ops the device cannot lower, counts the partitions of lowerable
ops, and then runs the graph eagerly on whatever device its inputs are on. Unlowerable ops go to
the active `FallbackLog`s as compile fallbacks; graph counts, graph breaks and their reasons go to
the active `CompileReport`s:

    with compile_report() as report, device.record_fallbacks() as log:
        compiled = torch.compile(model, backend="neuron")
        ...
    report.graph_count, report.graph_break_count, report.break_reasons, report.partition_count
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from runners.devices.base import active_fallback_logs
from runners.devices.profiles import DeviceProfile, load_profile

BACKEND_NAME = "neuron"


@dataclass
class CompileReport:
    """What the neuron backend saw while a `compile_report()` block ran."""

    graph_count: int = 0  # Dynamo graphs handed to the backend
    graph_break_count: int = 0
    break_reasons: list[str] = field(default_factory=list)
    partition_count: int = 0  # lowerable partitions, summed over forward and backward graphs
    forward_graphs: int = 0
    backward_graphs: int = 0
    unlowerable: dict[str, int] = field(default_factory=dict)  # op -> graph nodes
    backend_s: float = 0.0  # time spent in this backend's graph checks (not Dynamo's tracing)
    profile: str | None = None


_REPORTS: list[CompileReport] = []
_STATE: dict[str, Any] = {"registered": False, "profile": None, "aot": None, "strict": False}


def set_profile(profile: DeviceProfile | None, *, strict: bool = False) -> None:
    """The op set graphs are checked against (the current device's; None: the default), and
    whether an unlowerable op fails the compile (as TorchNeuron does unless fallback execution
    is enabled) instead of running on the CPU."""
    _STATE["profile"] = profile
    _STATE["strict"] = strict


def current_profile() -> DeviceProfile:
    profile = _STATE["profile"]
    if profile is None:
        profile = load_profile()
        _STATE["profile"] = profile
    return profile


@contextlib.contextmanager
def compile_report(*, reset: bool = True) -> Iterator[CompileReport]:
    """Collect a CompileReport. `reset` clears Dynamo's caches first, so that a model compiled
    earlier in this process (or one sharing its code) is traced again and counted."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    if reset:
        torch._dynamo.reset()
    before = Counter(counters["graph_break"])
    report = CompileReport(profile=current_profile().name)
    _REPORTS.append(report)
    try:
        yield report
    finally:
        _REPORTS.remove(report)
        delta = Counter(counters["graph_break"])
        delta.subtract(before)
        breaks = {reason: n for reason, n in delta.items() if n > 0}
        report.graph_break_count = sum(breaks.values())
        report.break_reasons = [short_reason(reason) for reason in breaks]


def short_reason(reason: str) -> str:
    """Dynamo's graph-break message cut to its headline and explanation (one line)."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    if not lines:
        return reason
    explanation = next((ln for ln in lines[1:] if ln.startswith("Explanation:")), None)
    if explanation:
        return f"{lines[0]}: {explanation.removeprefix('Explanation:').strip()}"
    return lines[0]


def _op_name(node: Any) -> str | None:
    import torch

    target = node.target
    if node.op == "call_function" and isinstance(target, torch._ops.OpOverload):
        return target.name()
    return None


def is_view_op(op: Any) -> bool:
    """An op returning an alias of an input without writing it: metadata only, which every
    backend handles itself (a CPU fallback cannot even run one). Treated as lowerable/native."""
    return any(r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns)


def _lowerable(node: Any, profile: DeviceProfile) -> bool | None:
    """None for nodes that are not ATen ops (placeholders, getitem, outputs)."""
    name = _op_name(node)
    if name is None:
        return None
    return is_view_op(node.target) or profile.is_native(name)


def check_graph(gm: Any, profile: DeviceProfile) -> tuple[dict[str, int], int]:
    """(unlowerable op -> node count, number of lowerable partitions) of one ATen graph."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    unlowerable: Counter[str] = Counter()
    for node in gm.graph.nodes:
        if _lowerable(node, profile) is False:
            unlowerable[node.target.name()] += 1

    class _ProfileSupport(OperatorSupportBase):
        def is_node_supported(self, submodules: Any, node: Any) -> bool:
            return bool(_lowerable(node, profile))

    partitioner = CapabilityBasedPartitioner(
        gm, _ProfileSupport(), allows_single_node_partition=True
    )
    partitions = partitioner.propose_partitions()
    return dict(unlowerable), len(partitions)


def _graph_compiler(kind: str) -> Any:
    def compile_graph(gm: Any, example_inputs: Any) -> Any:
        from functorch.compile import make_boxed_func

        start = time.perf_counter()
        profile = current_profile()
        unlowerable, partitions = check_graph(gm, profile)
        for op, n in unlowerable.items():
            for log in active_fallback_logs():
                log.record_compile(op, n)
        if unlowerable and _STATE["strict"]:
            from runners.devices.neuron_emulated import FallbackDisallowed

            op = next(iter(unlowerable))
            raise FallbackDisallowed(
                f"{op} cannot be lowered by the neuron compiler (profile {profile.name}) and "
                "fallback execution is disabled",
                op=op,
                device=BACKEND_NAME,
            )
        for report in _REPORTS:
            report.partition_count += partitions
            if kind == "forward":
                report.forward_graphs += 1
            else:
                report.backward_graphs += 1
            for op, n in unlowerable.items():
                report.unlowerable[op] = report.unlowerable.get(op, 0) + n
            report.backend_s += time.perf_counter() - start
        return make_boxed_func(gm.forward)

    return compile_graph


def neuron_backend(gm: Any, example_inputs: Any) -> Any:
    """The Dynamo backend function registered as `neuron`."""
    if _STATE["aot"] is None:
        import torch._decomp
        from torch._dynamo.backends.common import aot_autograd

        _STATE["aot"] = aot_autograd(
            fw_compiler=_graph_compiler("forward"),
            bw_compiler=_graph_compiler("backward"),
            decompositions=torch._decomp.core_aten_decompositions(),  # type: ignore[arg-type]
        )
    for report in _REPORTS:
        report.graph_count += 1
    return _STATE["aot"](gm, example_inputs)


def register_backend() -> None:
    """Register `neuron` with Dynamo (idempotent; keeps a backend of that name registered by a
    real TorchNeuron install)."""
    if _STATE["registered"]:
        return
    import torch._dynamo
    from torch._dynamo.backends.registry import lookup_backend

    try:
        lookup_backend(BACKEND_NAME)
    except Exception:  # not registered yet: ours
        torch._dynamo.register_backend(name=BACKEND_NAME, compiler_fn=neuron_backend)
    _STATE["registered"] = True
