"""What a rank of a process group needs of the emulated device, installed by `enable()`.

TorchNeuron's package gives its device module streams and events (torch_neuronx/streams.py:
`Stream`, `Event`, `current_stream`, `default_stream`, `set_stream`, `stream(...)`), which FSDP2
and DeviceMesh look up on `torch.neuron`; its C++ hooks resize device storages, which FSDP2
does to free and re-allocate unsharded parameters; its distributed package registers the
process group and its DTensor sharding rules. `enable()` gives the emulated device the same,
once per process, in the processes of a distributed stage's ranks only (a model's own process
keeps the device as the single-device stages have always seen it):
- streams and events on the device module: the emulated device runs every op when it is
  called, so a stream only records what is current, and an event is complete once recorded;
- storage resizing: `torch.UntypedStorage.resize_` of a device storage goes through
  `storage.resize_storage` (in Python: swapping data pointers with a fresh buffer; torch 2.14's
  Python hooks cannot answer `resizePrivateUse1Bytes`, and a C++ extension would need a
  compiler and a build cache on every machine that runs the sweep);
- the process group (`process_group.py`) and the DTensor rules (`sharding.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from runners.devices.neuron.state import BACKEND_NAME, STATE
from runners.devices.neuron.storage import resize_storage


class Stream:
    """A stream of the emulated device: work runs when it is called, so waiting is free."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any):
        self.device = torch.device(BACKEND_NAME, 0)
        self.priority = priority

    def wait_stream(self, stream: Any) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None

    def record_event(self, event: Any = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"<emulated neuron Stream priority={self.priority}>"


class Event:
    """An event of the emulated device: complete once recorded."""

    def __init__(self, enable_timing: bool = False, **kwargs: Any):
        self.recorded = False

    def record(self, stream: Any = None) -> None:
        self.recorded = True

    def wait(self, stream: Any = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end: Event) -> float:
        return 0.0


_DEFAULT = Stream()
_CURRENT: list[Stream] = [_DEFAULT]


def current_stream(device: Any = None) -> Stream:
    return _CURRENT[-1]


def default_stream(device: Any = None) -> Stream:
    return _DEFAULT


def set_stream(stream: Stream) -> None:
    _CURRENT[-1] = stream


@contextlib.contextmanager
def stream(stream: Stream | None) -> Iterator[None]:
    """Make `stream` current while the block runs (None: leave it)."""
    if stream is None:
        yield
        return
    _CURRENT.append(stream)
    try:
        yield
    finally:
        _CURRENT.pop()


_STREAM_API = {
    "Stream": Stream,
    "Event": Event,
    "current_stream": current_stream,
    "default_stream": default_stream,
    "set_stream": set_stream,
    "stream": stream,
}
_UNPATCHED_RESIZE = torch.UntypedStorage.resize_


def _resize_(self: torch.UntypedStorage, size: int) -> torch.UntypedStorage:
    if self.device.type == BACKEND_NAME:
        resize_storage(self, int(size))
        return self
    return _UNPATCHED_RESIZE(self, size)  # type: ignore[no-any-return]


def enable() -> None:
    """Install streams, events, storage resizing, the process group and the DTensor rules
    (idempotent; after the backend is installed)."""
    if STATE.distributed:
        return
    module = getattr(torch, BACKEND_NAME)
    for name, value in _STREAM_API.items():
        setattr(module, name, value)
    torch.UntypedStorage.resize_ = _resize_  # type: ignore[method-assign,assignment]
    from runners.devices.neuron.process_group import register_process_group
    from runners.devices.neuron.sharding import register_sharding_rules

    register_process_group()
    register_sharding_rules()
    STATE.distributed = True
