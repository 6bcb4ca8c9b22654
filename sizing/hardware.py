"""The hardware types behind each device, with their figures, read from the device's own folder.

Each device that stands for hardware keeps its figures as data beside its code:
`runners/devices/<device>/data/hardware.json` (`neuron`: Trainium1, 2 and 3; `cuda`: common GPUs),
each figure with its source: memory per chip, cores per chip, the logical-core configuration
(LNC), the cores of one instance and of the largest scale-up domain, and the primary type the
reports show first. The files are read by path, never through the device's module (which may
import torch); a device without a file (`cpu`, `mps`) has no hardware. `sizing.cores` turns a
model's size into the cores it needs on one of these types.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The device folders (`runners/devices/<name>/`), found beside this package as installed.
DEVICES_DIR = Path(__file__).resolve().parent.parent / "runners" / "devices"
HARDWARE_FILE = "data/hardware.json"  # a device's figures, inside its folder
UNITS = {"GiB": 1 << 30, "GB": 10**9}


@dataclass(frozen=True)
class Hardware:
    """One hardware type, its figures derived as docs/sizing.md says."""

    name: str
    title: str
    chip_memory_bytes: int
    physical_cores_per_chip: int
    lnc: int  # physical cores per logical core (the default configuration)
    instance: str
    instance_chips: int
    domain: str  # the largest scale-up domain (an UltraServer, an NVLink server)
    domain_chips: int
    primary: bool = False
    unverified: tuple[str, ...] = ()  # figures no page read here confirms

    @property
    def cores_per_chip(self) -> int:
        return max(1, self.physical_cores_per_chip // self.lnc)

    @property
    def core_memory_bytes(self) -> int:
        return self.chip_memory_bytes // self.cores_per_chip

    @property
    def cores_per_instance(self) -> int:
        return self.instance_chips * self.cores_per_chip

    @property
    def cores_per_domain(self) -> int:
        return self.domain_chips * self.cores_per_chip


def hardware_file(device: str) -> Path:
    """Where `device`'s hardware figures are (the file may not exist: no hardware)."""
    return DEVICES_DIR / device / HARDWARE_FILE


def hardware_files() -> dict[str, Path]:
    """Device name -> its hardware file, for every device folder that has one."""
    return {p.parent.parent.name: p for p in sorted(DEVICES_DIR.glob(f"*/{HARDWARE_FILE}"))}


@functools.cache
def _data(device: str) -> dict[str, Any] | None:
    """A device's hardware file as read (None: the device stands for no hardware)."""
    if not device.isidentifier():  # a device name, never a path
        return None
    path = hardware_file(device)
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _hardware(name: str, h: dict[str, Any], primary: bool) -> Hardware:
    memory = h["chip_memory"]
    figures = {
        "chip memory": memory,
        "cores per chip": h["physical_cores_per_chip"],
        "LNC": h["lnc"],
        "instance": h["instance"],
        "largest domain": h["largest_domain"],
    }
    return Hardware(
        name=name,
        title=h["title"],
        chip_memory_bytes=int(memory["value"] * UNITS[memory["unit"]]),
        physical_cores_per_chip=int(h["physical_cores_per_chip"]["value"]),
        lnc=int(h["lnc"]["value"]),
        instance=h["instance"]["name"],
        instance_chips=int(h["instance"]["chips"]),
        domain=h["largest_domain"]["name"],
        domain_chips=int(h["largest_domain"]["chips"]),
        primary=primary,
        unverified=tuple(k for k, v in figures.items() if "unverified" in v.get("source", {})),
    )


def hardware_for(device: str) -> list[Hardware]:
    """The hardware types of an hfsweep device, its primary one first (none for a device
    without a hardware file: cpu, mps)."""
    data = _data(device)
    if data is None:
        return []
    primary, types = data["primary"], data["hardware"]
    names = [primary, *(n for n in types if n != primary)]
    return [_hardware(n, types[n], n == primary) for n in names]
