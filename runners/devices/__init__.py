"""Registry of devices: names map to lazy `module:attr` targets, so heavy imports happen on use.

A target is a `Device` subclass; `get_device` builds it with `create(**options)` (the `neuron`
entry picks the real device or the emulated one there). Nothing outside a device's own module
(or package) names it: callers ask the registry, then the device's hooks.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

from ground.errors import DeviceError, UnknownNameError

if TYPE_CHECKING:
    from runners.devices.base import Device
    from runners.devices.options import DeviceOption

DEVICES: dict[str, str] = {
    "cpu": "runners.devices.cpu:CpuDevice",
    "cuda": "runners.devices.cuda:CudaDevice",
    "mps": "runners.devices.mps:MpsDevice",
    # real TorchNeuron when `torch_neuronx` is importable, else the emulated device
    "neuron": "runners.devices.neuron:Neuron",
    "neuron-emulated": "runners.devices.neuron:NeuronEmulated",
}
_SET_AFTER_TORCH: set[str] = set()  # variables set here after this process imported torch


def device_class(name: str) -> type[Device]:
    """The registered class of device `name` (`neuron:0` -> `neuron`). Registered modules do
    not import torch when imported (`process_env` is read before torch loads). Unknown names
    get "Did you mean ...?"."""
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
    found: type[Device] = getattr(importlib.import_module(module_name), attr)
    return found


def process_env(name: str, options: dict[str, Any] | None = None) -> dict[str, str]:
    """The environment device `name` needs before torch is imported (its `process_env`)."""
    return dict(device_class(name).process_env(options or {}))


def preload_modules(device: str | None = None) -> list[str]:
    """What model processes import for `device` (every registered device where None) on first
    use (for a parent that forks them to import once)."""
    names = DEVICES if device is None else [device]
    return sorted({m for name in names for m in device_class(name).preload_modules})


def prepare_process_env(name: str, options: dict[str, Any] | None = None) -> bool:
    """Set what `process_env` asks for in this process (children and Ray workers started from
    now on inherit it). True when this process imported torch before: its forks would carry
    a torch that never read the variables, so model processes must be fresh interpreters."""
    env = process_env(name, options)
    missing = {k: v for k, v in env.items() if os.environ.get(k) != v}
    if missing:
        if "torch" in sys.modules:
            _SET_AFTER_TORCH.update(missing)
        os.environ.update(missing)
    return any(k in _SET_AFTER_TORCH for k in env)


def device_names() -> list[str]:
    return sorted(DEVICES)


def device_options(group: str | None = None) -> list[DeviceOption]:
    """The options every registered device declares (`Device.options`), each flag once, in
    the registry's order; `group`: only those offered with `device` or with `model`."""
    seen: dict[str, DeviceOption] = {}
    for name in DEVICES:
        for option in device_class(name).options:
            if seen.setdefault(option.flag, option) != option:
                raise ValueError(f"{name} declares {option.flag} unlike another device does")
    return [o for o in seen.values() if group is None or o.group == group]


def device_knowledge() -> dict[str, tuple[str, ...]]:
    """Registered name -> what only that device knows: its `knowledge` (environment
    variables, error texts) and its options' flags."""
    return {
        name: tuple(device_class(name).knowledge)
        + tuple(o.flag for o in device_class(name).options)
        for name in DEVICES
    }


def get_device(name: str, **options: Any) -> Device:
    """Instantiate the device called `name` (e.g. "cpu", "cuda"); unknown names get a hint."""
    device = device_class(name).create(**options)
    if not device.is_available():
        raise DeviceError(
            f"Device {name!r} is not available on this machine.",
            device=name,
            hint=device.availability_hint or f"Available here: {', '.join(available_devices())}.",
        )
    return device


def available_devices() -> list[str]:
    """Registered devices usable on this machine (imports each device module)."""
    return [name for name in sorted(DEVICES) if device_class(name).is_available()]


def process_group_backend(name: str) -> str | None:
    """The torch.distributed backend a group of device `name`'s ranks uses (None: none)."""
    return device_class(name).process_group_backend


def ranks_available(name: str) -> int:
    """How many ranks of device `name` this machine holds, one process each."""
    return device_class(name).ranks_available()
