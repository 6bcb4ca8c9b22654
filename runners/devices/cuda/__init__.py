"""CUDA: kernels for everything, so no CPU fallbacks; peak memory from the caching allocator."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runners.devices.base import Device

if TYPE_CHECKING:
    import torch


class CudaDevice(Device):
    name = "cuda"
    compile_backend = "inductor"
    availability_hint = "No CUDA GPU is visible to torch (torch.cuda.is_available() is False); try --device cpu or neuron."
    process_group_backend = "nccl"

    @classmethod
    def ranks_available(cls) -> int:
        import torch

        return int(torch.cuda.device_count())

    @classmethod
    def rank_resources(cls, world_size: int) -> dict[str, Any]:
        return {"num_cpus": 1, "num_gpus": world_size}

    def setup_rank(self, rank: int, world_size: int) -> None:
        import torch

        torch.cuda.set_device(rank % torch.cuda.device_count())

    @classmethod
    def is_available(cls) -> bool:
        import torch

        return torch.cuda.is_available()

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def peak_memory_bytes(self) -> int | None:
        import torch

        return int(torch.cuda.max_memory_allocated())

    def reset_peak_memory(self) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats()

    def versions(self) -> dict[str, str]:
        import torch

        return {
            "torch": torch.__version__,
            "cuda": str(torch.version.cuda),
            "gpu": torch.cuda.get_device_name(0),
        }

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        import torch

        if dtype == torch.bfloat16:
            return bool(torch.cuda.is_bf16_supported())
        return dtype in (torch.float32, torch.float16)
