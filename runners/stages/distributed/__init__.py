"""Sharding as users shard (`sharded.py`), on a group of ranks of the device (`--world-size`,
one process each, `runners/distributed/`): a DistributedDataParallel training step, two FSDP2
steps (`fully_shard` per block), the model's own tensor-parallel plan; each against a single
process. Asked for by name (`--stages distributed` or `all`): each starts a group of
processes."""

from __future__ import annotations

from ground.schema import Stage
from runners.stages.declare import StageDecl, StageGroup

_SHARDED = "runners.stages.distributed.sharded"
_NEEDS = (Stage.LOAD, Stage.FORWARD, Stage.BACKWARD)
# What a stage on a group of ranks records: the group's size, the collectives it called (and
# the evidence for each), the single process's peak memory to compare with.
RANK_COLUMNS = ("world_size", "collectives", "sharding_evidence")

GROUP = StageGroup(
    name="distributed",
    help="distributed: on --world-size ranks; each brings load,forward,backward",
    stages=(
        StageDecl(
            Stage.DDP,
            f"{_SHARDED}:DdpStage",
            needs=_NEEDS,
            on_ranks=True,
            columns=RANK_COLUMNS,
            help="DistributedDataParallel, 1 step",
        ),
        StageDecl(
            Stage.FSDP,
            f"{_SHARDED}:FsdpStage",
            needs=_NEEDS,
            on_ranks=True,
            columns=(*RANK_COLUMNS, "unsharded_peak_memory_bytes"),
            help="FSDP2 fully_shard per block, 2 steps",
        ),
        StageDecl(
            Stage.TP,
            f"{_SHARDED}:TpStage",
            needs=_NEEDS,
            on_ranks=True,
            columns=RANK_COLUMNS,
            help="the model's tensor-parallel plan, forward and backward",
        ),
    ),
    section="sharding",
)
