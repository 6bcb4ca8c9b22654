"""Apple MPS: ops without an MPS kernel fall back to the CPU and say so in a warning.

With `PYTORCH_ENABLE_MPS_FALLBACK=1` PyTorch warns "The operator 'aten::x.overload' is not
currently supported on the MPS backend and will fall back to run on the CPU." (once per op
unless `torch.set_warn_always(True)`); without it those ops raise `NotImplementedError`.
PyTorch reads the variable once, when torch loads. `MpsDevice.process_env` names it: the
sweep sets it before its model processes import torch (runners.isolation starts a fresh
interpreter when the current one imported torch first), and `setup()` refuses to run without
it rather than record fallbacks that never happen. Strict mode leaves it unset: a fallback
raises, as PyTorch does.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ground.errors import DeviceError
from runners.devices.base import Device, FallbackDisallowed, FallbackLog, collecting

if TYPE_CHECKING:
    import torch

FALLBACK_ENV = "PYTORCH_ENABLE_MPS_FALLBACK"
_WARNING = re.compile(
    r"The operator '(?P<op>[^']+)' is not currently supported on the MPS backend "
    r"and will fall back to run on the CPU"
)


def fallbacks_from_warnings(messages: Iterable[str]) -> Counter[str]:
    """Count fallback ops named in MPS fallback warnings (other messages are ignored)."""
    found: Counter[str] = Counter()
    for message in messages:
        match = _WARNING.search(message)
        if match:
            found[match.group("op")] += 1
    return found


class MpsDevice(Device):
    name = "mps"
    knowledge = (FALLBACK_ENV,)
    compile_backend = "inductor"
    availability_hint = (
        "MPS needs Apple silicon and a torch build with MPS; try --device cpu or neuron."
    )

    @classmethod
    def process_env(cls, options: Mapping[str, Any] | None = None) -> dict[str, str]:
        """Ops without a kernel fall back to the CPU (with a warning) instead of raising;
        strict mode leaves it unset."""
        return {} if (options or {}).get("strict") else {FALLBACK_ENV: "1"}

    @classmethod
    def is_available(cls) -> bool:
        import torch

        return bool(torch.backends.mps.is_available())

    def setup(self) -> None:
        if not self.strict and os.environ.get(FALLBACK_ENV) != "1":
            raise DeviceError(
                f"{FALLBACK_ENV}=1 was not set before torch was imported in this process, so "
                "ops without an MPS kernel would raise instead of falling back.",
                device=self.name,
                hint=f"Run through hfsweep (it sets it for its model processes), or export "
                f"{FALLBACK_ENV}=1 before starting Python; --strict runs without it.",
            )

    def fallback_error(self, log: FallbackLog) -> Exception | None:
        """Strict with the variable set anyway (exported by the user): fallbacks still ran."""
        if not self.strict or not log.ops:
            return None
        op = sorted(log.ops)[0]
        return FallbackDisallowed(
            f"{op} fell back to the CPU on MPS and CPU fallback is disabled (strict)",
            op=op,
            device=self.name,
        )

    def synchronize(self) -> None:
        import torch

        torch.mps.synchronize()

    @contextlib.contextmanager
    def record_fallbacks(self) -> Iterator[FallbackLog]:
        import torch

        before = torch.is_warn_always_enabled()
        torch.set_warn_always(True)
        try:
            with collecting(FallbackLog()) as log, warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    yield log
                finally:
                    messages = (str(w.message) for w in caught)
                    for op, count in fallbacks_from_warnings(messages).items():
                        log.record(op, n=count)
        finally:
            torch.set_warn_always(before)

    def peak_memory_bytes(self) -> int | None:
        import torch

        return int(torch.mps.driver_allocated_memory())

    def versions(self) -> dict[str, str]:
        import torch

        return {"torch": torch.__version__}

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        import torch

        return dtype in (torch.float32, torch.float16, torch.bfloat16)
