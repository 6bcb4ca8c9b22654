"""What a device declares it does not run, for the op sweep: dtypes it lacks and OpInfos it skips.

The declarations are data in each device's folder (`runners/devices/<name>/data/
op_declarations.json`: `unsupported_dtypes`, dtype name -> why; `skips`, each an `opinfo`, a
`reason` and optionally its `dtypes` and `phase`), optionally extended by a user's file of the
same shape (`--skips FILE`: one device's entry, or a mapping of device names to entries). A
sample they exclude is a row with status `skip`: reason `device_unsupported_feature` (a tensor
of an unsupported dtype) or `device_declared` (an entry of `skips`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ground.errors import UnknownNameError, UsageError

BUNDLED = "op_declarations.json"  # in each device's folder's data/
PHASES = ("forward", "backward")


@dataclass(frozen=True)
class DeclaredSkip:
    opinfo: str  # an OpInfo name (every variant) or name.variant
    reason: str
    dtypes: tuple[str, ...] = ()  # empty: every dtype
    phase: str | None = None  # None: both phases

    def matches(self, key: str, name: str, dtype: str, phase: str) -> bool:
        if self.opinfo not in (key, name):
            return False
        if self.dtypes and dtype not in self.dtypes:
            return False
        return self.phase is None or self.phase == phase


@dataclass(frozen=True)
class DeviceDeclarations:
    device: str
    unsupported_dtypes: dict[str, str] = field(default_factory=dict)  # torch dtype name -> why
    skips: tuple[DeclaredSkip, ...] = ()

    def unsupported_dtype(self, dtype_name: str) -> str | None:
        return self.unsupported_dtypes.get(dtype_name)

    def skip_for(self, key: str, name: str, dtype: str, phase: str) -> str | None:
        for skip in self.skips:
            if skip.matches(key, name, dtype, phase):
                return skip.reason
        return None


def _entry(device: str, raw: Any, source: str) -> DeviceDeclarations:
    if not isinstance(raw, dict):
        raise UsageError(f"{source}: the entry for {device!r} must be a JSON object")
    dtypes = raw.get("unsupported_dtypes") or {}
    if not isinstance(dtypes, dict):
        raise UsageError(f"{source}: unsupported_dtypes must map dtype names to reasons")
    skips = []
    for item in raw.get("skips") or []:
        if not isinstance(item, dict) or "opinfo" not in item or "reason" not in item:
            raise UsageError(f"{source}: each skip needs 'opinfo' and 'reason': {item!r}")
        phase = item.get("phase")
        if phase is not None and phase not in PHASES:
            raise UsageError(f"{source}: phase must be forward or backward, not {phase!r}")
        skips.append(
            DeclaredSkip(
                opinfo=str(item["opinfo"]),
                reason=str(item["reason"]),
                dtypes=tuple(item.get("dtypes") or ()),
                phase=phase,
            )
        )
    return DeviceDeclarations(
        device=device,
        unsupported_dtypes={str(k): str(v) for k, v in dtypes.items()},
        skips=tuple(skips),
    )


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"declarations file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON: {exc}") from None


def bundled_file(device: str) -> Path | None:
    """Device `device`'s own declarations (None: it declares nothing, or no such device)."""
    from runners.devices import device_class

    try:
        return device_class(device).data_file(BUNDLED)
    except UnknownNameError:
        return None


def load_declarations(device: str, extra: str | Path | None = None) -> DeviceDeclarations:
    """The bundled declarations for `device` (by name, `neuron:0` -> `neuron`), merged with
    `extra`: a file holding one entry, or a mapping of device names to entries."""
    name = device.split(":", 1)[0]
    path = bundled_file(name)
    base = _entry(name, _read(path), str(path)) if path else DeviceDeclarations(device=name)
    if extra is None:
        return base
    raw = _read(Path(extra))
    if isinstance(raw, dict) and ("skips" in raw or "unsupported_dtypes" in raw):
        more = _entry(name, raw, str(extra))
    else:
        more = _entry(name, (raw or {}).get(name, {}), str(extra))
    return DeviceDeclarations(
        device=name,
        unsupported_dtypes={**base.unsupported_dtypes, **more.unsupported_dtypes},
        skips=base.skips + more.skips,
    )
