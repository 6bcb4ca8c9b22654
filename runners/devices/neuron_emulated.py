"""The emulated `neuron` device: a pure-Python PrivateUse1 backend that dispatches as TorchNeuron.

PyTorch treats it as a real device named `neuron` (as it treats TorchNeuron): tensors live on
`neuron:0`, backed by host buffers. A device profile says which ATen ops the device runs
natively. Under the default profile (TorchNeuron's own registrations) every declared op gets a
kernel of its own, so the dispatcher routes calls exactly as it routes them for TorchNeuron;
every other op reaches ONE boxed fallback that runs it on CPU aliases and records the op (with
overload), the call count and the bytes a real `at::native::cpu_fallback` would move each way.
Native ops run on CPU aliases too (this is an emulation) but are not logged as fallbacks.

The snapshot's rules apply on the way (`runners/devices/neuron_rules.py`): view ops are never
fallbacks; ops routed to the CPU on purpose always are; conditional ops fall back for the inputs
they decline; native kernels compute float64 as float32 and decline complex tensors; SDPA takes
the fused `overrideable` op only where TorchNeuron's selection rule says so. A native op whose
borrowed CPU kernel lacks a dtype the device computes (integer `histc`) runs in a wider dtype.

Everything that touches the private registration APIs is in this module. Registration is
process-wide and first-wins; `install_backend()` is idempotent, and every kernel consults the
*current* device object (its profile and strict flag), so profiles can change at run time.
Tested on torch 2.14 (TorchNeuron's torch).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import re
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet

from reports.errors import DeviceError
from runners.devices import neuron_attention, neuron_autocast, neuron_rules
from runners.devices.base import (
    Device,
    FallbackDisallowed,
    FallbackLog,
    active_fallback_logs,
    collecting,
)
from runners.devices.profiles import DeviceProfile, OpClass, load_profile

BACKEND_NAME = "neuron"
TESTED_TORCH = ((2, 14), (2, 15))  # [from, to): the private APIs used here are checked on 2.14
SUPPORTED_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16})


# ---------------------------------------------------------------------------------------------
# Process-wide backend state


class _BackendState:
    installed = False
    device: NeuronEmulatedDevice | None = None  # the current device: its profile and strictness
    libraries: list[Any] = []  # torch.library.Library objects must stay alive
    native_cache: dict[str, Any] = {}  # op name -> _Static, for native_cache_profile
    native_cache_profile: DeviceProfile | None = None
    kernel_registered: set[str] = set()  # ops given a kernel by _register_profile_kernels
    kernels_for: set[DeviceProfile] = set()  # profiles whose kernels are registered


_STATE = _BackendState()
_DEV: Any = None  # torch.device("neuron", 0), once the backend is renamed
_CPU_KEYS = DispatchKeySet(DispatchKey.CPU)
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset


def _is_neuron(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == BACKEND_NAME


# ---------------------------------------------------------------------------------------------
# Storage: every neuron storage points into a CPU UntypedStorage kept alive on it as `_host`.


class _Memory:
    """Bytes of live device storage (host buffers wrapped as neuron storage), and the peak."""

    current = 0
    peak = 0


def _release(cell: list[int]) -> None:
    _Memory.current -= cell[0]


def _track(host: torch.UntypedStorage) -> None:
    nbytes = host.nbytes()
    cell = getattr(host, "_device_bytes", None)
    if cell is None:
        cell = [0]
        host._device_bytes = cell  # type: ignore[attr-defined]
        weakref.finalize(host, _release, cell)
    _Memory.current += nbytes - cell[0]  # a buffer re-wrapped after a resize counts once
    cell[0] = nbytes
    _Memory.peak = max(_Memory.peak, _Memory.current)


def _wrap_host(host: torch.UntypedStorage) -> torch.UntypedStorage:
    if host.nbytes():
        _track(host)
    storage = torch._C._construct_storage_from_data_pointer(host.data_ptr(), _DEV, host.nbytes())
    storage._host = host  # type: ignore[attr-defined]  # the Python object is preserved with the impl
    return storage  # type: ignore[return-value]


def _new_storage(nbytes: int) -> torch.UntypedStorage:
    return _wrap_host(torch.UntypedStorage(nbytes))


def _host_of(storage: torch.UntypedStorage) -> torch.UntypedStorage:
    """The CPU storage behind a neuron storage. Storages PyTorch builds itself around our memory
    (`at::from_blob`, as `torch.save` does) have no `_host`: view their memory without owning it."""
    host = getattr(storage, "_host", None)
    if host is None:
        host = torch._C._construct_storage_from_data_pointer(
            storage.data_ptr(), torch.device("cpu"), storage.nbytes()
        )
        storage._host = host  # type: ignore[attr-defined]
    return host  # type: ignore[return-value]


def _host_storage(t: torch.Tensor) -> torch.UntypedStorage:
    return _host_of(t.untyped_storage())


def _make_tensor(
    storage: torch.UntypedStorage,
    offset: Any,
    size: Any,
    stride: Any,
    dtype: torch.dtype,
) -> torch.Tensor:
    t = torch._C._acc.create_empty_tensor((0,), dtype)
    _set_storage.redispatch(_CPU_KEYS, t, storage, offset, size, stride)
    return t


def _with_math_bits(alias: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """`alias` (over the same memory as `like`) read as `like` is: a lazy conjugate (`conj()`)
    or negation (`_neg_view()`) is a bit on the tensor, not in its memory, and an alias that
    dropped it would read the plain values (complex RoPE's backward multiplies by `conj()`)."""
    if like.is_conj():
        torch._C._set_conj(alias, True)
    if like.is_neg():
        torch._C._set_neg(alias, True)
    return alias


def _host_alias(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the same memory as the neuron tensor `t` (its math bits too)."""
    alias = torch.empty(0, dtype=t.dtype).set_(
        _host_storage(t), t.storage_offset(), t.size(), t.stride()
    )
    return _with_math_bits(alias, t)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _storage_span(size: Any, stride: Any, itemsize: int) -> int:
    if any(s == 0 for s in size):
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(size, stride, strict=True))) * itemsize


# ---------------------------------------------------------------------------------------------
# Driver kernels: what every backend implements. Never logged as fallbacks.


def _record_copy(*, h2d: int = 0, d2h: int = 0) -> None:
    for log in active_fallback_logs():
        log.copy_bytes_h2d += h2d
        log.copy_bytes_d2h += d2h


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    itemsize = torch.empty(0, dtype=dtype).element_size()
    storage = _new_storage(_storage_span(size, stride, itemsize))
    return _make_tensor(storage, 0, size, stride, dtype)


def _empty_memory_format(
    size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
):
    dtype = dtype or torch.get_default_dtype()
    layout_probe = torch.empty(
        size, dtype=dtype, device="meta", memory_format=memory_format or torch.contiguous_format
    )
    return _empty_strided(size, layout_probe.stride(), dtype)


def _copy_from(self, dst, non_blocking=False):
    src_on_device, dst_on_device = _is_neuron(self), _is_neuron(dst)
    src = _host_alias(self) if src_on_device else self
    target = _host_alias(dst) if dst_on_device else dst
    target.copy_(src)
    if dst_on_device and not src_on_device:
        _record_copy(h2d=_nbytes(src))
    elif src_on_device and not dst_on_device:
        _record_copy(d2h=_nbytes(src))
    return dst


def _resize(self, size, memory_format=None):
    itemsize = self.element_size()
    probe = torch.empty(
        size,
        dtype=self.dtype,
        device="meta",
        memory_format=memory_format or torch.contiguous_format,
    )
    offset = self.storage_offset()
    needed = (offset * itemsize) + _storage_span(probe.size(), probe.stride(), itemsize)
    storage = self.untyped_storage()
    host = _host_storage(self)
    if needed > host.nbytes():
        storage = _new_storage(needed)
        old = host.nbytes()
        if old:
            new_bytes = torch.empty(0, dtype=torch.uint8).set_(storage._host)  # type: ignore[attr-defined]
            new_bytes[:old].copy_(torch.empty(0, dtype=torch.uint8).set_(host))
    _set_storage.redispatch(_CPU_KEYS, self, storage, offset, probe.size(), probe.stride())
    return self


def _copy_from_and_resize(self, dst):
    if dst.size() != self.size():
        dst.resize_(self.size())
    return _copy_from(self, dst)


def _set_source_storage_offset(self, source, storage_offset, size, stride=()):
    if not stride:
        stride = torch.empty(size, device="meta").stride()
    _set_storage.redispatch(_CPU_KEYS, self, source, storage_offset, size, stride)
    return self


def _set_source_storage(self, source):
    nelem = source.nbytes() // self.element_size()
    return _set_source_storage_offset(self, source, 0, [nelem], [1])


def _set_source_tensor(self, source):
    return _set_source_storage_offset(
        self, source.untyped_storage(), source.storage_offset(), source.size(), source.stride()
    )


def _set_empty(self):
    return _set_source_storage_offset(self, _new_storage(0), 0, [0], [1])


def _local_scalar_dense(self):
    _record_copy(d2h=self.element_size())
    return _host_alias(self).item()


# ---------------------------------------------------------------------------------------------
# Dispatch: every op that reaches the backend, through a native kernel or the boxed fallback.


@dataclass(frozen=True)
class _OpInfo:
    name: str  # aten::name.overload (no suffix for the default overload)
    is_view: bool  # returns an alias of an input without writing it: metadata only
    mutated: tuple[int | str, ...]  # positions / keyword names of arguments written in place
    tensor_args: tuple[int | str, ...] = ()  # arguments typed `Tensor` (not optional, not lists)


_OP_INFO: dict[Any, _OpInfo] = {}


def _op_info(op: Any, name: str | None = None) -> _OpInfo:
    info = _OP_INFO.get(op)
    if info is None:
        schema = op._schema
        mutated: list[int | str] = []
        tensor_args: list[int | str] = []
        for i, arg in enumerate(schema.arguments):
            key = arg.name if arg.kwarg_only else i
            if arg.alias_info is not None and arg.alias_info.is_write:
                mutated.append(key)
            if str(arg.type) == "Tensor":
                tensor_args.append(key)
        is_view = any(
            r.alias_info is not None and not r.alias_info.is_write for r in schema.returns
        )
        info = _OpInfo(name or op.name(), is_view, tuple(mutated), tuple(tensor_args))
        _OP_INFO[op] = info
    return info


@dataclass(frozen=True)
class _Static:
    """What the profile says of an op, whatever its inputs (cached per profile and name)."""

    native: bool  # declared, not routed to the CPU (views count as native)
    op_class: OpClass
    conditional: bool


def _static(name: str, info: _OpInfo, device: NeuronEmulatedDevice) -> _Static:
    profile = device.op_profile
    if _STATE.native_cache_profile is not profile:
        _STATE.native_cache = {}
        _STATE.native_cache_profile = profile
    found = _STATE.native_cache.get(name)
    if found is None:
        op_class = OpClass.VIEW if info.is_view else profile.classify(name)
        native = op_class in (OpClass.NATIVE, OpClass.VIEW, OpClass.CONDITIONAL)
        found = _Static(native, op_class, op_class is OpClass.CONDITIONAL)
        _STATE.native_cache[name] = found
    return found


def _host_values(t: torch.Tensor) -> torch.Tensor:
    """A rule reading a tensor's data (TorchNeuron syncs for it): not counted as a copy."""
    return _host_alias(t) if _is_neuron(t) else t


def _decide(op: Any, info: _OpInfo, args: tuple, kwargs: dict) -> tuple[bool, OpClass, str | None]:
    """(runs natively, the op's class, why a native kernel declined this call)."""
    device = _STATE.device
    if device is None:
        return info.is_view, OpClass.VIEW if info.is_view else OpClass.FALLBACK, None
    static = _static(info.name, info, device)
    if not static.native or static.op_class is OpClass.VIEW:
        return static.native, static.op_class, None
    if neuron_rules.has_complex(args, kwargs):
        return False, static.op_class, "complex tensors are not supported on Neuron"
    if static.conditional:
        reason = neuron_rules.decline_reason(info.name, op, args, kwargs, values=_host_values)
        if reason is not None:
            return False, static.op_class, reason
    return True, static.op_class, None


_CONTAINERS = (torch.Tensor, list, tuple, torch.device)


class _HostCall:
    """Moves one op's arguments to CPU aliases and its results back onto neuron storage."""

    __slots__ = ("aliases", "storages", "bytes_d2h", "bytes_h2d", "outputs_on_host")

    def __init__(self) -> None:
        self.aliases: list[tuple[torch.Tensor, torch.Tensor]] = []  # (cpu alias, neuron tensor)
        self.storages: dict[int, torch.UntypedStorage] = {}  # host data_ptr -> neuron storage
        self.bytes_d2h = 0
        self.bytes_h2d = 0
        self.outputs_on_host = False

    def to_host(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            if x.device.type != BACKEND_NAME:
                return x
            storage = x.untyped_storage()
            host = _host_of(storage)
            if host.nbytes():
                self.storages[host.data_ptr()] = storage
            alias = torch.empty(0, dtype=x.dtype).set_(
                host, x.storage_offset(), x.size(), x.stride()
            )
            _with_math_bits(alias, x)
            self.aliases.append((alias, x))
            self.bytes_d2h += x.numel() * x.element_size()
            return alias
        if isinstance(x, (list, tuple)):
            if not any(isinstance(v, _CONTAINERS) for v in x):  # sizes, strides, scalars
                return x
            return type(x)(self.to_host(v) for v in x)
        if isinstance(x, torch.device) and x.type == BACKEND_NAME:
            return torch.device("cpu")
        return x

    def from_host(self, y: Any) -> Any:
        if isinstance(y, torch.Tensor):
            if self.outputs_on_host:
                return y
            for alias, original in self.aliases:
                if y is alias:
                    return original
            host = y.untyped_storage()
            ptr = host.data_ptr()
            storage = self.storages.get(ptr) if host.nbytes() else None
            if storage is None:
                storage = _wrap_host(host)
                if host.nbytes():
                    self.storages[ptr] = storage
                self.bytes_h2d += y.numel() * y.element_size()
            made = _make_tensor(storage, y.storage_offset(), y.size(), y.stride(), y.dtype)
            return _with_math_bits(made, y)
        if isinstance(y, (list, tuple)):
            return type(y)(self.from_host(v) for v in y)
        return y

    def sync_mutated(self, original: Any, alias: Any) -> None:
        """After an in-place / out= op: point the neuron tensor at what the CPU op left."""
        if isinstance(original, (list, tuple)):
            for o, a in zip(original, alias, strict=True):
                self.sync_mutated(o, a)
            return
        if not _is_neuron(original):
            return
        self.bytes_h2d += alias.numel() * alias.element_size()
        host = alias.untyped_storage()
        storage = original.untyped_storage()
        if host.data_ptr() != storage.data_ptr() or host.nbytes() != storage.nbytes():
            # The CPU op resized an out= argument (in place, on the shared host storage): adopt
            # the new buffer. Views of the old, too-small buffer are left stale, as PyTorch warns.
            storage = _wrap_host(host)
        elif (
            alias.size() == original.size()
            and alias.stride() == original.stride()
            and alias.storage_offset() == original.storage_offset()
        ):
            return
        _set_storage.redispatch(
            _CPU_KEYS, original, storage, alias.storage_offset(), alias.size(), alias.stride()
        )


_OBSERVERS: list[Any] = []


def observe_ops(callback: Any) -> None:
    """Call `callback(op, native)` for every op the device runs (a package built on this
    emulator, such as the tests' stand-in `torch_neuronx`, tracks ops with it)."""
    _OBSERVERS.append(callback)


# Host implementations of ops PyTorch has no CPU kernel for (used when they run natively).
_HOST_IMPLS: dict[str, Any] = {
    neuron_rules.SDPA_OVERRIDEABLE: neuron_attention.attention_forward,
    f"{neuron_rules.SDPA_OVERRIDEABLE}_backward": neuron_attention.attention_backward,
}


def _execute(
    op: Any,
    info: _OpInfo,
    args: tuple,
    kwargs: dict,
    decision: tuple[bool, OpClass, str | None] | None = None,
) -> Any:
    """Run one op on CPU aliases of its arguments: natively (the device's kernel, emulated) or
    as a logged CPU fallback, as `_decide` says."""
    try:
        native, op_class, declined = decision or _decide(op, info, args, kwargs)
    except Exception as exc:  # a precondition the device enforces: name the op
        _name_op(exc, info.name)
        raise
    device = _STATE.device
    if not native and device is not None and device.strict:
        raise FallbackDisallowed(
            f"{info.name} {'declines this call (' + declined + ')' if declined else 'has no native kernel'}"
            " on the neuron device and CPU fallback is disabled",
            op=info.name,
            device=BACKEND_NAME,
        )
    call = _HostCall()
    host_args = list(call.to_host(args))
    host_kwargs = {k: call.to_host(v) for k, v in kwargs.items()}
    _rewrap_numbers(info, host_args, host_kwargs)
    target = kwargs.get("device")
    call.outputs_on_host = target is not None and torch.device(target).type != BACKEND_NAME
    run = (_HOST_IMPLS.get(info.name) if native else None) or op
    try:
        if native and op_class is not OpClass.VIEW:
            result = _run_native(run, info, host_args, host_kwargs)
        else:
            result = run(*host_args, **host_kwargs)
    except Exception as exc:  # name the op that failed, for the stage's `failing_op`
        _name_op(exc, info.name)
        if declined:  # the device declined the call; its CPU fallback failed
            with contextlib.suppress(AttributeError):
                exc.declined = declined  # type: ignore[attr-defined]
        if native:
            raise
        # TorchNeuron records a fallback op before its CPU fallback runs it (neuron_cpu_fallback
        # marks it, then calls at::native::cpu_fallback), so it is a fallback even when the CPU
        # then fails: the op that stopped the model is in the stage's fallbacks.
        for log in active_fallback_logs():
            log.classes[info.name] = op_class.value
            log.record(info.name, bytes_h2d=call.bytes_h2d, bytes_d2h=call.bytes_d2h)
            if declined:
                log.declined.setdefault(info.name, declined)
        if _NO_CPU_KERNEL in str(exc):
            why = f"declines this call ({declined})" if declined else "has no neuron kernel"
            raise NoHostKernelError(
                f"{info.name} {why}, so TorchNeuron's CPU fallback runs it on the CPU, where "
                "PyTorch has no kernel for it either (the real device fails the same way)",
                op=info.name,
            ) from exc
        raise
    for key in info.mutated:
        if isinstance(key, int):
            if key < len(args):
                call.sync_mutated(args[key], host_args[key])
        elif key in kwargs:
            call.sync_mutated(kwargs[key], host_kwargs[key])
    out = call.from_host(result)
    for observer in _OBSERVERS:
        observer(info.name, native)
    for log in active_fallback_logs():
        log.classes[info.name] = op_class.value
        if native:
            log.executed[info.name] = log.executed.get(info.name, 0) + 1
        else:
            log.record(info.name, bytes_h2d=call.bytes_h2d, bytes_d2h=call.bytes_d2h)
            if declined:
                log.declined.setdefault(info.name, declined)
    return out


# The dispatcher's words when an op has no kernel for the CPU (it has one only for CUDA, say).
_NO_CPU_KERNEL = "with arguments from the 'CPU' backend"


class NoHostKernelError(NotImplementedError):
    """A fallback op that PyTorch has no CPU kernel for (`aten::_thnn_fused_lstm_cell`, which
    PyTorch's LSTM cell calls on every non-CPU device, has only a CUDA one). TorchNeuron's CPU
    fallback (`at::native::cpu_fallback`) fails on it exactly so: the snapshot's own test specs
    xfail an LSTM test with "Could not run 'aten::_thnn_fused_lstm_cell' with arguments from the
    'CPU' backend" (tests/pytorch_tests/specs/ddp_spec.json). The device's behaviour, and the
    model's `fail` naming the op; never the emulator's."""

    def __init__(self, message: str, *, op: str, device: str = BACKEND_NAME):
        super().__init__(message)
        self.op = op
        self.device = device

    def __reduce__(self) -> Any:  # keep `op` across processes
        return (_rebuild_no_host_kernel, (str(self), self.op, self.device))


def _rebuild_no_host_kernel(message: str, op: str, device: str) -> NoHostKernelError:
    return NoHostKernelError(message, op=op, device=device)


def _name_op(exc: Exception, name: str) -> None:
    if getattr(exc, "op", None) is None:
        with contextlib.suppress(AttributeError):
            exc.op = name  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# Native execution: the device's dtype rules over the borrowed CPU kernel.


_DTYPE_NAMES = {
    "Bool": torch.bool,
    "Byte": torch.uint8,
    "Char": torch.int8,
    "Short": torch.int16,
    "Int": torch.int32,
    "Long": torch.int64,
    "Half": torch.float16,
    "BFloat16": torch.bfloat16,
}
_MISSING_DTYPE = re.compile(r"not implemented for '(\w+)'")


class _Widened:
    """Ops a native kernel ran through a wider dtype because the CPU kernel lacked one."""

    calls: dict[tuple[str, str], int] = {}


def widened_calls() -> dict[tuple[str, str], int]:
    """(op, dtype) -> calls the emulator computed in a wider dtype (the CPU kernel lacks it)."""
    return dict(_Widened.calls)


def _float64_as_float32(
    info: _OpInfo, args: list, kwargs: dict
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """python_ops/base.py: non-0-dim float64 inputs are computed as float32 (no float64 on the
    hardware); a float64 `out` needs a float64 input. Returns (original, float32 copy) pairs of
    the arguments written in place, to copy back after the op."""
    written: list[tuple[torch.Tensor, torch.Tensor]] = []
    mutated = set(info.mutated)

    def cast(x: Any, key: int | str) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype == torch.float64 and x.dim() > 0:
            copy = x.to(torch.float32)
            if key in mutated:
                written.append((x, copy))
            return copy
        if isinstance(x, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in x):
            return type(x)(cast(v, -1) for v in x)
        return x

    inputs = neuron_rules.tensors_in(list(args) + [v for k, v in kwargs.items() if k != "out"])
    float64_in = any(t.dtype == torch.float64 for t in inputs)
    out = kwargs.get("out")
    if isinstance(out, torch.Tensor) and out.dtype == torch.float64 and not float64_in:
        raise TypeError(
            "Output tensor has dtype float64 which is not supported on Neuron. "
            "Please use float32 for the output tensor."
        )
    if not float64_in:
        return written
    for i, value in enumerate(args):
        args[i] = cast(value, i)
    for key, value in kwargs.items():
        kwargs[key] = cast(value, key)
    return written


def _run_native(run: Any, info: _OpInfo, args: list, kwargs: dict) -> Any:
    written = _float64_as_float32(info, args, kwargs)
    try:
        result = run(*args, **kwargs)
    except (RuntimeError, NotImplementedError) as exc:
        result = _run_widened(run, info, args, kwargs, exc)
    for original, copy in written:
        if original.shape != copy.shape:  # an out= the op resized
            original.resize_(copy.shape)
        original.copy_(copy)
        for i, value in enumerate(args):
            if value is copy:
                args[i] = original
        for key, value in kwargs.items():
            if value is copy:
                kwargs[key] = original
        if result is copy:
            result = original
    return result


def _run_widened(run: Any, info: _OpInfo, args: list, kwargs: dict, exc: Exception) -> Any:
    """The CPU kernel lacks a dtype the device computes (`"histogram_cpu" not implemented for
    'Int'`): compute in a wider dtype (integers in float64, halves in float32) and cast the
    results back to the dtypes the op gives. Functional ops only; anything else re-raises."""
    match = _MISSING_DTYPE.search(str(exc))
    dtype = _DTYPE_NAMES.get(match.group(1)) if match else None
    if dtype is None or info.mutated:
        raise exc
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else torch.float64

    def widen(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype == dtype:
            return x.to(wide)
        if isinstance(x, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in x):
            return type(x)(widen(v) for v in x)
        return x

    try:
        result = run(*[widen(a) for a in args], **{k: widen(v) for k, v in kwargs.items()})
    except Exception:
        raise exc from None
    key = (info.name, str(dtype).removeprefix("torch."))
    _Widened.calls[key] = _Widened.calls.get(key, 0) + 1
    return _cast_like(result, _expected_dtypes(run, args, kwargs, dtype))


def _expected_dtypes(run: Any, args: list, kwargs: dict, dtype: torch.dtype) -> Any:
    """The output dtypes the op gives for these inputs (from its meta kernel), else `dtype`."""

    def meta(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="meta")
        if isinstance(x, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in x):
            return type(x)(meta(v) for v in x)
        return x

    try:
        out = run(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})
    except Exception:
        return dtype

    def dtypes(y: Any) -> Any:
        if isinstance(y, torch.Tensor):
            return y.dtype
        if isinstance(y, (list, tuple)):
            return type(y)(dtypes(v) for v in y)
        return None

    return dtypes(out)


def _cast_like(result: Any, dtypes: Any) -> Any:
    if isinstance(result, torch.Tensor):
        target = dtypes if isinstance(dtypes, torch.dtype) else None
        return result.to(target) if target is not None and result.dtype != target else result
    if isinstance(result, (list, tuple)):
        per = dtypes if isinstance(dtypes, (list, tuple)) else [dtypes] * len(result)
        return type(result)(_cast_like(r, d) for r, d in zip(result, per, strict=False))
    return result


def _rewrap_numbers(info: _OpInfo, args: list | tuple, kwargs: dict) -> None:
    """A Python scalar that C++ wrapped into a tensor (`x % 4` reaches `remainder.Tensor_out`)
    comes back to Python as a plain number; the op needs a tensor there again. `args` is the
    list built by `_HostCall.to_host` (a fresh list for a tuple input)."""
    for key in info.tensor_args:
        if isinstance(key, int):
            if key < len(args) and isinstance(args[key], _NUMBERS):
                args[key] = torch.tensor(args[key])  # type: ignore[index]
        elif isinstance(kwargs.get(key), _NUMBERS):
            kwargs[key] = torch.tensor(kwargs[key])


_NUMBERS = (bool, int, float, complex)


def _fallback(op: Any, *args: Any, **kwargs: Any) -> Any:
    """The boxed PrivateUse1 fallback: every op without a kernel of its own."""
    return _execute(op, _op_info(op), args, kwargs)


# Convolutions reach `*_overrideable` kernels (whose defaults raise), not the fallback, when no
# kernel is registered for `aten::convolution` itself. They are classified and recorded as the
# ops a profile names and the CPU runs: aten::convolution(_backward).
_CONV_INFO = _OpInfo("aten::convolution", False, ())
_CONV_BACKWARD_INFO = _OpInfo("aten::convolution_backward", False, ())


def _convolution(
    input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
):
    args = (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    return _execute(torch.ops.aten.convolution.default, _CONV_INFO, args, {})


def _convolution_backward(
    grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups, mask
):
    out_channels = weight.size(1) * groups if transposed else weight.size(0)
    bias_sizes = [out_channels] if mask[2] else None
    args = (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed)
    args += (output_padding, groups, mask)
    return _execute(torch.ops.aten.convolution_backward.default, _CONV_BACKWARD_INFO, args, {})


# ---------------------------------------------------------------------------------------------
# Attention: TorchNeuron's SDPA selection rule (csrc/aten/SdpBackendSelection.cpp)


def _scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    *,
    scale=None,
    enable_gqa=False,
):
    """`aten::scaled_dot_product_attention` on the device: the fused `overrideable` op when
    TorchNeuron's selection rule picks it (q on the device, q/k/v 4-D) and the profile has it,
    else PyTorch's math decomposition. Registered for the backend and its autograd key, like
    the composite it replaces: the ops it calls record their own gradients."""
    device = _STATE.device
    fused = (
        device is not None
        and device.op_profile.declares(neuron_rules.SDPA_OVERRIDEABLE)
        and neuron_rules.sdpa_uses_overrideable(query, key, value)
    )
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        bias = torch.zeros_like(attn_mask, dtype=query.dtype)
        attn_mask = bias.masked_fill_(attn_mask.logical_not(), -math.inf)
    if fused:
        out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
            query, key, value, attn_mask, dropout_p, is_causal, False, scale=scale
        )
        return out[0]
    return torch.ops.aten._scaled_dot_product_attention_math(
        query,
        key,
        value,
        attn_mask,
        dropout_p,
        is_causal,
        None,
        scale=scale,
        enable_gqa=enable_gqa,
    )[0]


# ---------------------------------------------------------------------------------------------
# Device module (`torch.neuron`), hooks, serialization, registration


class _DeviceContext:
    """`torch.neuron.device(...)`: a context manager (one device, so it only validates)."""

    def __init__(self, device: Any):
        self.device = device

    def __enter__(self) -> _DeviceContext:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _NeuronModule:
    """What PyTorch looks up as `torch.neuron` for a PrivateUse1 backend named `neuron`."""

    device = _DeviceContext
    emulated = True

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed(seed: int) -> None:
        return None  # random ops run on the host generator, seeded by torch.manual_seed

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        return None

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16]


class _Hooks(torch._C._acc.PrivateUse1Hooks):  # type: ignore[misc,name-defined]
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


# An exception raised by a Python dispatch mode (FakeTensorMode while torch.compile traces a
# backward) leaves the Python error indicator set while C++ unwinds; the autograd engine's stream
# guard then calls `type_` from a noexcept destructor, Python reports the pending error, and the
# process aborts ("terminate called without an active exception", SIGABRT). `type_` takes such
# a pending error into `_PENDING_ERRORS` instead; `take_pending_error()` gives it back to the
# caller of the backward (the neuron compile backend re-raises it).
_PENDING_ERRORS: list[BaseException] = []
_PYERR_OCCURRED = ctypes.pythonapi.PyErr_Occurred  # raises the pending error, if there is one


class _DeviceGuard(torch._C._acc.DeviceGuard):  # type: ignore[misc,name-defined]
    def type_(self):
        try:
            _PYERR_OCCURRED()
        except BaseException as exc:  # noqa: BLE001 - any pending error, kept for the caller
            _PENDING_ERRORS.append(exc)
        return torch._C._autograd.DeviceType.PrivateUse1


def take_pending_error() -> BaseException | None:
    """The error a backward raised inside a stream guard's destructor (see `_DeviceGuard`)."""
    error = _PENDING_ERRORS[-1] if _PENDING_ERRORS else None
    _PENDING_ERRORS.clear()
    return error


def _serialization_tag(obj: Any) -> str | None:
    return None  # saving: PyTorch's own PrivateUse1 tagger names the location `neuron:0`


def _serialization_restore(obj: Any, location: str) -> Any:
    """torch.load to neuron: move the storage through a tensor (`UntypedStorage(n, device=...)`
    has no allocator behind it on a Python backend)."""
    if not location.startswith(BACKEND_NAME):
        return None
    if obj.device.type == BACKEND_NAME:
        return obj
    t = torch.empty(obj.nbytes(), dtype=torch.uint8, device=_DEV)
    t.copy_(torch.empty(0, dtype=torch.uint8, device=obj.device).set_(obj))
    return t.untyped_storage()


def _check_torch_version() -> None:
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    low, high = TESTED_TORCH
    if not (low <= version < high):
        raise DeviceError(
            f"The emulated neuron device uses private PyTorch APIs tested on torch "
            f"{low[0]}.{low[1]} (TorchNeuron's torch); this is torch {torch.__version__}.",
            device=BACKEND_NAME,
            hint="Install torch==2.14.1 (bash scripts/install.sh does), or use --device cpu.",
        )


_COMPOSITE_KEYS = DispatchKeySet(DispatchKey.CompositeExplicitAutograd)
_NONFUNCTIONAL_KEYS = DispatchKeySet(DispatchKey.CompositeExplicitAutogradNonFunctional)

# Moves, copies and allocations the driver kernels (or PyTorch's composites over them) handle:
# a kernel of their own would bypass the copy accounting (`_to_copy` would never reach
# `_copy_from`), so they keep their route whatever a profile says.
_DRIVER_OPS = frozenset(
    {
        "_to_copy",
        "copy_",
        "_copy_from",
        "_copy_from_and_resize",
        "lift_fresh_copy",
        "empty",
        "empty_strided",
        "resize_",
        "set_",
        "_local_scalar_dense",
        "record_stream",
    }
)

# For lowering lists (matched by base name): ops a backend must treat as moves or allocations,
# not computation, and random ops (their decompositions draw from the host RNG).
_NOT_COMPUTATION = frozenset(
    {
        "_to_copy",
        "copy",
        "lift_fresh_copy",
        "empty_like",
        "new_empty",
        "new_empty_strided",
        "new_full",
        "new_zeros",
        "new_ones",
        "zero",
        "fill",
        "full_like",
        "zeros_like",
        "ones_like",
        "rand_like",
        "randn_like",
        "randint_like",
        "bernoulli",
        "exponential",
        "uniform",
        "normal_functional",
        "linspace",
        "arange",
        "rrelu_with_noise_functional",
        "_unsafe_view",
    }
)


def _has_kernel(qualified: str, key: str) -> bool:
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key))
    except RuntimeError:  # a TorchScript-only op: not in the dispatcher
        return False


def _computes_from_inputs(op: Any) -> bool:
    """A plain computation: a tensor input, a fresh (non-aliasing) output, nothing mutated."""
    schema = op._schema
    if schema.name.split("::", 1)[-1] in _NOT_COMPUTATION:
        return False
    if any(a.alias_info is not None for a in schema.arguments):
        return False
    if any(r.alias_info is not None for r in schema.returns):
        return False
    return any(str(a.type) in ("Tensor", "Tensor?", "Tensor[]") for a in schema.arguments)


def _profile_kernel(op: Any, qualified: str) -> Any:
    """A PrivateUse1 kernel for a declared op, as the device registers one. The dispatcher then
    routes the op as it routes a real backend's: the kernel instead of a decomposition, a
    registered functional or in-place form instead of its `.out`. Under a profile that does
    not declare the op the kernel steps aside: the decomposition, the structured `.out`, or
    the boxed fallback runs, as without a kernel."""
    composite = _has_kernel(qualified, "CompositeExplicitAutograd")
    nonfunctional = _has_kernel(qualified, "CompositeExplicitAutogradNonFunctional")

    def kernel(*args: Any, **kwargs: Any) -> Any:
        info = _op_info(op)
        device = _STATE.device
        if device is not None and device.op_profile.declares(info.name):
            return _execute(op, info, args, kwargs)
        if composite or nonfunctional:
            args_list, kwargs = list(args), dict(kwargs)
            _rewrap_numbers(info, args_list, kwargs)  # wrapped scalars arrive as numbers
            keys = _COMPOSITE_KEYS if composite else _NONFUNCTIONAL_KEYS
            return op.redispatch(keys, *args_list, **kwargs)
        return _execute(op, info, args, kwargs)

    return kernel


def _kernel_candidates(profile: DeviceProfile) -> Iterator[tuple[str, Any]]:
    """(qualified name, OpOverload) of the ops `profile` gives a kernel of their own."""
    for entry in sorted(profile.ops):
        namespace, _, rest = entry.partition("::")
        base, _, overload = rest.partition(".")
        packet = getattr(getattr(torch.ops, namespace, None), base, None)
        if namespace != "aten" or packet is None:
            continue
        names = [overload or "default"] if profile.exact else packet.overloads()
        for name in names:
            if name not in packet.overloads():
                continue  # a registered name that matches no schema (inert as written)
            qualified = f"aten::{base}" + ("" if name == "default" else f".{name}")
            if _has_kernel(qualified, "PrivateUse1"):
                continue
            op = getattr(packet, name)
            if profile.exact:
                if (
                    base in _DRIVER_OPS
                    or _has_kernel(qualified, "CompositeImplicitAutograd")
                    or _op_info(op).is_view
                    or profile.is_routed_to_cpu(qualified)
                ):
                    continue
            elif not (
                _has_kernel(qualified, "CompositeExplicitAutograd") and _computes_from_inputs(op)
            ):
                continue
            yield qualified, op


def _register_profile_kernels(profile: DeviceProfile) -> None:
    """Register the kernels `profile` declares (once per op and process: registration cannot
    be undone, and each kernel consults the current profile when it runs)."""
    if not _STATE.libraries or profile in _STATE.kernels_for:
        return
    aten = _STATE.libraries[0]
    for qualified, op in _kernel_candidates(profile):
        if qualified in _STATE.kernel_registered:
            continue
        aten.impl(op, _opaque_to_dynamo(_profile_kernel(op, qualified)), "PrivateUse1")
        _STATE.kernel_registered.add(qualified)
    _STATE.kernels_for.add(profile)


def _opaque_to_dynamo(fn: Any) -> Any:
    """Keep Dynamo from tracing the backend's own Python: after a graph break, eager code runs
    with Dynamo's frame hook on, and it would otherwise try to compile these kernels."""
    return torch.compiler.disable(fn, recursive=True)


def install_backend() -> None:
    """Register the emulated backend in this process (idempotent; first registration wins)."""
    if _STATE.installed:
        return
    _check_torch_version()
    current = torch._C._get_privateuse1_backend_name()
    if current != "privateuseone":
        raise DeviceError(
            f"The PrivateUse1 backend is already registered as {current!r} in this process, so "
            "the emulated neuron device cannot be installed.",
            device=BACKEND_NAME,
            hint="Use the real device, or run the emulated one in a fresh process.",
        )
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(
        rename=BACKEND_NAME,
        backend_module=_NeuronModule(),
        hook=_Hooks(),
        device_guard=_DeviceGuard(),
    )
    aten = torch.library.Library("aten", "IMPL")  # noqa: TOR901
    for name, fn in [
        ("empty.memory_format", _empty_memory_format),
        ("empty_strided", _empty_strided),
        ("_copy_from", _copy_from),
        ("_copy_from_and_resize", _copy_from_and_resize),
        ("resize_", _resize),
        ("set_.source_Storage", _set_source_storage),
        ("set_.source_Storage_storage_offset", _set_source_storage_offset),
        ("set_.source_Tensor", _set_source_tensor),
        ("set_", _set_empty),
        ("_local_scalar_dense", _local_scalar_dense),
        ("convolution_overrideable", _convolution),
        ("convolution_backward_overrideable", _convolution_backward),
    ]:
        aten.impl(name, _opaque_to_dynamo(fn), "PrivateUse1")
    # `_copy_from` reads a lazy conjugate / negation itself (`_with_math_bits`). PyTorch's
    # fallback for those bits would materialise the source with `clone`, whose `copy_` calls
    # `_copy_from` with the same bit again: unbounded recursion, a SIGSEGV on the stack.
    for name in ("_copy_from", "_copy_from_and_resize"):
        for key in ("Conjugate", "Negative"):
            aten.impl(name, torch.library.fallthrough_kernel, key)
    for key in ("PrivateUse1", "AutogradPrivateUse1"):  # the composite it replaces is both
        aten.impl(
            "scaled_dot_product_attention",
            _opaque_to_dynamo(_scaled_dot_product_attention),
            key,
        )
    fallback = torch.library.Library("_", "IMPL")  # noqa: TOR901
    fallback.fallback(_opaque_to_dynamo(_fallback), "PrivateUse1")
    # Autocast: TorchNeuron's policy for the ops it lists; every other op falls through.
    fallback.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    neuron_autocast.register(aten)
    _STATE.libraries = [aten, fallback]
    global _DEV
    _DEV = torch.device(BACKEND_NAME, 0)
    torch.serialization.register_package(19, _serialization_tag, _serialization_restore)
    _STATE.installed = True
    _check_autograd_engine()


def _check_autograd_engine() -> None:
    """The autograd engine sizes its device threads once, at the first backward in the process;
    a backward that ran before this install leaves `neuron` without one. Say so now, clearly."""
    leaf = torch.ones(1, device=_DEV, requires_grad=True)
    try:
        (leaf * 2).sum().backward()
    except RuntimeError as exc:
        if "device_ready_queues_" not in str(exc):
            raise
        raise DeviceError(
            "A backward pass ran in this process before the neuron backend was installed, so "
            "autograd has no thread for the neuron device.",
            device=BACKEND_NAME,
            hint="Call device.setup() before any backward pass (e.g. first thing in the worker).",
        ) from None


def is_installed() -> bool:
    return _STATE.installed


def current_device() -> NeuronEmulatedDevice | None:
    return _STATE.device


# ---------------------------------------------------------------------------------------------
# The Device


class NeuronEmulatedDevice(Device):
    """`neuron` emulated on the host: native ops from a profile, every other op a logged fallback."""

    name = "neuron"
    emulated = True
    compile_backend = "neuron"
    availability_hint = (
        "Another PrivateUse1 backend owns this process; run the emulated device in a fresh process."
    )

    def __init__(
        self,
        *,
        strict: bool = False,
        profile: str | DeviceProfile | None = None,
        compile_mode: str | None = None,
    ):
        """`profile`: a bundled profile's name, a path to a file of op names, or a profile.
        `compile_mode`: what the compile backend does with a graph op it cannot lower (`raise`,
        TorchNeuron's released default; `eager`; `partition`); default from TorchNeuron's own
        TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION (0: eager)."""
        from runners.neuron_compile import resolve_compile_mode

        op_profile = profile if isinstance(profile, DeviceProfile) else load_profile(profile)
        super().__init__(strict=strict, profile=op_profile.name)
        self.op_profile: DeviceProfile = op_profile
        self.compile_mode = resolve_compile_mode(compile_mode)

    @classmethod
    def is_available(cls) -> bool:
        return _STATE.installed or torch._C._get_privateuse1_backend_name() == "privateuseone"

    def setup(self) -> None:
        install_backend()
        from runners.neuron_compile import register_backend

        register_backend()
        self.activate()

    def activate(self) -> None:
        """Make this device's profile and strictness the ones the backend applies (eager and
        compile)."""
        _STATE.device = self
        _register_profile_kernels(self.op_profile)
        from runners import neuron_compile

        neuron_compile.set_profile(self.op_profile, strict=self.strict, mode=self.compile_mode)

    @contextlib.contextmanager
    def record_fallbacks(self) -> Iterator[FallbackLog]:
        previous = _STATE.device
        self.activate()
        try:
            with collecting(FallbackLog()) as log:
                yield log
        finally:
            (previous or self).activate()

    @contextlib.contextmanager
    def strictness(self, strict: bool) -> Iterator[None]:
        """Temporarily switch strict mode (a fallback raises `FallbackDisallowed`)."""
        before, self.strict = self.strict, strict
        self.activate()
        try:
            yield
        finally:
            self.strict = before
            self.activate()

    def peak_memory_bytes(self) -> int | None:
        return _Memory.peak

    def reset_peak_memory(self) -> None:
        _Memory.peak = _Memory.current

    def profile_info(self) -> tuple[str | None, str | None]:
        return self.op_profile.name, self.op_profile.hash

    def is_native(self, op: str) -> bool:
        return self.op_profile.is_native(op)

    def classify(self, op: str) -> OpClass:
        """What the device does with `op` (`aten::name.overload`), from its profile's data."""
        return self.op_profile.classify(op)

    def versions(self) -> dict[str, str]:
        return {
            "neuron_backend": "emulated (pure-Python PrivateUse1)",
            "torch": torch.__version__,
            "device_profile": f"{self.op_profile.name}@{self.op_profile.hash}",
            "compile_mode": str(self.compile_mode),
        }

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        return dtype in SUPPORTED_DTYPES
