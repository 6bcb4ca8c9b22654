"""Which line of a model's forward indexes a device tensor with a host (CPU) tensor: the cause of
the strict mixed-device rule's failures (TorchNeuron's `can_handle` raises "Non-scalar tensor
argN is on cpu" on the `_index_put_impl_` that autograd makes of such an index in backward).

For each model of the bundled catalog named, plans its tiny model and runs load and forward on
the emulated neuron device under a torch function mode that prints, once per place, every
`__getitem__`/`__setitem__`/`index_select`/`index_put(_)`/`gather` whose tensor is on the
device and whose index holds a CPU tensor of one or more dimensions, with the library lines
that made the call.

    python bench/host_tensors.py ETH-CVG/lightglue_superpoint Qwen/Qwen2.5-VL-3B-Instruct
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

INDEXING = {"__getitem__", "__setitem__", "index_select", "index_put", "index_put_", "gather"}


def host_index(value: Any) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return value.device.type == "cpu" and value.dim() > 0
    if isinstance(value, tuple | list):
        return any(host_index(v) for v in value)
    return False


def trace(model_id: str) -> list[str]:
    import torch
    from torch.overrides import TorchFunctionMode

    from ground.schema import Stage
    from model_configs.catalog import load_catalog
    from runners.run_model import run_model
    from runners.settings import DeviceChoice, ModelSettings
    from sweep.plan import plan_entries

    found: list[str] = []
    seen: set[tuple[tuple[str, int | None], ...]] = set()

    class Spy(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
            name = getattr(func, "__name__", "")
            on_device = args and isinstance(args[0], torch.Tensor) and args[0].device.type != "cpu"
            if name in INDEXING and on_device and host_index(args[1:]):
                stack = [
                    f
                    for f in traceback.extract_stack()
                    if "site-packages" in f.filename and "/torch/" not in f.filename
                ][-2:]
                key = tuple((f.filename, f.lineno) for f in stack)
                if key not in seen:
                    seen.add(key)
                    where = " <- ".join(
                        f"{f.filename.split('site-packages/')[-1]}:{f.lineno} `{f.line}`"
                        for f in reversed(stack)
                    )
                    found.append(f"  {name}: {where}")
            return func(*args, **(kwargs or {}))

    catalog = load_catalog("bundled")
    entry = catalog.get(model_id)
    if entry is None:
        return [f"{model_id}: not in the bundled catalog"]
    stages = (Stage.LOAD, Stage.FORWARD)
    planned = plan_entries([entry], list(stages), config_dir=catalog.config_dir)[0]
    if planned.spec is None:
        return [f"{model_id}: not planned ({planned.outcome})"]
    settings = ModelSettings(device=DeviceChoice("neuron"), stages=stages)
    with Spy():
        outcome = run_model(planned.spec, settings)
    status = ", ".join(f"{r.stage} {r.status}" for r in outcome.stages)
    return [f"{model_id} ({planned.spec.architecture}; {status}):", *(found or ["  none"])]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    args = parser.parse_args()
    from runners.run_model import quiet_libraries

    quiet_libraries()
    for model in args.models:
        print("\n".join(trace(model)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
