"""What an op-sweep task covers: units, each one OpInfo with the dtypes to sweep it in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Unit:
    """One OpInfo with the dtypes to sweep it in."""

    key: str  # name or name.variant
    name: str
    variant: str | None
    dtypes: tuple[str, ...]

    def meta(self, dtype: str) -> dict[str, Any]:
        return {
            "opinfo": self.key,
            "opinfo_name": self.name,
            "variant": self.variant,
            "dtype": dtype,
        }

    def names(self) -> list[str]:
        """`opinfo:dtype` of each OpInfo x dtype it covers."""
        return [f"{self.key}:{dtype}" for dtype in self.dtypes]
