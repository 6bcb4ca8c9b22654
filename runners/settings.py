"""What a task runs with: one frozen settings object per sweep, built once from the CLI's
arguments (`sweep.settings`) and carried unchanged to the stage: through the executor, the
worker, the child process (`runners.isolation`, `runners.op_sweep.isolation`) and into the
stage's context (`runners.stages.StageContext.settings`).

A field whose value changes what a row says carries the `row(...)` mark. That mark is the one
place such a setting is declared: `row_settings` reads it, the resume check compares what it
returns, and a task's content key would hash the same. Its columns are the runs table's
(`ground/schema.py`); a field may stand for several (the device's name: the device, whether it
is emulated, its profile and the profile's hash).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ground.errors import UsageError
from ground.schema import DEFAULT_WORLD_SIZE, STAGE_ORDER, Stage
from runners import stages as stage_registry
from runners.containment import DEFAULT_MEMORY_LIMIT

if TYPE_CHECKING:
    from runners.devices.base import Device

DTYPE_NAMES = ("fp32", "bf16", "fp16")
ALTERNATIVES_MODES = ("auto", "all", "none")


def dtype_names(text: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """`--dtype`: one dtype or several, comma-separated (`fp32,bf16`), each once, in the order
    given; an unknown or empty one: UsageError."""
    names = text.split(",") if isinstance(text, str) else list(text)
    out = tuple(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not out:
        raise UsageError(f"--dtype names no dtype; dtypes: {', '.join(DTYPE_NAMES)}")
    unknown = [n for n in out if n not in DTYPE_NAMES]
    if unknown:
        raise UsageError(f"unknown dtype {unknown[0]!r}; dtypes: {', '.join(DTYPE_NAMES)}")
    return out


# How a marked field becomes columns of the runs table: (its value, what the run knows: the
# built `device`, the `catalog` stream) -> a column's value, or a dict of columns.
Encode = Callable[[Any, Mapping[str, Any]], Any]


def row(column: str | None = None, *, encode: Encode | None = None) -> dict[str, Any]:
    """Field metadata: this setting changes what a row says (stored in the run's row as
    `column`, default the field's name, after `encode`)."""
    return {"row": (column, encode)}


def row_settings(settings: Any, known: Mapping[str, Any]) -> dict[str, Any]:
    """Column -> value of every field marked `row` in `settings`, nested settings included."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        mark = f.metadata.get("row")
        if mark is None:
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                out.update(row_settings(value, known))
            continue
        column, encode = mark
        encoded = encode(value, known) if encode is not None else value
        if isinstance(encoded, dict):
            out.update(encoded)
        else:
            out[column or f.name] = encoded
    return out


def file_hash(path: str | os.PathLike[str] | None) -> str | None:
    """The first 16 hex digits of a file's SHA-256 (None: no file, or unreadable)."""
    if path is None:
        return None
    try:
        digest = hashlib.sha256()
        with Path(path).open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()[:16]


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # normalising a frozen dataclass in __post_init__


# ---- the device ------------------------------------------------------------------------------


def _device_identity(name: str, known: Mapping[str, Any]) -> dict[str, Any]:
    return known["device"].identity()


_BUILT: dict[tuple[int, DeviceChoice], Device] = {}


@dataclass(frozen=True, init=False)
class DeviceChoice:
    """The device a run asked for: its registry name, `strict`, and the options of its own
    that the run gave (`Device.options`: `DeviceChoice(name, profile=...)`),
    whatever device declares them. Its row identity is the built device's (name, emulated or
    real, profile and the profile's hash)."""

    name: str = field(default="cpu", metadata=row(encode=_device_identity))
    strict: bool = field(default=False, metadata=row())  # a CPU fallback is an error
    # (keyword, value) of each option given, sorted: what the device's `create` is built with
    given: tuple[tuple[str, Any], ...] = ()

    def __init__(
        self,
        name: str = "cpu",
        strict: bool = False,
        given: tuple[tuple[str, Any], ...] = (),
        **options: Any,
    ):
        """`options`: the device's own, by keyword (`given`: the same as pairs, as
        `dataclasses.replace` passes them); one not given (None, empty) is left out."""
        merged = {**dict(given), **options}
        _set(self, "name", name)
        _set(self, "strict", bool(strict))
        _set(self, "given", tuple(sorted((k, v) for k, v in merged.items() if v)))

    def options(self) -> dict[str, Any]:
        """The options the device registry builds it with (only those asked for)."""
        options: dict[str, Any] = {"strict": True} if self.strict else {}
        options.update(self.given)
        return options

    def build(self) -> Device:
        """The device, built from its name once per process (an unknown name: UsageError)."""
        key = (os.getpid(), self)
        device = _BUILT.get(key)
        if device is None:
            from runners.devices import get_device

            device = _BUILT[key] = get_device(self.name, **self.options())
        return device


def _device_choice(value: Any) -> DeviceChoice:
    return value if isinstance(value, DeviceChoice) else DeviceChoice(str(value))


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise UsageError(f"{name} must be positive, not {value:g}")


def _memory_limit(value: int | None) -> int | None:
    if value is not None and value < 0:
        raise UsageError("--memory-limit must be 0 (no limit) or a size in GiB")
    return value or None


# ---- a model task ----------------------------------------------------------------------------


def _stages_column(stages: tuple[Stage, ...], known: Mapping[str, Any]) -> str:
    return ",".join(s.value for s in stages)


def _compile_columns(backend: str | None, known: Mapping[str, Any]) -> dict[str, Any]:
    device = known["device"]
    return {
        "compile_backend": backend or device.compile_backend,
        "compile_mode": device.compile_mode,  # None where the device has none
    }


def _bytes(limit: int | None, known: Mapping[str, Any]) -> int:
    return limit or 0


def _seconds(value: float, known: Mapping[str, Any]) -> float:
    return float(value)


def _world_size(value: int | None, known: Mapping[str, Any]) -> int | None:
    return value


@dataclass(frozen=True)
class ModelSettings:
    """What every model task runs with, from the driver to the stage."""

    device: DeviceChoice = DeviceChoice()
    dtype: str = field(default="fp32", metadata=row())
    stages: tuple[Stage, ...] = field(
        default_factory=stage_registry.default_stages, metadata=row(encode=_stages_column)
    )
    timeout_s: float = field(default=300.0, metadata=row(encode=_seconds))  # per model
    memory_limit: int | None = field(
        default=DEFAULT_MEMORY_LIMIT, metadata=row("memory_limit_bytes", encode=_bytes)
    )  # bytes per model beyond what its child starts with (None: no cap)
    compile_backend: str | None = field(default=None, metadata=row(encode=_compile_columns))
    # ranks of the distributed stages, one process each; None where the run asks for none of
    # them (a run without them does not depend on it: its rows, keys and runs row say none)
    world_size: int | None = field(default=DEFAULT_WORLD_SIZE, metadata=row(encode=_world_size))
    # a model whose default implementation fails is run again with the switches of its own
    # code (runners/alternatives.py): `auto` those its failure's class names, `all`, `none`
    alternatives: str = field(default="auto", metadata=row())
    # this run's switch of the model's own code (`experts_implementation=batched_mm`); None:
    # the model's default. Set per alternative run (its rows say it), or by `check`.
    implementation: str | None = None
    seed: int = 0
    threads: int = 1  # torch threads in the model's process (each rank's too)

    def __post_init__(self) -> None:
        _set(self, "device", _device_choice(self.device))
        if self.alternatives not in ALTERNATIVES_MODES:
            raise UsageError(
                f"--alternatives {self.alternatives!r}; one of {', '.join(ALTERNATIVES_MODES)}"
            )
        if self.implementation is not None and "=" not in self.implementation:
            raise UsageError(
                f"--implementation {self.implementation!r}: give SWITCH=VALUE, e.g. "
                "experts_implementation=batched_mm"
            )
        try:
            wanted = {Stage(s) for s in self.stages}
        except ValueError:
            names = ", ".join(s.value for s in Stage)
            raise UsageError(f"unknown stage in {list(self.stages)}; stages: {names}") from None
        _set(self, "stages", tuple(s for s in STAGE_ORDER if s in wanted))
        if not wanted & set(stage_registry.rank_stages()):
            _set(self, "world_size", None)
        elif self.world_size is None:
            _set(self, "world_size", DEFAULT_WORLD_SIZE)
        elif self.world_size < 1:
            raise UsageError(f"--world-size must be at least 1, not {self.world_size}")
        if self.dtype not in DTYPE_NAMES:
            raise UsageError(f"unknown dtype {self.dtype!r}; dtypes: {', '.join(DTYPE_NAMES)}")
        _positive("--timeout", self.timeout_s)
        _set(self, "memory_limit", _memory_limit(self.memory_limit))


# ---- an op-sweep task ------------------------------------------------------------------------


def _dtypes_column(dtypes: tuple[str, ...], known: Mapping[str, Any]) -> str:
    return ",".join(dtypes)


def _declarations_column(path: str | None, known: Mapping[str, Any]) -> str | None:
    return "none" if path is None else file_hash(path)


@dataclass(frozen=True)
class OpSettings:
    """What every op-sweep task (a group of OpInfos) runs with, from the driver to the sample."""

    device: DeviceChoice = DeviceChoice()
    dtypes: tuple[str, ...] = field(default=DTYPE_NAMES, metadata=row(encode=_dtypes_column))
    inputs: str = field(default="sample", metadata=row())  # OpInfo's sample / reference inputs
    timeout_s: float = field(default=60.0, metadata=row(encode=_seconds))  # per sample
    memory_limit: int | None = field(
        default=DEFAULT_MEMORY_LIMIT, metadata=row("memory_limit_bytes", encode=_bytes)
    )
    # a user's file of the device's own skips (its hash: a changed file changes rows)
    declarations: str | None = field(
        default=None, metadata=row("declarations_hash", encode=_declarations_column)
    )
    setup_timeout_s: float = 300.0  # the device's set-up and the first samples of an OpInfo
    seed: int = 0
    threads: int = 1

    def __post_init__(self) -> None:
        _set(self, "device", _device_choice(self.device))
        _set(self, "dtypes", tuple(self.dtypes))
        _positive("--timeout", self.timeout_s)
        _set(self, "memory_limit", _memory_limit(self.memory_limit))
