"""The `neuron` torch.compile backend, shaped as TorchNeuron's `neuron_dynamo_backend`.

What the snapshot's backend does (torch_neuronx/neuron_dynamo_backend/backend.py, read at
commit 98154b8) and how it is mirrored here:
- it forces `dynamic=False`: every new input shape is a new graph (a recompile, counted by the
  compile stage); a graph with symbolic sizes raises its DynamicShapeAnalysis error
  ("Dynamic shapes detected in the model, but torch-neuronx requires static shapes ...",
  `check_static_shapes`, which says where the emulator applies it and why);
- it traces with AOTAutograd using its own, selective decomposition table (the ops it lists in
  decompositions.py; not PyTorch's core ATen set), one compiler for forward and backward
  graphs, `keep_inference_input_mutations=True`;
- it never partitions a graph: the whole graph is lowered through Torch-MLIR to StableHLO and
  compiled to one NEFF. A graph it cannot lower raises (RuntimeError, "Neuron backend NEFF
  execution setup failed"); a graph that fails to run is rerun eagerly (the original
  GraphModule, op by op on the device) unless TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1,
  which the released beta makes the default (its docs: a graph that fails to compile raises).

Here every graph op gets a verdict with its evidence (`evidence.py`: TorchNeuron's own code
and tests first, upstream torch-mlir's lists after). An op "cannot be lowered" only where
TorchNeuron's code raises on it (`raises`); an op no evidence decides (`none`) is taken to
lower and recorded as unverified, for the reports' band. For an op that cannot be lowered the
compile mode says what happens: `raise` (the released default) fails the compile naming
the op; `eager` (TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0, or asked for) runs that graph
eagerly on the device, so its ops dispatch one by one and their own CPU fallbacks are logged;
`partition` (no TorchNeuron setting: the emulator's earlier behaviour, a what-if) runs the
lowerable partitions as compiled and the rest on the CPU. In every mode the unlowerable ops go
to the active `FallbackLog`s as compile fallbacks, and graphs, breaks, recompiles, partitions
and each op's evidence to the active `CompileReport`s:

    with compile_report() as report, device.record_fallbacks() as log:
        compiled = torch.compile(model, backend="neuron", dynamic=False)
        ...
    report.graph_count, report.graph_break_count, report.recompile_count, report.mode
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ground.errors import DeviceError
from ground.schema import CompileEvidence
from runners import faults
from runners.devices.base import active_fallback_logs
from runners.devices.neuron import pending
from runners.devices.neuron.evidence import (
    EvidenceSets,
    Verdict,
    evidence_sets,
    pytorch_decompositions,
    verdict,
    weakest,
)
from runners.devices.neuron.options import COMPILE_MODES
from runners.devices.neuron.profiles import DeviceProfile, load_profile

BACKEND_NAME = "neuron"
DEFAULT_COMPILE_MODE = "raise"  # TorchNeuron's released default
FALLBACK_EXECUTION_ENV = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"


class UnlowerableOpError(DeviceError):
    """A compiled graph holds an op the neuron compiler cannot lower (mode `raise`, or strict).
    `op` names the first; `ops` all of that graph's; `evidence` what the verdict rests on
    (`raises`: TorchNeuron's code raises on it, `reason` says where)."""

    environment = False  # the model's own result (a compile `fail` naming the op)

    def __init__(
        self,
        message: str | None = None,
        *,
        op: str,
        ops: tuple[str, ...] = (),
        evidence: str = CompileEvidence.RAISES.value,
        reason: str | None = None,
        **kw: Any,
    ):
        ops = tuple(ops) or (op,)
        others = f" (and {', '.join(ops[1:4])}{' ...' if len(ops) > 4 else ''})" if ops[1:] else ""
        why = f": {reason}" if reason else ""
        super().__init__(
            message
            or f"{op}{others} cannot be lowered by the neuron compiler (evidence: {evidence}{why}); "
            f"TorchNeuron raises when a graph fails to compile ({FALLBACK_EXECUTION_ENV}=1, its "
            "released default)",
            op=op,
            ops=ops,
            evidence=evidence,
            hint=kw.pop("hint", None)
            or "--compile-mode eager runs such graphs eagerly on the device instead",
            **kw,
        )
        self.op = op
        self.ops = ops
        self.evidence = evidence


def resolve_compile_mode(mode: str | None = None) -> str:
    """`mode` if given, else what TorchNeuron's TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION says
    (unset: `raise`, the released default; 0/false/no: `eager`)."""
    if mode is None:
        value = os.environ.get(FALLBACK_EXECUTION_ENV)
        if value is not None and value.strip().lower() in ("0", "false", "no"):
            return "eager"
        return DEFAULT_COMPILE_MODE
    if mode not in COMPILE_MODES:
        raise DeviceError(
            f"Unknown compile mode {mode!r}.",
            device=BACKEND_NAME,
            hint=f"Use one of {', '.join(COMPILE_MODES)}.",
        )
    return mode


@dataclass
class CompileReport:
    """What the neuron backend saw while a `compile_report()` block ran."""

    graph_count: int = 0  # Dynamo graphs handed to the backend
    graph_break_count: int = 0
    break_reasons: list[str] = field(default_factory=list)
    recompile_count: int = 0  # graphs compiled again for a frame already compiled (new guards)
    partition_count: int = 0  # lowerable partitions, summed over forward and backward graphs
    forward_graphs: int = 0
    backward_graphs: int = 0
    eager_graphs: int = 0  # graphs run eagerly because an op could not be lowered (mode eager)
    unlowerable: dict[str, int] = field(default_factory=dict)  # op -> graph nodes
    unverified: dict[str, int] = field(default_factory=dict)  # op -> nodes, no evidence either way
    evidence: dict[str, str] = field(default_factory=dict)  # op -> CompileEvidence of its verdict
    failed_op: str | None = None  # the op a `raise` (or strict) compile failed on
    backend_s: float = 0.0  # time spent in this backend's graph checks (not Dynamo's tracing)
    profile: str | None = None
    mode: str | None = None
    _frames: set[tuple[int, int]] = field(default_factory=set, repr=False)

    def row_columns(self) -> dict[str, Any]:
        """The columns of a compile stage's row this report fills (none if no graph reached
        this backend)."""
        if not (self.forward_graphs or self.backward_graphs or self.failed_op):
            return {}
        if self.failed_op is not None:
            found: str | None = self.evidence.get(self.failed_op)
        else:
            lowered = [
                CompileEvidence(e) for op, e in self.evidence.items() if op not in self.unlowerable
            ]
            rests_on = weakest(lowered)
            found = rests_on.value if rests_on is not None else None
        return {
            "partition_count": self.partition_count,
            "compile_evidence": found,
            "unverified_ops": sorted(self.unverified, key=lambda op: (-self.unverified[op], op))
            or None,
        }


_REPORTS: list[CompileReport] = []
_STATE: dict[str, Any] = {
    "registered": False,
    "profile": None,
    "aot": None,
    "strict": False,
    "mode": None,
}


def set_profile(
    profile: DeviceProfile | None, *, strict: bool = False, mode: str | None = None
) -> None:
    """The op set graphs are checked against (the current device's; None: the default),
    whether any unlowerable op fails the compile (strict), and the compile mode."""
    _STATE["profile"] = profile
    _STATE["strict"] = strict
    _STATE["mode"] = mode


def current_profile() -> DeviceProfile:
    profile = _STATE["profile"]
    if profile is None:
        profile = load_profile()
        _STATE["profile"] = profile
    return profile


def current_mode() -> str:
    return _STATE["mode"] or resolve_compile_mode()


@contextlib.contextmanager
def compile_report(*, reset: bool = True) -> Iterator[CompileReport]:
    """Collect a CompileReport. `reset` clears Dynamo's caches first, so that a model compiled
    earlier in this process (or one sharing its code) is traced again and counted."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    if reset:
        torch._dynamo.reset()
    before = Counter(counters["graph_break"])
    report = CompileReport(profile=current_profile().name, mode=current_mode())
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
    """An op returning an alias of an input without writing it: metadata only."""
    return any(r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns)


def node_verdict(node: Any, sets: EvidenceSets | None = None) -> Verdict | None:
    """The verdict on one ATen graph node (None for non-ATen nodes and metadata)."""
    name = _op_name(node)
    if name is None:
        return None
    return verdict(name, node, sets or evidence_sets(), is_view=is_view_op(node.target))


@dataclass
class GraphVerdicts:
    """What one ATen graph holds: its verdicts, the ops that cannot be lowered (with why),
    the unverified ops, and its lowerable partitions."""

    verdicts: list[Verdict]
    unlowerable: dict[str, int]
    unverified: dict[str, int]
    reasons: dict[str, str]
    partitions: int


def check_graph(gm: Any, profile: DeviceProfile | None = None) -> GraphVerdicts:
    """Every node's verdict, and the lowerable partitions of the graph."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    sets = evidence_sets()
    by_node: dict[Any, Verdict | None] = {}
    unlowerable: Counter[str] = Counter()
    unverified: Counter[str] = Counter()
    reasons: dict[str, str] = {}
    for node in gm.graph.nodes:
        found = node_verdict(node, sets)
        by_node[node] = found
        if found is None:
            continue
        if found.lowers is False:
            unlowerable[found.op] += 1
            reasons.setdefault(found.op, found.reason or "")
        elif found.lowers is None:
            unverified[found.op] += 1

    class _Support(OperatorSupportBase):
        def is_node_supported(self, submodules: Any, node: Any) -> bool:
            if _op_name(node) is None:
                return False
            found = by_node.get(node)
            return found is None or found.lowers is not False

    partitioner = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    verdicts = [v for v in by_node.values() if v is not None]
    return GraphVerdicts(verdicts, dict(unlowerable), dict(unverified), reasons, len(partitions))


def _shape_env(gm: Any) -> Any:
    """The graph's ShapeEnv, looked for where TorchNeuron's DynamicShapeAnalysis looks."""
    for holder in (gm, gm.graph):
        if hasattr(holder, "_shape_env"):
            return holder._shape_env
    for node in gm.graph.nodes:
        mode = getattr(node.meta.get("val"), "fake_mode", None)
        if mode is not None and getattr(mode, "shape_env", None) is not None:
            return mode.shape_env
    return None


def check_static_shapes(gm: Any) -> None:
    """TorchNeuron's static-shape rule (fx/passes/dynamic_shape_analysis.py at 98154b8): a
    graph whose shape environment holds any symbol raises RuntimeError with its message.

    Its backend runs the pass on Dynamo's graph, before AOTAutograd; there, at torch 2.14, the
    nodes carry `example_value` and no `val`, so the pass finds no shape environment and lets
    a symbolic graph through (what the real device then does with it is not known here). Its
    own test (tests/neuron_dynamo_backend/unit/test_backend.py, `test_compile_dynamic_shape`)
    runs the pass on the AOT graph, where it raises: the emulator applies it there."""
    env = _shape_env(gm)
    if env is None:
        return
    backed = getattr(env, "backed_var_to_val", None)
    values = backed if backed is not None else env.var_to_val
    symbols = list(values.keys() | env.var_to_range.keys())
    if not symbols:
        return
    shown = f"{symbols[:3]}{'...' if len(symbols) > 3 else ''}"
    where = next((n.meta["stack_trace"] for n in gm.graph.nodes if n.meta.get("stack_trace")), None)
    raise RuntimeError(
        "\n\nDynamic shapes detected in the model, but torch-neuronx requires static shapes. "
        f"Found {len(symbols)} dynamic dimension(s): {shown}"
        + (f"\nSource location: {where}" if where else "")
        + "\nTo fix this issue:\n1. Ensure all input tensors have fixed, known shapes"
        "\n2. Avoid operations that create dynamic shapes (e.g., dynamic slicing, "
        "variable-length sequences)"
        "\nFor more information, see: https://pytorch.org/docs/stable/export.html#dynamic-shapes"
    )


def _graph_compiler(gm: Any, example_inputs: Any) -> Any:
    """TorchNeuron's one compiler for forward and backward graphs (it has no bw_compiler)."""
    from functorch.compile import make_boxed_func
    from torch._functorch._aot_autograd.logging_utils import get_aot_graph_name

    check_static_shapes(gm)  # symbolic sizes raise, as TorchNeuron's pass does
    start = time.perf_counter()
    profile = current_profile()
    mode = current_mode()
    checked = check_graph(gm, profile)
    unlowerable, partitions = checked.unlowerable, checked.partitions
    for op, n in unlowerable.items():
        for log in active_fallback_logs():
            log.record_compile(op, n)
    kind = "backward" if "backward" in get_aot_graph_name() else "forward"
    for report in _REPORTS:
        report.mode, report.profile = mode, profile.name  # what ran (set when the block began)
        report.partition_count += partitions
        if kind == "forward":
            report.forward_graphs += 1
        else:
            report.backward_graphs += 1
        for op, n in unlowerable.items():
            report.unlowerable[op] = report.unlowerable.get(op, 0) + n
        for op, n in checked.unverified.items():
            report.unverified[op] = report.unverified.get(op, 0) + n
        for found in checked.verdicts:
            report.evidence.setdefault(found.op, found.evidence.value)
        if unlowerable and (mode == "raise" or _STATE["strict"]):
            report.failed_op = report.failed_op or next(iter(unlowerable))
        if unlowerable and mode == "eager":
            report.eager_graphs += 1
        report.backend_s += time.perf_counter() - start
    if unlowerable and (mode == "raise" or _STATE["strict"]):
        ops = tuple(unlowerable)
        reason = checked.reasons.get(ops[0]) or None
        raise UnlowerableOpError(
            None
            if mode == "raise"
            else f"{ops[0]} cannot be lowered by the neuron compiler (evidence: raises: {reason}) "
            "and CPU fallback is disabled (strict)",
            op=ops[0],
            ops=ops,
            reason=reason,
            device=BACKEND_NAME,
        )
    if unlowerable and mode == "eager":
        return make_boxed_func(gm.forward)  # TorchNeuron reruns the GraphModule op by op
    return make_boxed_func(_CompiledGraph(gm).run)


def _traced_strides(val: Any) -> tuple[int, ...] | None:
    strides = getattr(val, "stride", None)
    if not callable(strides):
        return None
    try:
        return tuple(int(s) for s in strides())
    except (TypeError, ValueError, RuntimeError):  # symbolic strides
        return None


class _CompiledGraph:
    """How the emulator runs a graph its compiler lowered (or, in mode partition, the graph
    around the partitions it would lower): op by op on the device, each result laid out as
    the trace recorded it (the eager kernels may stride a size-1 dimension differently from
    the trace's fake tensors). A lowered op consumes values, not layouts (StableHLO has value
    semantics): a computing op gets its inputs dense, so one whose eager form needs a viewable
    input (PyTorch's composite group norm views its input) never meets a layout only the
    trace had (a permuted residual add). Views and ops that write their inputs get them as
    they are."""

    def __init__(self, gm: Any):
        import torch.fx

        class _Layout(torch.fx.Interpreter):
            def run_node(self, node: Any) -> Any:
                out = super().run_node(node)
                return _as_traced(out, node.meta.get("val"))

            def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
                if _consumes_values(target):
                    args, kwargs = _dense(args), {k: _dense(v) for k, v in kwargs.items()}
                return super().call_function(target, args, kwargs)

        self.interpreter = _Layout(gm)

    def run(self, *args: Any) -> Any:
        return self.interpreter.run(*args)


def _consumes_values(target: Any) -> bool:
    """An ATen op that neither returns a view nor writes an argument."""
    import torch

    if not isinstance(target, torch._ops.OpOverload) or is_view_op(target):
        return False
    return not any(
        a.alias_info is not None and a.alias_info.is_write for a in target._schema.arguments
    )


def _dense(out: Any) -> Any:
    import torch

    if isinstance(out, torch.Tensor) and not out.is_contiguous():
        return out.contiguous()
    if isinstance(out, (list, tuple)):
        return type(out)(_dense(v) for v in out)
    return out


def _as_traced(out: Any, val: Any) -> Any:
    import torch

    if not isinstance(out, torch.Tensor) or not isinstance(val, torch.Tensor):
        return out
    want = _traced_strides(val)
    have = tuple(out.stride())
    if want is None or have == want or tuple(out.shape) != tuple(val.shape):
        return out
    differ = [d for d in range(out.dim()) if have[d] != want[d]]
    if all(out.shape[d] == 1 for d in differ) or out.numel() == 0:  # same addresses: a view
        return out.as_strided(out.shape, want, out.storage_offset())
    return torch.empty_strided(out.shape, want, dtype=out.dtype, device=out.device).copy_(out)


def decompositions() -> dict[Any, Any]:
    """The decomposition table: PyTorch's, for the ops TorchNeuron takes PyTorch's for (its
    own decompositions are not run: their ops stay in the graph, with `decomposed` evidence)."""
    import torch
    from torch._decomp import get_decompositions

    ops = []
    for name in pytorch_decompositions():
        base, _, overload = name.removeprefix("aten::").removesuffix(".*").partition(".")
        packet = getattr(torch.ops.aten, base, None)
        if packet is None:
            continue
        ops.append(getattr(packet, overload) if overload else packet)
    return get_decompositions(ops)


def neuron_backend(gm: Any, example_inputs: Any, **options: Any) -> Any:
    """The Dynamo backend function registered as `neuron`."""
    import torch

    if _STATE["aot"] is None:
        from torch._dynamo.backends.common import aot_autograd

        _STATE["aot"] = aot_autograd(
            fw_compiler=_graph_compiler,
            keep_inference_input_mutations=True,
            decompositions=decompositions(),
        )
    compile_id = torch._guards.CompileContext.current_compile_id()
    for report in _REPORTS:
        report.graph_count += 1
        if compile_id is not None and compile_id.frame_id is not None:
            frame = (compile_id.frame_id, compile_id.frame_compile_id or 0)
            if frame[1] > 0 and frame not in report._frames:
                report.recompile_count += 1
            report._frames.add(frame)
    pending.take_pending_error()
    faults.inject_known("backend:neuron")  # the test-only hook: the backend fails a graph
    try:
        return _STATE["aot"](gm, example_inputs)
    except SystemError:
        # A backward traced on the device raised inside the autograd engine's stream guard:
        # the real error was kept there (see hooks.DeviceGuard).
        kept = pending.take_pending_error()
        if kept is None:
            raise
        raise kept from None


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
