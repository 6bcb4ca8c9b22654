"""CUDA: kernels for everything, so no CPU fallbacks; peak memory from the caching allocator."""

from __future__ import annotations

import torch

from runners.devices.base import Device


class CudaDevice(Device):
    name = "cuda"
    compile_backend = "inductor"
    availability_hint = "No CUDA GPU is visible to torch (torch.cuda.is_available() is False); try --device cpu or neuron."

    @classmethod
    def is_available(cls) -> bool:
        return torch.cuda.is_available()

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def peak_memory_bytes(self) -> int | None:
        return int(torch.cuda.max_memory_allocated())

    def reset_peak_memory(self) -> None:
        torch.cuda.reset_peak_memory_stats()

    def versions(self) -> dict[str, str]:
        return {
            "torch": torch.__version__,
            "cuda": str(torch.version.cuda),
            "gpu": torch.cuda.get_device_name(0),
        }

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        if dtype == torch.bfloat16:
            return bool(torch.cuda.is_bf16_supported())
        return dtype in (torch.float32, torch.float16)
