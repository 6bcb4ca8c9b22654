"""The `neuron` device: TorchNeuron when `torch_neuronx` is importable, else the emulated device.

Everything about neuron lives in this package, split along the emulator's seams:

- `device` (what the real and emulated devices share), `state` (process-wide backend state), `storage`, `driver` (the driver kernels every backend
  implements), `schemas`, `dispatch` (native kernel or boxed CPU fallback), `dtypes` (the
  native kernels' dtype and layout rules), `sdpa` and `attention` (TorchNeuron's attention
  selection and its fused op, computed on the host), `hooks` (the device module, guard,
  serialization and registration), `emulated` (the emulated device class);
- `rules` (the snapshot's per-call rules), `profiles` (which ops are native, from data files),
  `evidence` (what each compile verdict rests on), `compiler` (the `neuron` torch.compile
  backend), `pending` (errors kept from a backward, a leaf under the guard and the compiler),
  `fidelity` (the audit of the emulator against its data), `real` (TorchNeuron itself).

This module is what the device registry names; it imports neither torch nor the emulator until
a device is built.
"""

from __future__ import annotations

from typing import Any

from runners.devices.base import Device
from runners.devices.neuron.device import NeuronDevice, real_neuron_installed


class Neuron(NeuronDevice):
    """The registry's `neuron`: TorchNeuron's device when its package is importable, else the
    emulated one."""

    @classmethod
    def chosen(cls) -> type[Device]:
        if real_neuron_installed():
            from runners.devices.neuron.real import RealNeuronDevice

            return RealNeuronDevice
        from runners.devices.neuron.emulated import NeuronEmulatedDevice

        return NeuronEmulatedDevice

    @classmethod
    def create(cls, **options: Any) -> Device:
        return cls.chosen()(**options)

    @classmethod
    def ranks_available(cls) -> int:
        return cls.chosen().ranks_available()

    @classmethod
    def rank_resources(cls, world_size: int) -> dict[str, Any]:
        return cls.chosen().rank_resources(world_size)


class NeuronEmulated(NeuronDevice):
    """The registry's `neuron-emulated`: the emulated device even where TorchNeuron is installed."""

    emulated = True

    @classmethod
    def create(cls, **options: Any) -> Device:
        from runners.devices.neuron.emulated import NeuronEmulatedDevice

        return NeuronEmulatedDevice(**options)

    @classmethod
    def ranks_available(cls) -> int:
        from runners.devices.neuron.emulated import NeuronEmulatedDevice

        return NeuronEmulatedDevice.ranks_available()
