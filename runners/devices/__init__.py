"""Registry of devices: names map to lazy `module:attr` targets, so heavy imports happen on use."""

from __future__ import annotations

import difflib
import importlib
import os
import sys
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


# Environment a device needs in the process that runs models, set before torch is imported
# there (PyTorch reads these when it loads): device -> variables, unless `strict` is asked for.
PROCESS_ENV: dict[str, dict[str, str]] = {
    # MPS: ops without a kernel fall back to the CPU (with a warning) instead of raising
    "mps": {"PYTORCH_ENABLE_MPS_FALLBACK": "1"},
}
_SET_AFTER_TORCH: set[str] = set()  # variables set here after this process imported torch


def process_env(name: str, options: dict[str, Any] | None = None) -> dict[str, str]:
    """The environment device `name` needs before torch is imported (none in strict mode)."""
    if (options or {}).get("strict"):
        return {}
    return dict(PROCESS_ENV.get(name.split(":", 1)[0], {}))


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
