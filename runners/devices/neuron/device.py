"""What the real and the emulated neuron devices share: the class facts of `neuron` and how a
compile stage reads the `neuron` backend's report. A leaf of the package (no torch on import)."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runners.devices.base import Device
from runners.devices.neuron.options import OPTIONS

PACKAGE = "torch_neuronx"  # TorchNeuron's Python package
# The origin of the emulated device's stand-in for it (`stand_in.py`), never TorchNeuron.
STAND_IN_ORIGIN = (
    "hfsweep stand-in for the emulated neuron device (runners/devices/neuron/stand_in.py)"
)


def real_neuron_installed() -> bool:
    """TorchNeuron's package is importable (not the emulated device's stand-in, `stand_in`)."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except ValueError:  # a module of that name without a spec
        return False
    return spec is not None and spec.origin != STAND_IN_ORIGIN


class NeuronDevice(Device):
    """`neuron`, real or emulated."""

    name = "neuron"
    compile_backend = "neuron"
    process_group_backend = "neuron"  # ProcessGroupNeuron: TorchNeuron's, or the emulator's
    compile_dynamic = False  # TorchNeuron's backend forces dynamic=False: a new shape recompiles
    preload_modules = ("runners.devices.neuron.compiler",)
    options = OPTIONS
    knowledge = (
        # TorchNeuron's environment variables
        "TORCH_NEURONX_SKIP_OP_PRECONDITIONS",
        "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION",
        "TORCH_NEURONX_ATEN_GMM_ALIGN",
        "TORCH_NEURONX_MLIR_ATEN_OPS",
        # its error texts (and the emulator's, which repeat them)
        "Dynamic shapes detected",
        "not supported on Neuron",
        "_grouped_mm precondition",
        "validate_offs",
        "Non-scalar tensor",
    )

    def autocast_policy_file(self) -> Path:
        from runners.devices.neuron.autocast import POLICY_FILE

        return POLICY_FILE

    def collective_evidence(self, op: str) -> str | None:
        """What TorchNeuron's distributed package says of a collective or DTensor op."""
        from runners.devices.neuron.collectives import evidence

        return evidence(op)

    @contextlib.contextmanager
    def compiling(self) -> Iterator[dict[str, Any]]:
        """What the `neuron` backend saw while the block ran: its partitions, and the evidence
        its verdicts rest on (`compiler.CompileReport.row_columns`). Empty where TorchNeuron's
        own backend compiled (it reports neither)."""
        from runners.devices.neuron.compiler import compile_report

        seen: dict[str, Any] = {}
        with compile_report(reset=False) as report:
            try:
                yield seen
            finally:
                seen.update(report.row_columns())
