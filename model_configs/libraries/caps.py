"""Cap named sizes in a plain config dict: the small shared step of the non-transformers
shrinkers (open_clip towers, Chronos-2, YOLO scales, pyannote and SpeechBrain modules).

Each adapter states its own caps (`{key: cap}`), so the keys a rule applies to are listed where
the rule is; values already at or below the cap are kept, lists are capped element-wise.
"""

from __future__ import annotations

import copy
from typing import Any, TypeGuard


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def cap(value: Any, limit: int) -> Any:
    if _is_int(value):
        return min(value, limit)
    if isinstance(value, list) and value and all(_is_int(x) for x in value):
        return [min(x, limit) for x in value]
    return value


def cap_keys(
    config: dict[str, Any], caps: dict[str, int], *, prefix: str = ""
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """A copy of `config` with each key of `caps` capped (at this level only), and the changes
    as {dotted key: [original, shrunk]}."""
    out = copy.deepcopy(config)
    changes: dict[str, list[Any]] = {}
    for key, limit in caps.items():
        if key in out:
            new = cap(out[key], limit)
            if new != out[key]:
                changes[f"{prefix}{key}"] = [out[key], new]
                out[key] = new
    return out, changes
