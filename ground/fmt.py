"""Number formatting shared by every renderer."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

from ground.sizing_columns import NO_OWN_CONFIG, NO_OWN_CONFIG_TEXT


def profile_pairing(d: Any) -> str:
    """ "profile for torch 2.10, run on torch 2.14.1" for a row, run or page dict of an emulated
    device whose profile names its torch ("" otherwise): what its verdicts rest on."""
    written_for = d.get("device_profile_torch") if d else None
    if not written_for:
        return ""
    ran_on = d.get("device_torch") or "an unrecorded torch"
    return f"profile for torch {written_for}, run on torch {ran_on}"


def count(n: int | None) -> str:
    return "-" if n is None else f"{int(n):,}"


def counted(n: int | None, noun: str, plural: str | None = None) -> str:
    """`1 model`, `2 models`, `1,234 models` (`plural` for a noun that does not add an s)."""
    if n is None:
        return f"- {plural or noun + 's'}"
    return f"{count(n)} {noun if n == 1 else (plural or noun + 's')}"


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


def first_line(text: str | None) -> str:
    """The first non-empty line of `text`, its whitespace collapsed ("" for none)."""
    for line in (text or "").splitlines():
        if line.strip():
            return " ".join(line.split())
    return ""


def clip(text: str | None, limit: int) -> str:
    """`text` on one line in at most `limit` characters, cut at a word boundary with "…" (a
    single word longer than half the limit is cut inside it)."""
    one = " ".join((text or "").split())
    if len(one) <= limit:
        return one
    cut = one[: max(1, limit - 1)]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:(-") + "…"


def byte_size(n: int | float | None) -> str:
    """1536 -> 1.5 KiB; 3.2e9 -> 2.98 GiB (binary units, as the OS reports memory)."""
    if n is None:
        return "-"
    n = float(n)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.{2 if n / size < 10 else 1}f} {unit}"
    return f"{int(n)} B"


def duration(s: float | None) -> str:
    """A span of wall time in whole units: 42 s; 6 min 23 s; 1 h 6 min; 2 d 3 h."""
    if s is None:
        return "-"
    n = int(round(s))
    if n < 60:
        return f"{n} s"
    if n < 3600:
        return f"{n // 60} min {n % 60} s"
    if n < 86400:
        return f"{n // 3600} h {n % 3600 // 60} min"
    return f"{n // 86400} d {n % 86400 // 3600} h"


def when(t: Any) -> str:
    """A UTC timestamp to the minute: `2026-12-04 21:17 UTC` (`-` for none)."""
    if t is None:
        return "-"
    if isinstance(t, str):
        return t
    if getattr(t, "tzinfo", None) is not None:
        t = t.astimezone(dt.UTC)
    return f"{t:%Y-%m-%d %H:%M} UTC"


def seconds(s: float | None) -> str:
    """0.042 -> 0.04 s; 83.2 -> 83.2 s; 4000 -> 1 h 6 min."""
    if s is None:
        return "-"
    if s < 10:
        return f"{s:.2f} s"
    if s < 600:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def time_taken(stages_s: float | None, wall_s: float | None, ranks_s: float | None = None) -> str:
    """One model's time, in the words `check`, `lookup` and the model page share: the sum of
    its stages' own seconds, and the wall time of the process that ran it (set-up, every stage,
    start and exit), which grows when the machine is busy. The distributed stages (`ranks_s`
    of the stages' seconds) run in a group of rank processes of their own, outside the model's
    process: said, so that a wall shorter than the stages' sum reads as what it is."""
    parts = []
    if stages_s is not None:
        inside = (
            f" ({seconds(ranks_s)} of them in the distributed stages' rank processes, outside "
            "the model process)"
            if ranks_s
            else ""
        )
        parts.append(f"stages {seconds(stages_s)}{inside}")
    if wall_s is not None:
        what = "set-up, the other stages, exit" if ranks_s else "set-up, stages, exit"
        parts.append(f"model process {seconds(wall_s)} (wall: {what})")
    return "; ".join(parts) or "-"


def ranks_seconds(rows: Any, stages: Collection[str]) -> float | None:
    """The seconds of a model's stages among `stages` (its distributed stages: `time_taken`'s
    `ranks_s`, run by rank processes of their own, not by the model's process), None when it
    ran none of them."""
    names = set(stages)
    ran = [r["duration_s"] for r in rows if r.get("stage") in names and r.get("duration_s")]
    return sum(ran) if ran else None


def short_value(value: Any, limit: int = 60) -> str:
    """A config value on one line: a long list as its length and first items
    (`[36 items: 'sliding_attention', 'full_attention', ...]`), anything else clipped."""
    if isinstance(value, (list, tuple)) and len(repr(value)) > limit:
        head = ", ".join(repr(v) for v in value[:2])
        return f"[{len(value)} items: {head}, ...]"
    return clip(repr(value) if isinstance(value, str) else str(value), limit)


def params(n: int | None) -> str:
    """8030261248 -> 8.03B (parameters, as model cards write them)."""
    if n is None:
        return "-"
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def unsized_title(status: str | None) -> str:
    """The tooltip of a models-table size cell that holds no size ("": it is sized)."""
    if status == "ok":
        return ""
    if status == NO_OWN_CONFIG:
        return (
            f"{NO_OWN_CONFIG_TEXT} (only its library's default for the architecture, "
            "which says nothing of this model's size; its page shows what that default would need)"
        )
    return f"not sized: {status}" if status else "not sized: the run has no sizing for it"


def cores(n: int | None, per_chip: int | None = None, per_instance: int | None = None) -> str:
    """A count of cores at full size: `1`, `8 (2 chips)`, `128 (32 chips, over one
    instance)`, `none fits` (None with a hardware type), `-` (not sized)."""
    if per_chip is None:
        return "-"
    if n is None:
        return "none fits"
    parts = []
    if n > per_chip > 1:
        parts.append(f"{-(-n // per_chip)} chips")
    if per_instance and n > per_instance:
        parts.append("over one instance")
    return f"{n} ({', '.join(parts)})" if parts else str(n)
