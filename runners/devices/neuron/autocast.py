"""TorchNeuron's autocast on the emulated `neuron` device: its policy (`runners/autocast_policy.py`,
data `runners/devices/neuron/data/profiles/torchneuron-2026-04-21/autocast-policy.txt`) registered at the
AutocastPrivateUse1 key, as TorchNeuron registers it (torch_neuronx/csrc/amp/autocast_mode.cpp);
every other op falls through."""

from __future__ import annotations

from typing import Any

import torch

from runners import autocast_policy
from runners.devices.neuron.profiles import PROFILE_DIR, SNAPSHOT

AUTOCAST_KEY = "AutocastPrivateUse1"
# TorchNeuron's policy: PyTorch's accelerator op lists (CUDA registers the same) and the ban.
POLICY_FILE = PROFILE_DIR / SNAPSHOT / "autocast-policy.txt"


def register(library: Any) -> list[str]:
    """Register TorchNeuron's autocast kernels in `library` (kept alive by the caller)."""
    return autocast_policy.register(
        library, AUTOCAST_KEY, torch._C._get_privateuse1_backend_name, POLICY_FILE
    )
