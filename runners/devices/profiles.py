"""Device profiles: the set of ATen ops a device runs natively, loaded from a data file.

The bundled profiles live in `runners/data/profiles/` (README there gives their provenance). A
user profile is any text file of op names, one per line.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from reports.errors import DeviceError

PROFILE_DIR = Path(__file__).resolve().parent.parent / "data" / "profiles"
DEFAULT_PROFILE = "torch-mlir"

# Named profiles -> the bundled files whose union they are.
BUNDLED: dict[str, tuple[str, ...]] = {
    "torch-mlir": ("torch-mlir-stablehlo-direct.txt", "torch-mlir-decomposed.txt"),
    "torch-mlir-stablehlo-direct": ("torch-mlir-stablehlo-direct.txt",),
    "torch-mlir-decomposed": ("torch-mlir-decomposed.txt",),
    "torch-xla": ("torch-xla-native.txt",),
}


def base_name(op: str) -> str:
    """`aten::add_.Tensor` -> `aten::add`: drop the overload and an in-place underscore."""
    name = op.split(".", 1)[0]
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name


@dataclass(frozen=True)
class DeviceProfile:
    """A named set of native ops. `is_native` matches exact names or base names."""

    name: str
    ops: frozenset[str]
    source: str = ""  # where it was read from, for messages
    _bases: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_bases", frozenset(base_name(op) for op in self.ops))

    @property
    def hash(self) -> str:
        text = "\n".join(sorted(self.ops))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def is_native(self, op: str) -> bool:
        return op in self.ops or base_name(op) in self._bases

    @classmethod
    def from_ops(cls, name: str, ops: set[str] | frozenset[str] | list[str]) -> DeviceProfile:
        return cls(name=name, ops=frozenset(ops), source="<in memory>")


def _read_ops(path: Path) -> set[str]:
    ops: set[str] = set()
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            ops.add(line if "::" in line else f"aten::{line}")
    return ops


def load_profile(profile: str | Path | None = None) -> DeviceProfile:
    """Load a bundled profile by name (default `torch-mlir`) or a user's file by path."""
    if profile is None:
        profile = DEFAULT_PROFILE
    if isinstance(profile, str) and profile in BUNDLED:
        ops: set[str] = set()
        for filename in BUNDLED[profile]:
            ops |= _read_ops(PROFILE_DIR / filename)
        return DeviceProfile(name=profile, ops=frozenset(ops), source=str(PROFILE_DIR))
    path = Path(profile)
    if not path.is_file():
        raise DeviceError(
            f"Device profile {str(profile)!r} is neither a bundled profile nor a file.",
            hint=f"Use one of {', '.join(sorted(BUNDLED))} or a path to a text file of op names.",
        )
    return DeviceProfile(name=path.stem, ops=frozenset(_read_ops(path)), source=str(path))
