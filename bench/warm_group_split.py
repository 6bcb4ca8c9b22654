"""Where a distributed stage's time goes once its group is warm: each stage of a few tiny
models run twice in a row on one warm group, on the emulated neuron device and on the CPU.

The first run of a model's first stage builds the model in each rank; every later run finds it
built, so a stage's second run is its own steps alone (the DDP step, FSDP2's two steps, the
tensor-parallel load and step, each with its single-process reference and comparisons). The
group's start is timed apart. Prints seconds per run.

    python bench/warm_group_split.py --models llama,bert,gpt2
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> int:
    from runners.stages import group_stages

    DISTRIBUTED_STAGES = group_stages("distributed")
    from model_configs.resolve import ResolvedConfig, transformers_default_config
    from model_configs.shrink import shrink
    from runners.distributed.group import WarmGroup
    from runners.settings import ModelSettings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama,bert,gpt2", help="transformers model types")
    parser.add_argument("--devices", default="neuron,cpu")
    args = parser.parse_args()
    stages = ("load", "forward", "backward", *(s.value for s in DISTRIBUTED_STAGES))
    for device in args.devices.split(","):
        task = ModelSettings(device=device, stages=stages, world_size=2, timeout_s=300)
        with WarmGroup(task, spawn=False) as group:
            for model_type in args.models.split(","):
                config = transformers_default_config(model_type)
                spec = shrink(
                    ResolvedConfig(
                        model_id=f"bench/{model_type}", library="transformers", config=config,
                        source="transformers_default",
                    )
                )  # fmt: skip
                for stage in DISTRIBUTED_STAGES:
                    times, statuses = [], []
                    for _ in range(2):
                        starts = group.starts
                        t = time.perf_counter()
                        result = group.run(spec, task, stage)
                        times.append(time.perf_counter() - t)
                        statuses.append(result.status + ("+start" if group.starts > starts else ""))
                    print(
                        f"{device:<7} {model_type:<8} {stage.value:<5} first {times[0]:6.2f} s "
                        f"({statuses[0]})  again {times[1]:6.2f} s ({statuses[1]})",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
