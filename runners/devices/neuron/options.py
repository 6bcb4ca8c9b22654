"""The neuron device's options (`--profile`, `--compile-mode`): keywords of its constructor,
declared here for the CLI (`runners.devices.device_options`). Imports no torch."""

from __future__ import annotations

from runners.devices.options import DeviceOption

COMPILE_MODES = ("raise", "eager", "partition")

PROFILE = DeviceOption(
    "--profile",
    "profile",
    help="neuron: a bundled profile (default torchneuron-2026-04-21, TorchNeuron's registrations; "
    "torch-mlir, torch-xla) or a file of ATen op names",
)
COMPILE_MODE = DeviceOption(
    "--compile-mode",
    "compile_mode",
    help="neuron: a graph op the compiler cannot lower raises (default, as TorchNeuron), runs "
    "the graph eagerly, or (emulated only) partitions it",
    choices=COMPILE_MODES,
    group="model",
)
OPTIONS = (PROFILE, COMPILE_MODE)
