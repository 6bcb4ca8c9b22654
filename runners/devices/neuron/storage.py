"""Storage: every neuron storage points into a CPU UntypedStorage kept alive on it as `_host`.

Live device bytes (and their peak) are counted as host buffers are wrapped and freed.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from runners.devices.neuron.state import CPU_KEYS, STATE, set_storage


class Memory:
    """Bytes of live device storage (host buffers wrapped as neuron storage), and the peak."""

    current = 0
    peak = 0


def _release(cell: list[int]) -> None:
    Memory.current -= cell[0]


def _track(host: torch.UntypedStorage) -> None:
    nbytes = host.nbytes()
    cell = getattr(host, "_device_bytes", None)
    if cell is None:
        cell = [0]
        host._device_bytes = cell  # type: ignore[attr-defined]
        weakref.finalize(host, _release, cell)
    Memory.current += nbytes - cell[0]  # a buffer re-wrapped after a resize counts once
    cell[0] = nbytes
    Memory.peak = max(Memory.peak, Memory.current)


def wrap_host(host: torch.UntypedStorage) -> torch.UntypedStorage:
    if host.nbytes():
        _track(host)
    storage = torch._C._construct_storage_from_data_pointer(
        host.data_ptr(), STATE.dev, host.nbytes()
    )
    storage._host = host  # type: ignore[attr-defined]  # the Python object is preserved with the impl
    return storage  # type: ignore[return-value]


def new_storage(nbytes: int) -> torch.UntypedStorage:
    return wrap_host(torch.UntypedStorage(nbytes))


def host_of(storage: torch.UntypedStorage) -> torch.UntypedStorage:
    """The CPU storage behind a neuron storage. Storages PyTorch builds itself around our memory
    (`at::from_blob`, as `torch.save` does) have no `_host`: view their memory without owning it."""
    host = getattr(storage, "_host", None)
    if host is None:
        host = torch._C._construct_storage_from_data_pointer(
            storage.data_ptr(), torch.device("cpu"), storage.nbytes()
        )
        storage._host = host  # type: ignore[attr-defined]
    return host  # type: ignore[return-value]


def host_storage(t: torch.Tensor) -> torch.UntypedStorage:
    return host_of(t.untyped_storage())


def make_tensor(
    storage: torch.UntypedStorage,
    offset: Any,
    size: Any,
    stride: Any,
    dtype: torch.dtype,
) -> torch.Tensor:
    t = torch._C._acc.create_empty_tensor((0,), dtype)
    set_storage.redispatch(CPU_KEYS, t, storage, offset, size, stride)
    return t


def with_math_bits(alias: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """`alias` (over the same memory as `like`) read as `like` is: a lazy conjugate (`conj()`)
    or negation (`_neg_view()`) is a bit on the tensor, not in its memory, and an alias that
    dropped it would read the plain values (complex RoPE's backward multiplies by `conj()`)."""
    if like.is_conj():
        torch._C._set_conj(alias, True)
    if like.is_neg():
        torch._C._set_neg(alias, True)
    return alias


def host_alias(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the same memory as the neuron tensor `t` (its math bits too)."""
    alias = torch.empty(0, dtype=t.dtype).set_(
        host_storage(t), t.storage_offset(), t.size(), t.stride()
    )
    return with_math_bits(alias, t)


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def storage_span(size: Any, stride: Any, itemsize: int) -> int:
    if any(s == 0 for s in size):
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(size, stride, strict=True))) * itemsize


def resize_storage(storage: torch.UntypedStorage, nbytes: int) -> None:
    """Resize a device storage in place, as FSDP2 frees (to 0 bytes) and re-allocates the
    storage of its unsharded parameters: every tensor over the storage sees the new memory.

    `UntypedStorage._swap_data_ptr_` trades two storages' memory (pointer and size) when one
    of them is empty: the storage gives its memory to an empty one (freed with it), then takes
    a fresh buffer's, the bytes both sizes share copied over."""
    old = storage.nbytes()
    if nbytes == old:
        return
    previous = host_of(storage)
    if old:
        storage._swap_data_ptr_(new_storage(0))  # type: ignore[attr-defined]
    if not nbytes:
        storage._host = torch.UntypedStorage(0)  # type: ignore[attr-defined]  # frees `previous`
        return
    fresh = new_storage(nbytes)
    kept = min(old, nbytes)
    if kept:
        target = torch.empty(0, dtype=torch.uint8).set_(fresh._host)  # type: ignore[attr-defined]
        target[:kept].copy_(torch.empty(0, dtype=torch.uint8).set_(previous)[:kept])
    storage._swap_data_ptr_(fresh)  # type: ignore[attr-defined]
    storage._host = fresh._host  # type: ignore[attr-defined]
