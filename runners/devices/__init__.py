"""Registry of devices: names map to lazy `module:attr` targets, so heavy imports happen on use."""

from __future__ import annotations

import difflib
import importlib
from typing import TYPE_CHECKING, Any

from reports.errors import UnknownNameError

if TYPE_CHECKING:
    from runners.devices.base import Device

DEVICES: dict[str, str] = {
    "cpu": "runners.devices.cpu:CpuDevice",
}


def device_names() -> list[str]:
    return sorted(DEVICES)


def get_device(name: str, **options: Any) -> Device:
    """Instantiate the device called `name` (e.g. "cpu", "neuron"); unknown names get a hint."""
    base = name.split(":", 1)[0]
    target = DEVICES.get(base)
    if target is None:
        close = difflib.get_close_matches(base, DEVICES, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownNameError(
            f"Unknown device {name!r}.{hint} Available: {', '.join(device_names())}",
            device=name,
        )
    module_name, attr = target.split(":")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory(**options)
