"""Number formatting shared by every renderer."""

from __future__ import annotations

from typing import Any


def count(n: int | None) -> str:
    return "-" if n is None else f"{int(n):,}"


def downloads(n: int | float | None) -> str:
    """1234567 -> 1.23M."""
    if n is None:
        return "-"
    n = float(n)
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return f"{int(n)}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def of(part: int | None, whole: int | None) -> str:
    """`part (x%)` of a whole."""
    if part is None:
        return "-"
    if not whole:
        return count(part)
    return f"{count(part)} ({100 * part / whole:.1f}%)"


def dl_of(part: int | None, whole: int | None) -> str:
    if part is None:
        return "-"
    if not whole:
        return downloads(part)
    return f"{downloads(part)} ({100 * part / whole:.1f}%)"


def text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def op_sweep_cell(s: dict[str, Any] | None) -> str:
    """An op's own results in the op sweep: `97.0% (correct not native)`, or `-`."""
    if not s:
        return "-"
    return f"{pct(s.get('pass_rate'))} ({s['verdict'].replace('_', ' ')})"
