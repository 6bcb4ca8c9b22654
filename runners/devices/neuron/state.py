"""The emulated backend's process-wide state: the current device, the registrations made, the
`neuron:0` device object once the backend is renamed. A leaf every seam of the emulator reads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch._C import DispatchKey, DispatchKeySet

if TYPE_CHECKING:
    from runners.devices.neuron.profiles import DeviceProfile

BACKEND_NAME = "neuron"
TESTED_TORCH = ((2, 14), (2, 15))  # [from, to): the private APIs used here are checked on 2.14
SUPPORTED_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16})


class ActiveDevice(Protocol):
    """What the kernels read of the current device: its profile and strictness."""

    op_profile: DeviceProfile
    strict: bool


class BackendState:
    installed = False
    device: ActiveDevice | None = None  # the current device: its profile and strictness
    dev: Any = None  # torch.device("neuron", 0), once the backend is renamed
    libraries: list[Any] = []  # torch.library.Library objects must stay alive
    native_cache: dict[str, Any] = {}  # op name -> Static, for native_cache_profile
    native_cache_profile: DeviceProfile | None = None
    kernel_registered: set[str] = set()  # ops given a kernel by register_profile_kernels
    kernels_for: set[DeviceProfile] = set()  # profiles whose kernels are registered
    distributed = False  # what a rank of a process group needs is installed (`distributed.py`)
    process_group_registered = False  # the emulated process group is backend `neuron`


STATE = BackendState()
CPU_KEYS = DispatchKeySet(DispatchKey.CPU)
set_storage = torch.ops.aten.set_.source_Storage_storage_offset


def is_neuron(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == BACKEND_NAME
