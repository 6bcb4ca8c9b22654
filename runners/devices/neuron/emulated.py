"""The emulated `neuron` device: a pure-Python PrivateUse1 backend that dispatches as TorchNeuron.

PyTorch treats it as a real device named `neuron` (as it treats TorchNeuron): tensors live on
`neuron:0`, backed by host buffers (`storage`). A device profile says which ATen ops the device
runs natively. Under the default profile (TorchNeuron's own registrations) every declared op
gets a kernel of its own (`hooks`), so the dispatcher routes calls exactly as it routes them
for TorchNeuron; every other op reaches ONE boxed fallback that runs it on CPU aliases and
records the op (with overload), the call count and the bytes a real `at::native::cpu_fallback`
would move each way (`dispatch`). Native ops run on CPU aliases too (this is an emulation) but
are not logged as fallbacks.

The snapshot's rules apply on the way (`rules`): view ops are never fallbacks; ops routed to
the CPU on purpose always are; conditional ops fall back for the inputs they decline; a native
op given a non-scalar host tensor raises, as TorchNeuron's `can_handle` does; native kernels
compute float64 as float32 and int64 as int32 and return what TorchNeuron's kernels return
(`dtypes`); SDPA takes the fused `overrideable` op only where TorchNeuron's selection rule says
so (`sdpa`). Tested on torch 2.14 (TorchNeuron's torch).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from ground.schema import CompileEvidence
from runners.devices import collective_log
from runners.devices.base import FallbackLog, collecting
from runners.devices.collective_log import CollectiveLog
from runners.devices.neuron.device import NeuronDevice
from runners.devices.neuron.hooks import install_backend, register_profile_kernels
from runners.devices.neuron.profiles import DeviceProfile, load_profile
from runners.devices.neuron.state import STATE, SUPPORTED_DTYPES
from runners.devices.neuron.storage import Memory


class NeuronEmulatedDevice(NeuronDevice):
    """`neuron` emulated on the host: native ops from a profile, every other op a logged fallback."""

    emulated = True
    collective_waits = True  # its process group reports each collective (`process_group.py`)
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
        from runners.devices.neuron.compiler import resolve_compile_mode

        op_profile = profile if isinstance(profile, DeviceProfile) else load_profile(profile)
        super().__init__(strict=strict, profile=op_profile.name)
        self.op_profile: DeviceProfile = op_profile
        self.compile_mode = resolve_compile_mode(compile_mode)

    @classmethod
    def is_available(cls) -> bool:
        return STATE.installed or torch._C._get_privateuse1_backend_name() == "privateuseone"

    def setup(self) -> None:
        install_backend()
        from runners.devices.neuron.compiler import register_backend

        register_backend()
        self.activate()

    # PyTorch's Python PrivateUse1 hooks offer no pinned-memory allocator, so the emulator
    # cannot pin (whether TorchNeuron can, its snapshot does not say).
    pins_host_memory = False

    def present_to_libraries(self) -> None:
        """A stand-in `torch_neuronx` in this process only (`stand_in`: why)."""
        from runners.devices.neuron.stand_in import install

        install()

    def activate(self) -> None:
        """Make this device's profile and strictness the ones the backend applies (eager and
        compile)."""
        STATE.device = self
        register_profile_kernels(self.op_profile)
        from runners.devices.neuron import compiler

        compiler.set_profile(self.op_profile, strict=self.strict, mode=self.compile_mode)

    @contextlib.contextmanager
    def record_fallbacks(self) -> Iterator[FallbackLog]:
        previous = STATE.device
        self.activate()
        try:
            with collecting(FallbackLog()) as log:
                yield log
        finally:
            (previous if isinstance(previous, NeuronEmulatedDevice) else self).activate()

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

    @classmethod
    def ranks_available(cls) -> int:
        return os.cpu_count() or 1  # a rank is a host process

    def setup_rank(self, rank: int, world_size: int) -> None:
        """The process group, its DTensor rules, streams, events and storage resizing
        (`distributed.py`); one device per process, `neuron:0`."""
        from runners.devices.neuron import distributed

        distributed.enable()

    @contextlib.contextmanager
    def record_collectives(self) -> Iterator[CollectiveLog]:
        with collective_log.collecting(CollectiveLog()) as log:  # the group reports each one
            yield log

    def peak_memory_bytes(self) -> int | None:
        return Memory.peak

    def reset_peak_memory(self) -> None:
        Memory.peak = Memory.current

    def profile_info(self) -> tuple[str | None, str | None]:
        return self.op_profile.name, self.op_profile.hash

    def profile_torch(self) -> str | None:
        """The snapshot's torch: its rules (dispatch, process group, compile evidence) are the
        emulator's under every op list."""
        from runners.devices.neuron import skew

        return skew.profile_torch()

    def fallback_evidence(self, op: str) -> str | None:
        """`newer_than_profile` for an op the profile's torch did not register: the profile
        cannot say the device lacks a kernel for it."""
        from runners.devices.neuron import skew

        return CompileEvidence.NEWER_THAN_PROFILE.value if skew.newer_op(op) else None

    def is_native(self, op: str) -> bool:
        return self.op_profile.is_native(op)

    def classify_op(self, op: str) -> str | None:
        """What the device does with `op` (`aten::name.overload`), from its profile's data."""
        return self.op_profile.classify(op).value

    def versions(self) -> dict[str, str]:
        return {
            "neuron_backend": "emulated (pure-Python PrivateUse1)",
            "torch": torch.__version__,
            "device_profile": f"{self.op_profile.name}@{self.op_profile.hash}",
            "compile_mode": str(self.compile_mode),
        }

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        return dtype in SUPPORTED_DTYPES
