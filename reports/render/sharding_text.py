"""A model's distributed stages as text lines (`hfsweep lookup`, `hfsweep check`)."""

from __future__ import annotations

from typing import Any

from ground import fmt


def sharding_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The Sharding part of a model's text: per distributed stage its status, ranks, the
    collectives it ran (calls per rank, bytes, evidence), each rank's peak device memory
    against the unsharded step's, and what stopped it. Empty when none ran."""
    if not rows:
        return []
    lines = ["", "Sharding:"]
    for r in rows:
        head = f"  {r['stage']:<6}{r['status']:<15}"
        if r.get("world_size"):
            head += f"{r['world_size']} ranks"
        if r.get("reason") == "no_tp_plan":
            head += "  no tensor-parallel plan"
        elif r.get("reason"):
            head += f"  ({r['reason']})"
        if r.get("failing_op"):
            evidence = f" [{r['evidence']}]" if r.get("evidence") else ""
            rank = f" on rank {r['failed_rank']}" if r.get("failed_rank") is not None else ""
            head += f"  stopped by {r['failing_op']}{evidence}{rank}"
        elif r.get("failed_rank") is not None:
            head += f"  rank {r['failed_rank']} failed"
        lines.append(head.rstrip())
        collectives = ", ".join(
            f"{c['op']} x{fmt.count(c['calls'])} {fmt.byte_size(c['bytes'])}"
            + (f" [{c['evidence']}]" if c.get("evidence") else "")
            for c in r.get("collectives") or []
        )
        if collectives:
            lines.append(f"{'':<8}collectives: {collectives}")
        peaks = [p for p in r.get("rank_peak_memory_bytes") or [] if p is not None]
        if peaks:
            memory = " / ".join(fmt.byte_size(p) for p in peaks)
            if r.get("unsharded_peak_memory_bytes"):
                memory += f" (unsharded step {fmt.byte_size(r['unsharded_peak_memory_bytes'])})"
            lines.append(f"{'':<8}peak device memory per rank: {memory}")
        if r.get("max_abs_error") is not None:
            lines.append(f"{'':<8}max abs error against one process: {r['max_abs_error']:.3g}")
    return lines
