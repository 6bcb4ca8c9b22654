"""A rank's side of a multi-rank stage: the model it holds (built once per model in this rank,
a copy for each stage), building or saving it as a process of no group would, and its number
in the group. The rank's process itself (`runners/distributed/rank.py`) drops the model when a
new one comes or the group ends (`release_model`)."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_HELD: dict[str, Any] = {}  # this rank's model: its key, as loaded, its batches, the RNG after


def model_key(ctx: Any) -> tuple[Any, ...]:
    """What a rank's loaded model and batches depend on."""
    s = ctx.settings
    return (ctx.spec.hash, s.dtype, s.seed, s.implementation, s.world_size)


def release_model() -> None:
    """Drop the model this rank holds (a new model comes, or the group ends)."""
    _HELD.clear()


@contextmanager
def before_the_group() -> Iterator[None]:
    """While a rank builds or saves its model as a process of no group would: libraries save
    only on rank 0 of an initialised group (transformers' `save_pretrained`), and a rank of
    the warm group joined before its model came. `torch.distributed.is_initialized` answers
    False in the block (the rank runs nothing else meanwhile)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    if not dist.is_initialized():
        yield
        return
    real = dist.is_initialized
    dist.is_initialized = distributed_c10d.is_initialized = lambda: False  # type: ignore[assignment]
    try:
        yield
    finally:
        dist.is_initialized = distributed_c10d.is_initialized = real  # type: ignore[assignment]


def held_model(ctx: Any, world: int) -> tuple[Any, list[dict[str, Any]]]:
    """The model as the load stage loads it and each rank's batch, built once per model in
    this rank; each call a copy of both, with the random generators as the load left them and
    the garbage collector's counts at zero."""
    import copy

    import torch

    from model_configs import build
    from runners.stages.core.load import load_on_host
    from runners.stages.engine import cast_inputs

    key = model_key(ctx)
    if _HELD.get("key") != key:
        release_model()
        with before_the_group():
            host = load_on_host(ctx)
        batches = [
            cast_inputs(
                build.make_inputs(ctx.spec, host, seed=ctx.seed + r, purpose="train"), ctx.dtype
            )
            for r in range(world)
        ]
        _HELD.update(key=key, host=host, batches=batches, rng=torch.random.get_rng_state())
    torch.random.set_rng_state(_HELD["rng"])
    copies = copy.deepcopy(_HELD["host"]), copy.deepcopy(_HELD["batches"])
    # The collector's counts start from nothing here, whether the model was built now or
    # before: its automatic collections (what frees a sharded model's cycles) then fall at the
    # same points of the stage, and so does its device memory peak.
    gc.collect()
    return copies


def rank_and_world() -> tuple[int, int]:
    """This rank's number and its group's size (from the launcher's variables)."""
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
