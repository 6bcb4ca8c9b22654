"""What a distributed stage's verdict rests on, in the compile evidence vocabulary
(`ground.schema.CompileEvidence`): each collective's, as its device gives it, and the stage's
(its failing collective or DTensor op's, else the weakest of the collectives it ran)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ground.schema import EVIDENCE_STRENGTH, CompileEvidence


def weakest(evidence: Iterable[str | None]) -> str | None:
    """The weakest positive evidence among `evidence` (`raises` weakest of all), None when
    none is given (a device that declares nothing)."""
    order = [e.value for e in EVIDENCE_STRENGTH]
    found = [e for e in evidence if e is not None]
    if not found:
        return None
    if CompileEvidence.RAISES.value in found:
        return CompileEvidence.RAISES.value
    return max(found, key=lambda e: order.index(e) if e in order else len(order))


def with_evidence(result: Any, device: Any) -> None:
    """What the rank adds to its result: each collective's evidence, and what the verdict
    rests on (the failing op's evidence, else the weakest of its collectives')."""
    for entry in result.collectives or []:
        entry["evidence"] = device.collective_evidence(entry["op"])
    if result.failing_op:
        result.sharding_evidence = device.collective_evidence(result.failing_op)
    elif result.status == "pass":
        result.sharding_evidence = weakest(c["evidence"] for c in result.collectives or [])
