"""A stand-in `torch_neuronx` for the emulated device, so that Hugging Face's own detection
finds it (the hf_training stages).

transformers (`utils/import_utils.py: is_torch_neuron_available`) and accelerate
(`utils/imports.py: is_neuron_available`) find TorchNeuron the same way: the `torch_neuronx`
module spec exists (`importlib.util.find_spec`), then `torch.neuron.is_available()`. The
emulated device answers the second (its `torch.neuron` module, `hooks.NeuronModule`) but has
no package of that name, so both libraries would say no device, and a `Trainer` would train on
the CPU. `install` puts an empty module of that name, whose spec says it is this stand-in, in
`sys.modules` of the process that asks (the model's process or a rank, when an hf_training
stage runs there): the libraries' own functions, unpatched, then see the device as they see
TorchNeuron. Their answers are cached (`functools.lru_cache`); a cache filled before the
stand-in existed is cleared, so they answer for the process as it now is.

Nothing else changes: the real device's path never installs it (TorchNeuron's package is
there), `device.real_neuron_installed` does not count it, and rows still say `emulated`.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types

from runners.devices.neuron.device import PACKAGE, STAND_IN_ORIGIN

ORIGIN = STAND_IN_ORIGIN
# The libraries' detection functions whose answers are cached per process.
_DETECTORS = (
    ("transformers.utils.import_utils", "is_torch_neuron_available"),
    ("transformers.utils.import_utils", "is_torch_bf16_gpu_available"),
    ("accelerate.utils.imports", "is_neuron_available"),
)


def is_stand_in(spec: importlib.machinery.ModuleSpec | None) -> bool:
    return spec is not None and spec.origin == ORIGIN


def install() -> bool:
    """Make `torch_neuronx` findable in this process (idempotent). False where a real
    `torch_neuronx` is importable: nothing is installed."""
    current = sys.modules.get(PACKAGE)
    if current is not None:
        return is_stand_in(getattr(current, "__spec__", None))
    if importlib.util.find_spec(PACKAGE) is not None:
        return False
    module = types.ModuleType(PACKAGE, "Stand-in for TorchNeuron's package: the emulated device.")
    module.__spec__ = importlib.machinery.ModuleSpec(PACKAGE, None, origin=ORIGIN)
    module.emulated = True  # type: ignore[attr-defined]
    sys.modules[PACKAGE] = module
    for name, function in _DETECTORS:
        owner = sys.modules.get(name)
        clear = getattr(getattr(owner, function, None), "cache_clear", None)
        if callable(clear):
            clear()
    return True
