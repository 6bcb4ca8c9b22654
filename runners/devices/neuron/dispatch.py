"""Dispatch: every op that reaches the backend, through a native kernel or the boxed fallback.

`decide` says whether a call runs natively (the profile's class of the op, then the snapshot's
per-call rules: complex tensors, conditional ops' declines and preconditions); `execute` runs it
on CPU aliases of its arguments, as the device's kernel (emulated) or as a logged fallback.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from runners.devices.base import FallbackDisallowed, active_fallback_logs
from runners.devices.neuron import attention, rules
from runners.devices.neuron.dtypes import run_native
from runners.devices.neuron.profiles import OpClass
from runners.devices.neuron.schemas import OpSchema, op_schema
from runners.devices.neuron.state import (
    BACKEND_NAME,
    CPU_KEYS,
    STATE,
    ActiveDevice,
    is_neuron,
    set_storage,
)
from runners.devices.neuron.storage import (
    host_alias,
    host_of,
    make_tensor,
    with_math_bits,
    wrap_host,
)


@dataclass(frozen=True)
class Static:
    """What the profile says of an op, whatever its inputs (cached per profile and name)."""

    native: bool  # declared, not routed to the CPU (views count as native)
    op_class: OpClass
    conditional: bool


def static_class(name: str, info: OpSchema, device: ActiveDevice) -> Static:
    profile = device.op_profile
    if STATE.native_cache_profile is not profile:
        STATE.native_cache = {}
        STATE.native_cache_profile = profile
    found = STATE.native_cache.get(name)
    if found is None:
        op_class = OpClass.VIEW if info.is_view else profile.classify(name)
        native = op_class in (OpClass.NATIVE, OpClass.VIEW, OpClass.CONDITIONAL)
        found = Static(native, op_class, op_class is OpClass.CONDITIONAL)
        STATE.native_cache[name] = found
    return found


def host_values(t: torch.Tensor) -> torch.Tensor:
    """A rule reading a tensor's data (TorchNeuron syncs for it): not counted as a copy."""
    return host_alias(t) if is_neuron(t) else t


def decide(op: Any, info: OpSchema, args: tuple, kwargs: dict) -> tuple[bool, OpClass, str | None]:
    """(runs natively, the op's class, why a native kernel declined this call)."""
    device = STATE.device
    if device is None:
        return info.is_view, OpClass.VIEW if info.is_view else OpClass.FALLBACK, None
    static = static_class(info.name, info, device)
    if not static.native or static.op_class is OpClass.VIEW:
        return static.native, static.op_class, None
    if device.op_profile.raises_on_host_args(info.name):
        host = rules.host_argument(args, kwargs, BACKEND_NAME)
        if host is not None:  # TorchNeuron's default can_handle raises, uncaught
            raise HostArgumentError(f"{info.name}: {host}", op=info.name)
    if rules.has_complex(args, kwargs):
        return False, static.op_class, "complex tensors are not supported on Neuron"
    if static.conditional:
        reason = rules.decline_reason(info.name, op, args, kwargs, values=host_values)
        if reason is not None:
            return False, static.op_class, reason
    return True, static.op_class, None


_CONTAINERS = (torch.Tensor, list, tuple, torch.device)


class HostCall:
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
            host = host_of(storage)
            if host.nbytes():
                self.storages[host.data_ptr()] = storage
            alias = torch.empty(0, dtype=x.dtype).set_(
                host, x.storage_offset(), x.size(), x.stride()
            )
            with_math_bits(alias, x)
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
                storage = wrap_host(host)
                if host.nbytes():
                    self.storages[ptr] = storage
                self.bytes_h2d += y.numel() * y.element_size()
            made = make_tensor(storage, y.storage_offset(), y.size(), y.stride(), y.dtype)
            return with_math_bits(made, y)
        if isinstance(y, (list, tuple)):
            return type(y)(self.from_host(v) for v in y)
        return y

    def sync_mutated(self, original: Any, alias: Any) -> None:
        """After an in-place / out= op: point the neuron tensor at what the CPU op left."""
        if isinstance(original, (list, tuple)):
            for o, a in zip(original, alias, strict=True):
                self.sync_mutated(o, a)
            return
        if not is_neuron(original):
            return
        self.bytes_h2d += alias.numel() * alias.element_size()
        host = alias.untyped_storage()
        storage = original.untyped_storage()
        if host.data_ptr() != storage.data_ptr() or host.nbytes() != storage.nbytes():
            # The CPU op resized an out= argument (in place, on the shared host storage): adopt
            # the new buffer. Views of the old, too-small buffer are left stale, as PyTorch warns.
            storage = wrap_host(host)
        elif (
            alias.size() == original.size()
            and alias.stride() == original.stride()
            and alias.storage_offset() == original.storage_offset()
        ):
            return
        set_storage.redispatch(
            CPU_KEYS, original, storage, alias.storage_offset(), alias.size(), alias.stride()
        )


_OBSERVERS: list[Any] = []


def observe_ops(callback: Any) -> None:
    """Call `callback(op, native)` for every op the device runs (a package built on this
    emulator, such as the tests' stand-in `torch_neuronx`, tracks ops with it)."""
    _OBSERVERS.append(callback)


# Host implementations of ops PyTorch has no CPU kernel for (used when they run natively).
HOST_IMPLS: dict[str, Any] = {
    rules.SDPA_OVERRIDEABLE: attention.attention_forward,
    f"{rules.SDPA_OVERRIDEABLE}_backward": attention.attention_backward,
}


def execute(
    op: Any,
    info: OpSchema,
    args: tuple,
    kwargs: dict,
    decision: tuple[bool, OpClass, str | None] | None = None,
) -> Any:
    """Run one op on CPU aliases of its arguments: natively (the device's kernel, emulated) or
    as a logged CPU fallback, as `decide` says."""
    try:
        native, op_class, declined = decision or decide(op, info, args, kwargs)
    except Exception as exc:  # a precondition the device enforces: name the op
        name_op(exc, info.name)
        raise
    device = STATE.device
    if not native and device is not None and device.strict:
        raise FallbackDisallowed(
            f"{info.name} {'declines this call (' + declined + ')' if declined else 'has no native kernel'}"
            " on the neuron device and CPU fallback is disabled",
            op=info.name,
            device=BACKEND_NAME,
        )
    call = HostCall()
    host_args = list(call.to_host(args))
    host_kwargs = {k: call.to_host(v) for k, v in kwargs.items()}
    rewrap_numbers(info, host_args, host_kwargs)
    target = kwargs.get("device")
    call.outputs_on_host = target is not None and torch.device(target).type != BACKEND_NAME
    run = (HOST_IMPLS.get(info.name) if native else None) or op
    try:
        if native and op_class is not OpClass.VIEW:
            profile = device.op_profile if device is not None else None
            result = run_native(
                run,
                info,
                host_args,
                host_kwargs,
                mlir=profile is not None and profile.is_mlir_kernel(info.name),
                fresh=profile is not None and profile.has_fresh_outputs(info.name),
            )
        else:
            result = run(*host_args, **host_kwargs)
    except Exception as exc:  # name the op that failed, for the stage's `failing_op`
        name_op(exc, info.name)
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


class HostArgumentError(RuntimeError):
    """A native op given a non-scalar tensor on the host: TorchNeuron's default `can_handle`
    (python_ops/base.py lines 49-87) raises RuntimeError, and its caller does not catch it
    (lines 720-721). The model's `fail` naming the op."""

    def __init__(self, message: str, *, op: str):
        super().__init__(message)
        self.op = op

    def __reduce__(self) -> Any:  # keep `op` across processes
        return (_rebuild_host_argument, (str(self), self.op))


def _rebuild_host_argument(message: str, op: str) -> HostArgumentError:
    return HostArgumentError(message, op=op)


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


def name_op(exc: Exception, name: str) -> None:
    if getattr(exc, "op", None) is None:
        with contextlib.suppress(AttributeError):
            exc.op = name  # type: ignore[attr-defined]


def rewrap_numbers(info: OpSchema, args: list | tuple, kwargs: dict) -> None:
    """A Python scalar that C++ wrapped into a tensor (`x % 4` reaches `remainder.Tensor_out`)
    comes back to Python as a plain number; the op needs a tensor there again. `args` is the
    list built by `HostCall.to_host` (a fresh list for a tuple input)."""
    for key in info.tensor_args:
        if isinstance(key, int):
            if key < len(args) and isinstance(args[key], _NUMBERS):
                args[key] = torch.tensor(args[key])  # type: ignore[index]
        elif isinstance(kwargs.get(key), _NUMBERS):
            kwargs[key] = torch.tensor(kwargs[key])


_NUMBERS = (bool, int, float, complex)


def fallback(op: Any, *args: Any, **kwargs: Any) -> Any:
    """The boxed PrivateUse1 fallback: every op without a kernel of its own."""
    return execute(op, op_schema(op), args, kwargs)


# Convolutions reach `*_overrideable` kernels (whose defaults raise), not the fallback, when no
# kernel is registered for `aten::convolution` itself. They are classified and recorded as the
# ops a profile names and the CPU runs: aten::convolution(_backward).
_CONV_INFO = OpSchema("aten::convolution", False, ())
_CONV_BACKWARD_INFO = OpSchema("aten::convolution_backward", False, ())


def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    args = (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    return execute(torch.ops.aten.convolution.default, _CONV_INFO, args, {})


def convolution_backward(
    grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups, mask
):
    out_channels = weight.size(1) * groups if transposed else weight.size(0)
    bias_sizes = [out_channels] if mask[2] else None
    args = (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed)
    args += (output_padding, groups, mask)
    return execute(torch.ops.aten.convolution_backward.default, _CONV_BACKWARD_INFO, args, {})
