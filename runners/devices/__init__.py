"""Registry of devices: names map to lazy `module:attr` targets, so heavy imports happen on use."""

from __future__ import annotations

import difflib
import importlib
from typing import TYPE_CHECKING, Any

from reports.errors import DeviceError, UnknownNameError

if TYPE_CHECKING:
    from runners.devices.base import Device

DEVICES: dict[str, str] = {
    "cpu": "runners.devices.cpu:CpuDevice",
    "cuda": "runners.devices.cuda:CudaDevice",
    "mps": "runners.devices.mps:MpsDevice",
    # real TorchNeuron when `torch_neuronx` is importable, else the emulated device
    "neuron": "runners.devices.neuron:neuron_device",
    "neuron-emulated": "runners.devices.neuron_emulated:NeuronEmulatedDevice",
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
    device: Device = factory(**options)
    if not device.is_available():
        raise DeviceError(
            f"Device {name!r} is not available on this machine.",
            device=name,
            hint=device.availability_hint or f"Available here: {', '.join(available_devices())}.",
        )
    return device


def available_devices() -> list[str]:
    """Registered devices usable on this machine (imports each device module)."""
    found = []
    for name, target in sorted(DEVICES.items()):
        module_name, attr = target.split(":")
        factory = getattr(importlib.import_module(module_name), attr)
        check = getattr(factory, "is_available", None)
        if check is None or check():
            found.append(name)
    return found
