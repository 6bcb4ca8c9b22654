"""The distributed stages (`ddp`, `fsdp`, `tp`): a model on a group of ranks of the device.

- `stages`: what each stage does on a rank, and its launch from the sweep's process;
- `group`: the group's launcher beside the child supervisor (one supervised process per rank,
  a loopback store of its own, one result, nothing left behind);
- `rank`: a rank's process (device set-up, rendezvous, the stage, its result);
- `status`: what each rank is doing, where the launcher reads it when the group fails.
"""

from __future__ import annotations

from typing import Any


def task_resources(settings: Any) -> dict[str, Any]:
    """What a task running `settings` asks Ray for: as many of the device's
    ranks as its distributed stages start (`Device.rank_resources`: accelerators on a real
    cluster, CPUs on the emulator), so that two such tasks never oversubscribe a node. Empty
    for a task without distributed stages (an op-sweep task too)."""
    from runners import stages as stage_registry
    from runners.devices import device_class

    world = getattr(settings, "world_size", None)
    stages = set(getattr(settings, "stages", ()))
    if not world or not stages & set(stage_registry.rank_stages()):
        return {}
    return dict(device_class(settings.device.name).rank_resources(int(world)))


def check_world_size(settings: Any) -> None:
    """Refuse a world larger than the device's ranks on this machine (one clear error before
    any model runs), and a device with no process group at all."""
    from ground.errors import UsageError
    from runners.devices import process_group_backend, ranks_available

    world = getattr(settings, "world_size", None)
    if not world:
        return
    name = settings.device.name
    if process_group_backend(name) is None:
        raise UsageError(
            f"device {name!r} has no process group: the distributed stages cannot run on it",
            hint="drop ddp, fsdp and tp from --stages, or use another --device",
        )
    fit = ranks_available(name)
    if world > fit:
        raise UsageError(
            f"--world-size {world} asks for {world} ranks of {name}; this machine holds {fit}",
            hint=f"use --world-size {fit} or less",
        )
