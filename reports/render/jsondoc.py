"""JSON report: the report dict as is (timestamps as ISO strings)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any


def default(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if hasattr(value, "item"):  # numpy / decimal-like scalars
        return value.item()
    return str(value)


def render(report: dict[str, Any]) -> str:
    return json.dumps(report, default=default, indent=2, sort_keys=False) + "\n"
