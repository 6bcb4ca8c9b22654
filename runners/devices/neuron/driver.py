"""Driver kernels: what every backend implements (allocation, copies, resize, `set_`, `item()`).

Never logged as fallbacks; host <-> device copies are counted as copies in the active logs.
"""

from __future__ import annotations

import torch

from runners.devices.base import active_fallback_logs
from runners.devices.neuron.state import CPU_KEYS, is_neuron, set_storage
from runners.devices.neuron.storage import (
    host_alias,
    host_storage,
    make_tensor,
    nbytes,
    new_storage,
    storage_span,
)


def record_copy(*, h2d: int = 0, d2h: int = 0) -> None:
    for log in active_fallback_logs():
        log.copy_bytes_h2d += h2d
        log.copy_bytes_d2h += d2h


def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    itemsize = torch.empty(0, dtype=dtype).element_size()
    storage = new_storage(storage_span(size, stride, itemsize))
    return make_tensor(storage, 0, size, stride, dtype)


def empty_memory_format(
    size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
):
    dtype = dtype or torch.get_default_dtype()
    layout_probe = torch.empty(
        size, dtype=dtype, device="meta", memory_format=memory_format or torch.contiguous_format
    )
    return empty_strided(size, layout_probe.stride(), dtype)


def copy_from(self, dst, non_blocking=False):
    src_on_device, dst_on_device = is_neuron(self), is_neuron(dst)
    src = host_alias(self) if src_on_device else self
    target = host_alias(dst) if dst_on_device else dst
    target.copy_(src)
    if dst_on_device and not src_on_device:
        record_copy(h2d=nbytes(src))
    elif src_on_device and not dst_on_device:
        record_copy(d2h=nbytes(src))
    return dst


def resize(self, size, memory_format=None):
    itemsize = self.element_size()
    probe = torch.empty(
        size,
        dtype=self.dtype,
        device="meta",
        memory_format=memory_format or torch.contiguous_format,
    )
    offset = self.storage_offset()
    needed = (offset * itemsize) + storage_span(probe.size(), probe.stride(), itemsize)
    storage = self.untyped_storage()
    host = host_storage(self)
    if needed > host.nbytes():
        storage = new_storage(needed)
        old = host.nbytes()
        if old:
            new_bytes = torch.empty(0, dtype=torch.uint8).set_(storage._host)  # type: ignore[attr-defined]
            new_bytes[:old].copy_(torch.empty(0, dtype=torch.uint8).set_(host))
    set_storage.redispatch(CPU_KEYS, self, storage, offset, probe.size(), probe.stride())
    return self


def copy_from_and_resize(self, dst):
    if dst.size() != self.size():
        dst.resize_(self.size())
    return copy_from(self, dst)


def set_source_storage_offset(self, source, storage_offset, size, stride=()):
    if not stride:
        stride = torch.empty(size, device="meta").stride()
    set_storage.redispatch(CPU_KEYS, self, source, storage_offset, size, stride)
    return self


def set_source_storage(self, source):
    nelem = source.nbytes() // self.element_size()
    return set_source_storage_offset(self, source, 0, [nelem], [1])


def set_source_tensor(self, source):
    return set_source_storage_offset(
        self, source.untyped_storage(), source.storage_offset(), source.size(), source.stride()
    )


def set_empty(self):
    return set_source_storage_offset(self, new_storage(0), 0, [0], [1])


def local_scalar_dense(self):
    record_copy(d2h=self.element_size())
    return host_alias(self).item()
