"""Hooks and registration: the device module PyTorch finds as `torch.neuron`, the device guard,
serialization, the profile's kernels, and `install_backend()`, which registers all of it.

Everything that touches the private registration APIs is here. Registration is process-wide
and first-wins; `install_backend()` is idempotent, and every kernel consults the *current*
device (its profile and strict flag), so profiles can change at run time. Tested on torch 2.14
(TorchNeuron's torch).
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet

from ground.errors import DeviceError
from runners.devices.neuron import autocast, pending
from runners.devices.neuron.dispatch import (
    convolution,
    convolution_backward,
    execute,
    fallback,
    rewrap_numbers,
)
from runners.devices.neuron.driver import (
    copy_from,
    copy_from_and_resize,
    empty_memory_format,
    empty_strided,
    local_scalar_dense,
    resize,
    set_empty,
    set_source_storage,
    set_source_storage_offset,
    set_source_tensor,
)
from runners.devices.neuron.profiles import DeviceProfile
from runners.devices.neuron.schemas import op_schema
from runners.devices.neuron.sdpa import scaled_dot_product_attention
from runners.devices.neuron.state import BACKEND_NAME, STATE, TESTED_TORCH, ActiveDevice

_PYERR_OCCURRED = ctypes.pythonapi.PyErr_Occurred  # raises the pending error, if there is one


class DeviceContext:
    """`torch.neuron.device(...)`: a context manager (one device, so it only validates)."""

    def __init__(self, device: Any):
        self.device = device

    def __enter__(self) -> DeviceContext:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class NeuronModule:
    """What PyTorch looks up as `torch.neuron` for a PrivateUse1 backend named `neuron`."""

    device = DeviceContext
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
    def is_bf16_supported() -> bool:  # transformers asks it (`is_torch_bf16_gpu_available`)
        return True

    @staticmethod
    def get_device_properties(device: Any = None) -> Any:
        """TRL reads `.name` on neuron (`trainer/base_trainer.py: _send_telemetry`)."""
        return types.SimpleNamespace(name="neuron (emulated)", total_memory=0)

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


class Hooks(torch._C._acc.PrivateUse1Hooks):  # type: ignore[misc,name-defined]
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


def _serialization_tag(obj: Any) -> str | None:
    return None  # saving: PyTorch's own PrivateUse1 tagger names the location `neuron:0`


def _serialization_restore(obj: Any, location: str) -> Any:
    """torch.load to neuron: move the storage through a tensor (`UntypedStorage(n, device=...)`
    has no allocator behind it on a Python backend)."""
    if not location.startswith(BACKEND_NAME):
        return None
    if obj.device.type == BACKEND_NAME:
        return obj
    t = torch.empty(obj.nbytes(), dtype=torch.uint8, device=STATE.dev)
    t.copy_(torch.empty(0, dtype=torch.uint8, device=obj.device).set_(obj))
    return t.untyped_storage()


class DeviceGuard(torch._C._acc.DeviceGuard):  # type: ignore[misc,name-defined]
    """The device guard. `type_` runs in a noexcept destructor during a backward: a Python
    error pending there is kept in the pending-error store (`pending.py`), not reported."""

    def type_(self):
        try:
            _PYERR_OCCURRED()
        except BaseException as exc:  # noqa: BLE001 - any pending error, kept for the caller
            pending.keep_pending_error(exc)
        return torch._C._autograd.DeviceType.PrivateUse1


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
# `copy_from`), so they keep their route whatever a profile says.
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
        info = op_schema(op)
        device = STATE.device
        if device is not None and device.op_profile.declares(info.name):
            return execute(op, info, args, kwargs)
        if composite or nonfunctional:
            args_list, kwargs = list(args), dict(kwargs)
            rewrap_numbers(info, args_list, kwargs)  # wrapped scalars arrive as numbers
            keys = _COMPOSITE_KEYS if composite else _NONFUNCTIONAL_KEYS
            return op.redispatch(keys, *args_list, **kwargs)
        return execute(op, info, args, kwargs)

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
                    or op_schema(op).is_view
                    or profile.is_routed_to_cpu(qualified)
                ):
                    continue
            elif not (
                _has_kernel(qualified, "CompositeExplicitAutograd") and _computes_from_inputs(op)
            ):
                continue
            yield qualified, op


def register_profile_kernels(profile: DeviceProfile) -> None:
    """Register the kernels `profile` declares (once per op and process: registration cannot
    be undone, and each kernel consults the current profile when it runs)."""
    if not STATE.libraries or profile in STATE.kernels_for:
        return
    aten = STATE.libraries[0]
    for qualified, op in _kernel_candidates(profile):
        if qualified in STATE.kernel_registered:
            continue
        aten.impl(op, opaque_to_dynamo(_profile_kernel(op, qualified)), "PrivateUse1")
        STATE.kernel_registered.add(qualified)
    STATE.kernels_for.add(profile)


def opaque_to_dynamo(fn: Any) -> Any:
    """Keep Dynamo from tracing the backend's own Python: after a graph break, eager code runs
    with Dynamo's frame hook on, and it would otherwise try to compile these kernels."""
    return torch.compiler.disable(fn, recursive=True)


def install_backend() -> None:
    """Register the emulated backend in this process (idempotent; first registration wins)."""
    if STATE.installed:
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
        backend_module=NeuronModule(),
        hook=Hooks(),
        device_guard=DeviceGuard(),
    )
    aten = torch.library.Library("aten", "IMPL")  # noqa: TOR901
    for name, fn in [
        ("empty.memory_format", empty_memory_format),
        ("empty_strided", empty_strided),
        ("_copy_from", copy_from),
        ("_copy_from_and_resize", copy_from_and_resize),
        ("resize_", resize),
        ("set_.source_Storage", set_source_storage),
        ("set_.source_Storage_storage_offset", set_source_storage_offset),
        ("set_.source_Tensor", set_source_tensor),
        ("set_", set_empty),
        ("_local_scalar_dense", local_scalar_dense),
        ("convolution_overrideable", convolution),
        ("convolution_backward_overrideable", convolution_backward),
    ]:
        aten.impl(name, opaque_to_dynamo(fn), "PrivateUse1")
    # `_copy_from` reads a lazy conjugate / negation itself (`with_math_bits`). PyTorch's
    # fallback for those bits would materialise the source with `clone`, whose `copy_` calls
    # `_copy_from` with the same bit again: unbounded recursion, a SIGSEGV on the stack.
    for name in ("_copy_from", "_copy_from_and_resize"):
        for key in ("Conjugate", "Negative"):
            aten.impl(name, torch.library.fallthrough_kernel, key)
    for key in ("PrivateUse1", "AutogradPrivateUse1"):  # the composite it replaces is both
        aten.impl(
            "scaled_dot_product_attention",
            opaque_to_dynamo(scaled_dot_product_attention),
            key,
        )
    boxed = torch.library.Library("_", "IMPL")  # noqa: TOR901
    boxed.fallback(opaque_to_dynamo(fallback), "PrivateUse1")
    # Autocast: TorchNeuron's policy for the ops it lists; every other op falls through.
    boxed.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    autocast.register(aten)
    STATE.libraries = [aten, boxed]
    STATE.dev = torch.device(BACKEND_NAME, 0)
    torch.serialization.register_package(19, _serialization_tag, _serialization_restore)
    STATE.installed = True
    _check_autograd_engine()


def _check_autograd_engine() -> None:
    """The autograd engine sizes its device threads once, at the first backward in the process;
    a backward that ran before this install leaves `neuron` without one. Say so now, clearly."""
    leaf = torch.ones(1, device=STATE.dev, requires_grad=True)
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


def current_device() -> ActiveDevice | None:
    return STATE.device
