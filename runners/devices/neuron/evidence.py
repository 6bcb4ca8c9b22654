"""What each verdict of the neuron compiler rests on: TorchNeuron's own evidence first.

For one graph op (a node of an ATen graph the `neuron` backend receives) the verdict is, in
this order (the first that applies decides):

1. `raises`: TorchNeuron's compile path raises on this call (`rules.compile_raise_reason`:
   boolean-mask `index_put`, `_grouped_mm` without offsets): the op does not lower, a
   confident failure;
2. `decomposed`: TorchNeuron's compile decomposition table replaces the op before lowering
   (compile-decomposed.txt; PyTorch's decompositions that table takes are applied by the
   emulator's AOT trace, so their ops are checked one by one; TorchNeuron's own are not run);
3. `registered`: an eager Torch-MLIR kernel's traced body holds the op: the converter that
   compile uses too lowers it (compile-registered.txt);
4. `tested`: TorchNeuron's own compile tests compile a graph holding it (compile-tested.txt);
5. `torch-mlir`: an upstream torch-mlir lowering pattern (compile-lowerable.txt and the two
   torch-mlir lists, matched by base name): third-party, TorchNeuron uses its own fork;
6. `none`: nothing decides. Not a confident failure: the op is taken to lower, and the stage
   records it as unverified (`unverified_ops`), which reports count in a band's upper bound;
   `newer_than_profile` instead where the op is one the profile's torch did not register
   (`skew.py`): unverified the same way, and for a reason the report can name.

TorchNeuron's code and tests come before third-party lists; within TorchNeuron's own, what
happens to the op on the way (decomposed before the converter sees it) comes before proof
that the converter handles it (a kernel body: code that runs on every eager call) and that
comes before a test's graph (a test may be skipped in its CI). View ops and shape reads are
metadata, never verdicts. The sets do not depend on the eager profile: the compiler is the
same whatever runs natively.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ground.schema import EVIDENCE_STRENGTH, CompileEvidence
from runners.devices.aten_names import base_name, overload_name

DATA_DIR = Path(__file__).resolve().parent / "data" / "profiles"
FILES = {
    CompileEvidence.DECOMPOSED: ("torchneuron-2026-04-21/compile-decomposed.txt",),
    CompileEvidence.REGISTERED: ("torchneuron-2026-04-21/compile-registered.txt",),
    CompileEvidence.TESTED: ("torchneuron-2026-04-21/compile-tested.txt",),
    CompileEvidence.TORCH_MLIR: (
        "torchneuron-2026-04-21/compile-lowerable.txt",
        "torch-mlir-stablehlo-direct.txt",
        "torch-mlir-decomposed.txt",
    ),
}
# Graph nodes that compute nothing a lowering must handle (shape reads, asserts).
NO_COMPUTE = frozenset(
    {
        "aten::sym_size",
        "aten::sym_stride",
        "aten::sym_numel",
        "aten::sym_storage_offset",
        "aten::_assert_scalar",
        "aten::_assert_async",
        "aten::_assert_tensor_metadata",
        "aten::sym_constrain_range",
        "aten::sym_constrain_range_for_size",
        "aten::_local_scalar_dense",
    }
)


def read_ops(path: Path) -> set[str]:
    """Op names of a data file: one per line, `#` comments and blank lines ignored."""
    ops: set[str] = set()
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            ops.add(line if "::" in line else f"aten::{line}")
    return ops


@functools.lru_cache(maxsize=1)
def pytorch_decompositions() -> tuple[str, ...]:
    """The ops whose PyTorch decomposition TorchNeuron's compile table takes (`.*`: a packet):
    the emulator's AOT trace applies exactly these."""
    found = []
    for raw in (DATA_DIR / FILES[CompileEvidence.DECOMPOSED][0]).read_text().splitlines():
        op, _, comment = raw.partition("#")
        if op.strip() and comment.split()[1:2] == ["pytorch"]:
            found.append(op.strip())
    return tuple(found)


@dataclass(frozen=True)
class EvidenceSets:
    """The ops each kind of positive evidence covers. `decomposed` entries ending in `.*` are
    a whole packet (every overload, as `get_decompositions([aten.x])` takes them)."""

    decomposed: frozenset[str]
    registered: frozenset[str]
    tested: frozenset[str]
    torch_mlir: frozenset[str]  # base names

    @functools.cached_property
    def digest(self) -> str:
        parts = []
        for label, ops in (
            ("decomposed", self.decomposed),
            ("registered", self.registered),
            ("tested", self.tested),
            ("torch-mlir", self.torch_mlir),
        ):
            parts += [f"[{label}]", *sorted(ops)]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    def positive(self, op: str) -> CompileEvidence:
        """The strongest positive evidence for the graph op `op`, or `none`."""
        op = overload_name(op)
        if op in self.decomposed or f"{op.split('.', 1)[0]}.*" in self.decomposed:
            return CompileEvidence.DECOMPOSED
        if op in self.registered:
            return CompileEvidence.REGISTERED
        if op in self.tested:
            return CompileEvidence.TESTED
        if base_name(op) in self.torch_mlir:
            return CompileEvidence.TORCH_MLIR
        return CompileEvidence.NONE


@functools.lru_cache(maxsize=1)
def evidence_sets() -> EvidenceSets:
    """The bundled evidence (the snapshot's, and upstream torch-mlir's)."""

    def read(kind: CompileEvidence) -> frozenset[str]:
        found: set[str] = set()
        for name in FILES[kind]:
            found |= read_ops(DATA_DIR / name)
        return frozenset(found)

    return EvidenceSets(
        decomposed=read(CompileEvidence.DECOMPOSED),
        registered=frozenset(overload_name(op) for op in read(CompileEvidence.REGISTERED)),
        tested=frozenset(overload_name(op) for op in read(CompileEvidence.TESTED)),
        torch_mlir=frozenset(base_name(op) for op in read(CompileEvidence.TORCH_MLIR)),
    )


def weakest(found: list[CompileEvidence]) -> CompileEvidence | None:
    """The weakest positive evidence among `found` (what a verdict over all of them rests on)."""
    ranked = [e for e in EVIDENCE_STRENGTH if e in found]
    return ranked[-1] if ranked else None


@dataclass(frozen=True)
class Verdict:
    """One graph op: whether it lowers (None: no evidence either way) and what says so."""

    op: str
    lowers: bool | None
    evidence: CompileEvidence
    reason: str | None = None  # for `raises`: what TorchNeuron's code says


def verdict(op: str, node: Any, sets: EvidenceSets, *, is_view: bool = False) -> Verdict | None:
    """The verdict for the graph node `node` of op `op`; None for metadata (views, shape
    reads), which every lowering handles."""
    from runners.devices.neuron import rules

    reason = rules.compile_raise_reason(op, node)
    if reason is not None:
        return Verdict(op, False, CompileEvidence.RAISES, reason)
    if is_view or overload_name(op) in NO_COMPUTE:
        return None
    found = sets.positive(op)
    if found is CompileEvidence.NONE:
        from runners.devices.neuron import skew

        if skew.newer_op(op):
            return Verdict(op, None, CompileEvidence.NEWER_THAN_PROFILE)
        return Verdict(op, None, found)
    return Verdict(op, True, found)
