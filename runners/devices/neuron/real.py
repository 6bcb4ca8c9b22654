"""`neuron`: the real TorchNeuron device when `torch_neuronx` is installed, else the emulated one.

TorchNeuron (torch-neuronx 2.14+, a native PrivateUse1 backend) tells what ran where through
its own API, read around every stage: `torch_neuronx.clear_op_tracking()` before,
`get_fallback_ops()` (ops that ran on the CPU) and `get_executed_ops()` (ops that ran on Neuron)
after. Those are sets; call counts come from the profiler where it sees the fallback (an op
event with an `aten::_to_cpu` child is what `at::native::cpu_fallback` leaves), else 1.
Strict mode turns any fallback op into a failure of the stage that names it.

Compile: TorchNeuron's own `neuron` backend runs. Its documented switch is
TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION (when a graph fails, raise, or rerun it eagerly); it is
left at TorchNeuron's default (raise, in the released beta) unless a compile mode is asked for.
It has nothing to do with eager CPU fallback.

The legacy XLA-based torch-neuronx (below 2.14, the same module name) is refused with one
message. Without Trainium this path is tested against a stand-in `torch_neuronx` module
(tests/test_neuron_real.py) that has the snapshot's API surface.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from ground.errors import DeviceError
from runners.devices.base import FallbackDisallowed, FallbackLog
from runners.devices.neuron.device import PACKAGE, NeuronDevice, real_neuron_installed
from runners.devices.neuron.profiles import DeviceProfile, load_profile
from runners.devices.neuron.state import SUPPORTED_DTYPES

DISTRIBUTION = "torch-neuronx"
FALLBACK_MARKER = "aten::_to_cpu"
FALLBACK_EXECUTION_ENV = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"
NATIVE_FROM = (2, 14)  # torch-neuronx 2.14.x is TorchNeuron; earlier versions are XLA-based
TRACKING_API = ("get_fallback_ops", "get_executed_ops", "clear_op_tracking")


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


def installed_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return None


def _major_minor(text: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_package_version(version: str | None) -> None:
    """Refuse the legacy XLA torch-neuronx: same module name, another device entirely.
    TorchNeuron releases are 2.14 and up; 0.x are its pre-release development builds."""
    parsed = _major_minor(version) if version else None
    if parsed is None or parsed[0] == 0 or parsed >= NATIVE_FROM:
        return
    raise DeviceError(
        f"torch-neuronx {version} is the legacy XLA-based package (torch-neuronx below 2.14), "
        "not TorchNeuron, the native `neuron` PyTorch device this sweep runs on.",
        device="neuron",
        hint="Install TorchNeuron (torch-neuronx 2.14 or later, Neuron 2.33+) in a separate "
        "environment, or use --device neuron-emulated.",
    )


def compile_mode_env(mode: str | None) -> dict[str, str]:
    """The TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION setting a compile mode asks for (none:
    TorchNeuron's default is kept)."""
    if mode is None:
        return {}
    if mode == "raise":
        return {FALLBACK_EXECUTION_ENV: "1"}
    if mode == "eager":
        return {FALLBACK_EXECUTION_ENV: "0"}
    raise DeviceError(
        f"TorchNeuron has no compile mode {mode!r}: its backend raises or reruns a failing graph "
        "eagerly, it never partitions one.",
        device="neuron",
        hint="Use --compile-mode raise or eager on the real device.",
    )


def effective_compile_mode() -> str:
    """What TorchNeuron will do with a graph that fails: its variable, else the released
    default (raise)."""
    value = os.environ.get(FALLBACK_EXECUTION_ENV)
    if value is not None and value.strip().lower() in ("0", "false", "no"):
        return "eager"
    return "raise"


class RealNeuronDevice(NeuronDevice):
    """TorchNeuron (`torch_neuronx`): the real Trainium device."""

    emulated = False
    availability_hint = (
        "Install torch-neuronx on a Trainium instance, or use --device neuron-emulated."
    )

    def __init__(
        self,
        *,
        strict: bool = False,
        profile: str | None = None,
        compile_mode: str | None = None,
    ):
        super().__init__(strict=strict, profile=profile)
        self.op_profile: DeviceProfile | None = load_profile(profile) if profile else None
        self.requested_compile_mode = compile_mode
        self.compile_mode = compile_mode or effective_compile_mode()
        self.module: Any = None

    @classmethod
    def is_available(cls) -> bool:
        return real_neuron_installed()

    def setup(self) -> None:
        check_package_version(installed_version())
        os.environ.update(compile_mode_env(self.requested_compile_mode))
        self.compile_mode = effective_compile_mode()
        try:
            module = importlib.import_module(PACKAGE)
        except Exception as exc:
            raise DeviceError(
                f"{PACKAGE} is installed but failed to import: {exc}", device=self.name
            ) from exc
        check_package_version(getattr(module, "__version__", None))
        missing = [name for name in TRACKING_API if not callable(getattr(module, name, None))]
        if missing:
            raise DeviceError(
                f"{PACKAGE} {getattr(module, '__version__', '?')} has no {', '.join(missing)}: "
                "it is not TorchNeuron (the legacy XLA torch-neuronx has the same module name).",
                device=self.name,
                hint="Install torch-neuronx 2.14 or later, or use --device neuron-emulated.",
            )
        self.module = module
        from runners.devices.neuron import compiler

        if self.op_profile is not None:
            compiler.set_profile(self.op_profile, mode=self.compile_mode)
        compiler.register_backend()  # keeps TorchNeuron's own `neuron` backend

    @classmethod
    def ranks_available(cls) -> int:
        """NeuronCores this machine shows TorchNeuron (one rank each)."""
        module = importlib.import_module(PACKAGE)
        return int(module.device_count()) if callable(getattr(module, "device_count", None)) else 0

    @classmethod
    def rank_resources(cls, world_size: int) -> dict[str, Any]:
        return {"num_cpus": 1, "resources": {"neuron_cores": world_size}}

    def setup_rank(self, rank: int, world_size: int) -> None:
        """TorchNeuron's own process group: importing its distributed package registers it
        (backend `neuron`); its runtime binds the rank's NeuronCore at the group's creation."""
        importlib.import_module(f"{PACKAGE}.distributed")

    @contextlib.contextmanager
    def record_fallbacks(self) -> Iterator[FallbackLog]:
        from torch.profiler import ProfilerActivity, profile

        module = self.module
        if module is not None:
            module.clear_op_tracking()
        log = FallbackLog()  # filled from TorchNeuron's own tracking, not by the emulator
        prof = profile(activities=[ProfilerActivity.CPU])
        try:
            with prof:
                yield log
        finally:
            counts = fallbacks_from_events(prof.events())
            ops = list(module.get_fallback_ops()) if module is not None else list(counts)
            for op in ops:
                log.record(op, n=max(1, counts.get(op, 0)))
            if module is not None:
                for op in module.get_executed_ops():
                    log.executed[op] = log.executed.get(op, 0) + 1

    def fallback_error(self, log: FallbackLog) -> Exception | None:
        if not self.strict or not log.ops:
            return None
        ops = sorted(log.ops)
        return FallbackDisallowed(
            f"{ops[0]} ran on the CPU (TorchNeuron's fallback)"
            + (f", and {len(ops) - 1} more: {', '.join(ops[1:4])}" if len(ops) > 1 else "")
            + "; CPU fallback is disabled (strict)",
            op=ops[0],
            device=self.name,
        )

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

    def classify_op(self, op: str) -> str | None:
        """The profile's class of `op` when one was given, else TorchNeuron's own dispatch
        table: a kernel of its own is native, anything else reaches its CPU fallback."""
        if self.op_profile is not None:
            return self.op_profile.classify(op).value
        return "native" if dispatch_entry(op) == "kernel" else "fallback"

    def versions(self) -> dict[str, str]:
        return {
            PACKAGE: installed_version() or "unknown",
            "torch": torch.__version__,
            "compile_mode": str(self.compile_mode),
        }

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        return dtype in SUPPORTED_DTYPES
