"""Autocast policies as data: which ops autocast casts, and how, applied by Python kernels.

PyTorch's accelerator autocast (CUDA's, and TorchNeuron's, which registers the same op lists
for AutocastPrivateUse1: torch_neuronx/csrc/amp/autocast_mode.cpp) is a list of ops, each with a
cast policy, plus a kernel that bans `binary_cross_entropy` under autocast. A device's policy
is a file in its folder (one `op<TAB>policy` line per registration, with the source lines; the
neuron device's is TorchNeuron's, written by `scripts/extract_autocast_policy.py`). `register` gives each listed op a kernel at an autocast
dispatch key that does what PyTorch's `WrapFunction_` does for its policy (ATen's
autocast_mode.h): with that autocast key excluded, cast the eligible arguments, then call the op
again through the dispatcher. An op not in the list falls through (autocast leaves it alone).

Two uses: a device's autocast policy file (`Device.autocast_policy_file`; the emulated device's
is TorchNeuron's) is registered by that device at its autocast key (the emulated device at
AutocastPrivateUse1, as TorchNeuron does), and the amp stage's CPU reference applies the same
policy at AutocastCPU for the length of one step (`on_cpu`), so that the reference casts
exactly the ops the device casts (the CPU's own autocast lists differ: it keeps softmax and
layer norm in bf16, for one).

Eligible arguments are PyTorch's: floating tensors on the autocast's device, float64 excepted.
The one difference: autocast caches the lower-precision copy of a leaf that requires grad (a
weight) for the whole autocast region; here each call casts again (the same ops, more
`_to_copy` calls).
"""

from __future__ import annotations

import contextlib
import enum
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet

# The banned kernel's message (TorchNeuron's autocast_mode.cpp, as PyTorch's CUDA one says it).
BANNED_MESSAGE = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using "
    "torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast."
)


class CastPolicy(str, enum.Enum):
    """ATen's `CastPolicy`, plus TorchNeuron's banned kernel."""

    LOWER_PRECISION_FP = "lower_precision_fp"  # floating inputs to the autocast dtype
    FP32 = "fp32"  # floating inputs to float32
    FP32_SET_OPT_DTYPE = "fp32_set_opt_dtype"  # `dtype=float32` unless the caller set one
    FP32_APPEND_DTYPE = "fp32_append_dtype"  # the overload that takes a dtype, float32
    PROMOTE = "promote"  # the widest floating input type
    BANNED = "banned"  # raises under autocast

    def __str__(self) -> str:
        return self.value


@functools.cache
def load_policy(path: Path) -> dict[str, CastPolicy]:
    """op (`aten::name[.overload]`) -> its cast policy, in the file's order."""
    policy: dict[str, CastPolicy] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        op, kind, *_ = line.split("\t")
        policy[op] = CastPolicy(kind)
    return policy


def _overload(name: str) -> Any:
    """The OpOverload `aten::name[.overload]` names, or None where this torch has none."""
    base, _, overload = name.removeprefix("aten::").partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None or (overload or "default") not in packet.overloads():
        return None
    return getattr(packet, overload or "default")


def _eligible(x: Any, device: str) -> bool:
    return (
        isinstance(x, torch.Tensor)
        and x.device.type == device
        and x.is_floating_point()
        and x.dtype != torch.float64
    )


def _cast(x: Any, dtype: torch.dtype, device: str) -> Any:
    if _eligible(x, device):
        return x if x.dtype == dtype else x.to(dtype)
    if isinstance(x, (list, tuple)):  # argument tuples, and TensorList arguments in them
        return type(x)(_cast(v, dtype, device) for v in x)
    if isinstance(x, dict):
        return {k: _cast(v, dtype, device) for k, v in x.items()}
    return x


def _tensors(values: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out += _tensors(v)
    return out


def _promote_type(args: tuple, kwargs: dict, device: str) -> torch.dtype:
    """ATen's `promote_type`: float32 wins over the autocast dtype; float64 is ignored."""
    lower = torch.get_autocast_dtype(device)
    current = lower
    for t in _tensors([*args, *kwargs.values()]):
        if not _eligible(t, device):
            continue
        if current == torch.float32 or t.dtype == torch.float32:
            current = torch.float32
        elif not (current == lower and t.dtype == lower):
            raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
    return current


def _with_dtype(op: Any, args: tuple, kwargs: dict, dtype: torch.dtype) -> tuple[tuple, dict]:
    """`dtype` in the op's optional `dtype` argument, unless the caller gave one."""
    names = [a.name for a in op._schema.arguments]
    index = names.index("dtype")
    if index < len(args):
        if args[index] is None:
            args = (*args[:index], dtype, *args[index + 1 :])
    elif kwargs.get("dtype") is None:
        kwargs = {**kwargs, "dtype": dtype}
    return args, kwargs


def _dtype_overload(op: Any) -> Any:
    """The overload of `op`'s packet whose arguments are `op`'s and a trailing `dtype`
    (`norm.Scalar` -> `norm.ScalarOpt_dtype`): what `fp32_append_dtype` redispatches to."""
    names = [a.name for a in op._schema.arguments]
    packet = getattr(torch.ops.aten, op._schema.name.split("::")[-1])
    for overload in packet.overloads():
        candidate = getattr(packet, overload)
        other = [a.name for a in candidate._schema.arguments]
        if other == [*names, "dtype"]:
            return candidate
    raise RuntimeError(f"{op._schema.name}.{op._overloadname}: no overload that takes a dtype")


def _kernel(op: Any, policy: CastPolicy, key: str, device: Callable[[], str]) -> Callable:
    """The kernel of `op` at the autocast `key` under `policy` (ATen's `WrapFunction_`);
    `device()` names the autocast's device type."""
    appended = _dtype_overload(op) if policy is CastPolicy.FP32_APPEND_DTYPE else None
    schema_args = op._schema.arguments
    exclude = DispatchKeySet(getattr(DispatchKey, key))

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if policy is CastPolicy.BANNED:
            error = RuntimeError(BANNED_MESSAGE)
            error.op = op.name()  # type: ignore[attr-defined]  # the stage's failing_op
            raise error
        where = device()
        with torch._C._ExcludeDispatchKeyGuard(exclude):
            first = args[0] if args else None
            if policy is CastPolicy.LOWER_PRECISION_FP:
                dtype = torch.get_autocast_dtype(where)
                return op(*_cast(args, dtype, where), **_cast(kwargs, dtype, where))
            if policy is CastPolicy.FP32:
                return op(*_cast(args, torch.float32, where), **_cast(kwargs, torch.float32, where))
            if policy is CastPolicy.PROMOTE:
                dtype = _promote_type(args, kwargs, where)
                return op(*_cast(args, dtype, where), **_cast(kwargs, dtype, where))
            if policy is CastPolicy.FP32_SET_OPT_DTYPE:
                if not _eligible(first, where):
                    return op(*args, **kwargs)
                args, kwargs = _with_dtype(op, args, kwargs, torch.float32)
                return op(*args, **kwargs)
            # FP32_APPEND_DTYPE: every argument (defaults filled in), then the output dtype
            full = [
                args[i] if i < len(args) else kwargs.get(a.name, a.default_value)
                for i, a in enumerate(schema_args)
            ]
            out_type = torch.float32 if _eligible(first, where) else full[0].dtype
            assert appended is not None
            return appended(*full, dtype=out_type)

    return kernel


def _passthrough(op: Any, key: str) -> Callable:
    """A kernel at the autocast `key` that leaves `op` alone (what an unlisted op gets)."""
    exclude = DispatchKeySet(getattr(DispatchKey, key))

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(exclude):
            return op(*args, **kwargs)

    return kernel


def register(library: Any, key: str, device: Callable[[], str], path: Path) -> list[str]:
    """Register the policy's kernels at the autocast dispatch `key` in `library` (an `aten`
    IMPL library the caller keeps alive); the ops registered (an op this torch lacks is left
    out)."""
    done = []
    for name, policy in load_policy(path).items():
        op = _overload(name)
        if op is None:
            continue
        kernel = _kernel(op, policy, key, device)
        library.impl(op, torch.compiler.disable(kernel, recursive=True), key)
        done.append(name)
    return done


@functools.cache
def _cpu_autocast_ops() -> tuple[str, ...]:
    """Ops the CPU's own autocast has a kernel for (its lists)."""
    return tuple(
        sorted(
            name
            for name in torch._C._dispatch_get_all_op_names()
            if name.startswith("aten::")
            and torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCPU")
        )
    )


@contextlib.contextmanager
def on_cpu(dtype: torch.dtype, path: Path) -> Iterator[None]:
    """CPU autocast to `dtype` under the policy of `path` instead of the CPU's own lists, for
    the block: the policy's ops get its kernels at AutocastCPU, every other op the CPU's
    autocast lists name is left alone; both are unregistered on exit."""
    library = torch.library.Library("aten", "IMPL")  # noqa: TOR901
    try:
        listed = set(register(library, "AutocastCPU", lambda: "cpu", path))
        for name in _cpu_autocast_ops():
            if name not in listed and (op := _overload(name)) is not None:
                library.impl(op, _passthrough(op, "AutocastCPU"), "AutocastCPU")
        with torch.autocast("cpu", dtype=dtype):
            yield
    finally:
        library._destroy()
