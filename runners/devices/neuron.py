"""`neuron`: the real TorchNeuron device when `torch_neuronx` is installed, else the emulated one.

On a real device, CPU fallbacks are found with what any PrivateUse1 backend exposes: at run time,
a profiler op event with an `aten::_to_cpu` child is an op that fell back (that is what
`at::native::cpu_fallback` calls); statically, `torch._C._dispatch_dump_table(op)` shows whether
the backend has a `[kernel]` for an op or reaches its `[backend fallback]`. Both feed the same
`FallbackLog` as the emulated device, so the same rows come out.

The real path cannot be exercised without Trainium hardware; its parsers are tested on the
emulated backend and on recorded event shapes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from reports.errors import DeviceError
from runners.devices.base import Device, FallbackLog, collecting
from runners.devices.neuron_emulated import SUPPORTED_DTYPES, NeuronEmulatedDevice
from runners.devices.profiles import DeviceProfile, load_profile

PACKAGE = "torch_neuronx"
FALLBACK_MARKER = "aten::_to_cpu"
STRICT_ENV = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"


def real_neuron_installed() -> bool:
    return importlib.util.find_spec(PACKAGE) is not None


def neuron_device(**options: Any) -> Device:
    """The registry's `neuron`: real TorchNeuron if importable, else the emulated device."""
    if real_neuron_installed():
        return RealNeuronDevice(**options)
    return NeuronEmulatedDevice(**options)


def fallbacks_from_events(events: Iterable[Any]) -> Counter[str]:
    """Ops that ran through the CPU fallback, from profiler events (`name`, `cpu_children`)."""
    found: Counter[str] = Counter()
    for event in events:
        if event.name == FALLBACK_MARKER:
            continue
        if any(child.name == FALLBACK_MARKER for child in event.cpu_children):
            found[event.name] += 1
    return found


def dispatch_entry(op: str, key: str = "PrivateUse1") -> str | None:
    """How the dispatcher serves `op` for `key`: "kernel", "fallback", or None (no entry).

    Reads `torch._C._dispatch_dump_table`; the key line is named after the renamed backend
    (`neuron:` ...) or `PrivateUse1:` depending on the torch build.
    """
    try:
        table = torch._C._dispatch_dump_table(op)
    except RuntimeError:
        return None
    names = {key, torch._C._get_privateuse1_backend_name()} if key == "PrivateUse1" else {key}
    for line in table.splitlines():
        head, _, rest = line.partition(":")
        if head.strip() in names:
            return "fallback" if "[backend fallback]" in rest else "kernel"
    return None


def native_ops_from_dispatch_table(candidates: Iterable[str]) -> set[str]:
    """The ops among `candidates` that have a real kernel for the PrivateUse1 backend."""
    return {op for op in candidates if dispatch_entry(op) == "kernel"}


class RealNeuronDevice(Device):
    """TorchNeuron (`torch_neuronx`): the real Trainium device."""

    name = "neuron"
    emulated = False
    compile_backend = "neuron"
    availability_hint = (
        "Install torch-neuronx on a Trainium instance, or use --device neuron-emulated."
    )

    def __init__(self, *, strict: bool = False, profile: str | None = None):
        super().__init__(strict=strict, profile=profile)
        self.op_profile: DeviceProfile | None = load_profile(profile) if profile else None

    @classmethod
    def is_available(cls) -> bool:
        return real_neuron_installed()

    def setup(self) -> None:
        # TorchNeuron raises on fallback by default; the sweep records fallbacks unless strict.
        os.environ.setdefault(STRICT_ENV, "1" if self.strict else "0")
        try:
            importlib.import_module(PACKAGE)
        except Exception as exc:
            raise DeviceError(
                f"{PACKAGE} is installed but failed to import: {exc}", device=self.name
            ) from exc
        from runners import neuron_compile

        if self.op_profile is not None:
            neuron_compile.set_profile(self.op_profile)
        neuron_compile.register_backend()  # keeps TorchNeuron's own `neuron` backend if it has one

    @contextlib.contextmanager
    def record_fallbacks(self) -> Iterator[FallbackLog]:
        from torch.profiler import ProfilerActivity, profile

        with collecting(FallbackLog()) as log:
            prof = profile(activities=[ProfilerActivity.CPU])
            with prof:
                yield log
            for op, count in fallbacks_from_events(prof.events()).items():
                log.record(op, n=count)  # bytes are not exposed by the profiler here

    def peak_memory_bytes(self) -> int | None:
        module = getattr(torch, "neuron", None)
        fn = getattr(module, "max_memory_allocated", None)
        return int(fn()) if callable(fn) else None

    def reset_peak_memory(self) -> None:
        module = getattr(torch, "neuron", None)
        fn = getattr(module, "reset_peak_memory_stats", None)
        if callable(fn):
            fn()

    def synchronize(self) -> None:
        fn = getattr(getattr(torch, "neuron", None), "synchronize", None)
        if callable(fn):
            fn()

    def profile_info(self) -> tuple[str | None, str | None]:
        if self.op_profile is None:
            return None, None
        return self.op_profile.name, self.op_profile.hash

    def versions(self) -> dict[str, str]:
        from importlib.metadata import PackageNotFoundError, version

        try:
            package_version = version("torch-neuronx")
        except PackageNotFoundError:
            package_version = "unknown"
        return {"torch": torch.__version__, PACKAGE: package_version}

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        return dtype in SUPPORTED_DTYPES
