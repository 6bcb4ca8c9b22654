"""The CPU: the reference device. Nothing falls back, because everything is on the host."""

from __future__ import annotations

import os

from runners.devices.base import Device


class CpuDevice(Device):
    name = "cpu"
    compile_backend = "inductor"
    process_group_backend = "gloo"

    @classmethod
    def ranks_available(cls) -> int:
        return os.cpu_count() or 1

    def classify_op(self, op: str) -> str | None:
        return "native"  # the CPU runs every op it has a kernel for natively

    def prepare_model(self, model):
        return model  # already on the host: moving would be a no-op, and ties are intact
