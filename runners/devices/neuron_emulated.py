"""The emulated `neuron` device: a pure-Python PrivateUse1 backend with a per-op CPU-fallback log.

PyTorch treats it as a real device named `neuron` (as it treats TorchNeuron): tensors live on
`neuron:0`, backed by host buffers. A device profile declares which ATen ops run "natively"; every
other op reaches ONE boxed fallback that runs it on CPU aliases and records the op (with
overload), the call count and the bytes a real `at::native::cpu_fallback` would move each way.
Native ops run on CPU aliases too (this is an emulation) but are not logged.

Everything that touches the private registration APIs is in this module. Registration is
process-wide and first-wins; `install_backend()` is idempotent, and the fallback consults the
*current* device object (its profile and strict flag), so profiles can change at run time.
Tested on torch 2.13.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet

from reports.errors import DeviceError
from runners.devices.base import Device, FallbackLog, active_fallback_logs, collecting
from runners.devices.profiles import DeviceProfile, load_profile

BACKEND_NAME = "neuron"
TESTED_TORCH = ((2, 13), (2, 15))  # [from, to): the private APIs used here are checked on 2.13
SUPPORTED_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16})


class FallbackDisallowed(DeviceError):
    """Strict mode: an op without a native kernel was called. `op` names it (`aten::x.overload`)."""

    environment = False  # the model's own result (a `fail` naming the op), not the machine's

    def __init__(self, message: str | None = None, *, op: str, **fields: Any):
        super().__init__(
            message
            or f"{op} has no native kernel on the neuron device and CPU fallback is disabled",
            op=op,
            hint=fields.pop("hint", None)
            or "Run without strict mode to let it fall back, or add the op to the device profile.",
            **fields,
        )
        self.op = op


# ---------------------------------------------------------------------------------------------
# Process-wide backend state


class _BackendState:
    installed = False
    device: NeuronEmulatedDevice | None = None  # the current device: its profile and strictness
    libraries: list[Any] = []  # torch.library.Library objects must stay alive
    native_cache: dict[str, bool] = {}
    native_cache_profile: DeviceProfile | None = None
    composite_registered: set[str] = set()  # ops given a kernel by _register_composite_natives


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


def _host_alias(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the same memory as the neuron tensor `t`."""
    return torch.empty(0, dtype=t.dtype).set_(
        _host_storage(t), t.storage_offset(), t.size(), t.stride()
    )


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
# The boxed fallback: every op without a kernel above, native (profile) or not.


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


def _is_native(name: str, device: NeuronEmulatedDevice) -> bool:
    if _STATE.native_cache_profile is not device.op_profile:
        _STATE.native_cache = {}
        _STATE.native_cache_profile = device.op_profile
    native = _STATE.native_cache.get(name)
    if native is None:
        native = device.op_profile.is_native(name)
        _STATE.native_cache[name] = native
    return native


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
            return _make_tensor(storage, y.storage_offset(), y.size(), y.stride(), y.dtype)
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


def _execute(op: Any, info: _OpInfo, args: tuple, kwargs: dict) -> Any:
    device = _STATE.device
    native = info.is_view or (device is not None and _is_native(info.name, device))
    if not native and device is not None and device.strict:
        raise FallbackDisallowed(op=info.name, device=BACKEND_NAME)
    call = _HostCall()
    host_args = list(call.to_host(args))
    host_kwargs = {k: call.to_host(v) for k, v in kwargs.items()}
    _rewrap_numbers(info, host_args, host_kwargs)
    target = kwargs.get("device")
    call.outputs_on_host = target is not None and torch.device(target).type != BACKEND_NAME
    try:
        result = op(*host_args, **host_kwargs)
    except Exception as exc:  # name the op that failed, for the stage's `failing_op`
        if getattr(exc, "op", None) is None:
            with contextlib.suppress(AttributeError):
                exc.op = info.name  # type: ignore[attr-defined]
        raise
    for key in info.mutated:
        if isinstance(key, int):
            if key < len(args):
                call.sync_mutated(args[key], host_args[key])
        elif key in kwargs:
            call.sync_mutated(kwargs[key], host_kwargs[key])
    out = call.from_host(result)
    if not native:
        for log in active_fallback_logs():
            log.record(info.name, bytes_h2d=call.bytes_h2d, bytes_d2h=call.bytes_d2h)
    return out


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
    return _execute(op, _op_info(op), args, kwargs)


# Convolutions reach `*_overrideable` kernels (whose defaults raise), not the fallback. They are
# classified and recorded as the ops a profile names and the CPU runs: aten::convolution(_backward).
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


class _DeviceGuard(torch._C._acc.DeviceGuard):  # type: ignore[misc,name-defined]
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


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
            f"{low[0]}.{low[1]}; this is torch {torch.__version__}.",
            device=BACKEND_NAME,
            hint="Install torch 2.13 or 2.14, or use --device cpu.",
        )


_COMPOSITE_KEYS = DispatchKeySet(DispatchKey.CompositeExplicitAutograd)


def _composite_kernel(op: Any) -> Any:
    """A PrivateUse1 kernel for an op whose only kernel for new backends is a decomposition
    (CompositeExplicitAutograd, e.g. `native_layer_norm`). A backend that lowers the op registers
    a kernel for it, so the decomposition never runs: when the profile declares it native it runs
    as one native op; otherwise it decomposes as on any backend without a kernel, and the ops of
    the decomposition reach the fallback and are logged."""

    def kernel(*args: Any, **kwargs: Any) -> Any:
        info = _op_info(op)
        device = _STATE.device
        if device is not None and _is_native(info.name, device):
            return _execute(op, info, args, kwargs)
        return op.redispatch(_COMPOSITE_KEYS, *args, **kwargs)

    return kernel


# Ops a backend must treat as moves or allocations, not computation (`_to_copy` native would make
# `.cpu()` return a device tensor), and random ops (their decompositions draw from the host RNG).
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


def _computes_from_inputs(op: Any) -> bool:
    """Only plain computations get a native kernel: a tensor input, a fresh (non-aliasing)
    output, nothing mutated. Views must stay views of the input's storage (as the fallback's
    view handling keeps them), factories must allocate on the device."""
    schema = op._schema
    if schema.name.split("::", 1)[-1] in _NOT_COMPUTATION:
        return False
    if any(a.alias_info is not None for a in schema.arguments):
        return False
    if any(r.alias_info is not None for r in schema.returns):
        return False
    return any(str(a.type) in ("Tensor", "Tensor?", "Tensor[]") for a in schema.arguments)


def _register_composite_natives(profile: DeviceProfile) -> None:
    """Give every op of `profile` that would otherwise be decomposed a kernel of its own."""
    if not _STATE.libraries:
        return
    aten = _STATE.libraries[0]
    for entry in sorted(profile.ops):
        namespace, _, rest = entry.partition("::")
        base, _, overload = rest.partition(".")
        packet = getattr(getattr(torch.ops, namespace, None), base, None)
        if namespace != "aten" or packet is None:
            continue
        for name in [overload] if overload else packet.overloads():
            qualified = f"aten::{base}" + ("" if name == "default" else f".{name}")
            if qualified in _STATE.composite_registered:
                continue
            try:
                decomposed = torch._C._dispatch_has_kernel_for_dispatch_key(
                    qualified, "CompositeExplicitAutograd"
                ) and not torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "PrivateUse1")
            except RuntimeError:  # a TorchScript-only op: not in the dispatcher
                continue
            if not decomposed:
                continue
            op = getattr(packet, name)
            if not _computes_from_inputs(op):
                continue
            aten.impl(op, _opaque_to_dynamo(_composite_kernel(op)), "PrivateUse1")
            _STATE.composite_registered.add(qualified)


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
    fallback = torch.library.Library("_", "IMPL")  # noqa: TOR901
    fallback.fallback(_opaque_to_dynamo(_fallback), "PrivateUse1")
    # No autocast op lists for this device: autocast regions run ops in their own dtypes.
    fallback.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
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

    def __init__(self, *, strict: bool = False, profile: str | DeviceProfile | None = None):
        """`profile`: a bundled profile's name, a path to a file of op names, or a profile."""
        op_profile = profile if isinstance(profile, DeviceProfile) else load_profile(profile)
        super().__init__(strict=strict, profile=op_profile.name)
        self.op_profile: DeviceProfile = op_profile

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
        _register_composite_natives(self.op_profile)
        from runners import neuron_compile

        neuron_compile.set_profile(self.op_profile, strict=self.strict)

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

    def versions(self) -> dict[str, str]:
        return {
            "torch": torch.__version__,
            "neuron_backend": "emulated (pure-Python PrivateUse1)",
            "device_profile": f"{self.op_profile.name}@{self.op_profile.hash}",
        }

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        return dtype in SUPPORTED_DTYPES
