"""One rank of the warm group (`group.py`): a supervised child process that serves every
distributed stage its launcher sends it, until the launcher ends it.

- **Once.** It sets its device up as the model's own process does, makes the process its rank's
  (`Device.setup_rank`), imports the stages, and joins the group through the launcher's store
  on loopback with the backend the device names (`Device.process_group_backend`); then it says
  `READY`. Anything failing until then is the environment's. The group's own timeout is set
  past the stage's deadline, so a rank that waits for a dead peer is ended by its deadline (a
  `timeout`), not by the backend's error.
- **Each stage.** It reads the next request (the model, the run's settings, the stage) from
  its launcher's pipe, puts back what one stage could have left to the next (`fresh_state`:
  the environment variables, the random generators, the compile caches, the device's memory
  peak), runs the stage's rank body under the device's fallback recording
  (`runners.stages.engine.run_stage`: a model's failure is a result, never an exception), checks
  that the stage left the group as it found it (`left_behind`), and sends the result. A model
  is built once per rank for all of its stages (`runners/stages/distributed/held.py`); a
  new model drops the last one first, and its memory budget is counted again from there.
- **A failed stage.** The rank then waits to be stopped with its group (a peer may be waiting
  for it in a collective, and would otherwise fail on the closed connection): a failed stage
  always ends the group.
"""

from __future__ import annotations

import datetime
import gc
import os
import random
import sys
import time
from typing import Any

from runners import containment, faults
from runners.distributed.verdict import with_evidence
from runners.settings import ModelSettings
from runners.stages.distributed.held import model_key, release_model
from runners.stages.distributed.status import IDLE, SETUP, Board, RankStatus, attach
from runners.supervisor import Kind, Send, peak_rss_bytes

HOST = "127.0.0.1"
GROUP_TIMEOUT_MARGIN_S = 120.0  # the group's own timeout: the stage's deadline and this


def rank_env(rank: int, world: int, port: int) -> dict[str, str]:
    """The variables torchrun would set for this rank (libraries read them), on loopback."""
    return {
        "MASTER_ADDR": HOST,
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world),
        "GLOO_SOCKET_IFNAME": "lo",
    }


def rank_main(
    send: Send,
    settings: ModelSettings,
    rank: int,
    world: int,
    port: int,
    board: Board,
    requests: Any,
) -> None:
    """The rank's body: set up and join once, then serve the launcher's requests (`requests`:
    the read end of its pipe; `(spec, settings, stage)`, or None to leave the group)."""
    started = time.perf_counter()
    status = RankStatus(board, rank)
    attach(status)
    status.phase("the device", SETUP)
    os.environ.update(rank_env(rank, world, port))
    import torch

    torch.set_num_threads(max(1, settings.threads))
    import torch.distributed as dist

    from ground.schema import Stage
    from runners.devices import collective_log
    from runners.quiet import quiet_libraries
    from runners.stages.engine import StageContext, run_stage, stage_runner

    quiet_libraries()
    device = settings.device.build()
    request = requests.recv()  # the first stage: what the set-up's faults match on
    if request is None:
        return
    faults.known_as(request[0])  # what the group's own places (its collectives) match on
    faults.inject_spec("setup", request[0])
    device.setup()
    device.setup_rank(rank, world)
    status.exact = bool(getattr(device, "collective_waits", False))
    collective_log.watch(status.collective)
    join_group(device, settings)
    send((Kind.READY, time.perf_counter() - started))
    first = State.now()
    held: tuple[Any, ...] | None = None  # the model this rank holds (`model_key`)
    while request is not None:
        spec, task, stage = request
        faults.known_as(spec)
        ctx = StageContext(spec=spec, device=device, settings=task, compare=True)
        new_model = model_key(ctx) != held
        if new_model:
            release_model()
        # what the last stage left in reference cycles (a sharded model's DTensors) is freed
        # before the device's memory peak is counted from here
        gc.collect()
        if new_model:  # the model's budget counts from a rank that holds no model
            if task.memory_limit:
                containment.limit_memory(task.memory_limit)
            held = model_key(ctx)
        first.restore(device)
        status.phase(stage)
        result = run_stage(stage_runner(Stage(stage))(), ctx)
        with_evidence(result, device)
        del ctx
        left = left_behind() if result.status in ("pass", "skip") else ["a failed stage"]
        send((Kind.PEAK, peak_rss_bytes()))
        send((Kind.DONE, left))
        send((Kind.STAGE, result))
        if left:
            # A peer may be waiting for this rank in a collective: leaving would close its
            # connections and make it fail too. The launcher ends the whole group.
            status.phase("waiting to be stopped with its group", IDLE)
            while True:
                time.sleep(3600)
        status.phase("waiting for its next stage", IDLE)
        request = requests.recv()
    release_model()
    if dist.is_initialized():
        dist.destroy_process_group()


class State:
    """What a stage may change in its rank's process that the next stage must not see: the
    environment variables and the random generators as they were once the rank joined."""

    def __init__(self, env: dict[str, str], rng: Any, python_rng: Any, numpy_rng: Any):
        self.env, self.rng, self.python_rng, self.numpy_rng = env, rng, python_rng, numpy_rng

    @classmethod
    def now(cls) -> State:
        import torch

        numpy = sys.modules.get("numpy")
        return cls(
            dict(os.environ),
            torch.random.get_rng_state(),
            random.getstate(),
            numpy.random.get_state() if numpy is not None else None,
        )

    def restore(self, device: Any) -> None:
        """Before a stage: these as they were, compile caches emptied, the device's memory
        peak counted from here."""
        import torch

        if dict(os.environ) != self.env:
            os.environ.clear()
            os.environ.update(self.env)
        torch.random.set_rng_state(self.rng)
        random.setstate(self.python_rng)
        numpy = sys.modules.get("numpy")
        if numpy is not None and self.numpy_rng is not None:
            numpy.random.set_state(self.numpy_rng)
        if "torch._dynamo" in sys.modules:
            torch._dynamo.reset()  # compiled graphs and guards of the last stage's model
        device.reset_peak_memory()


def left_behind() -> list[str]:
    """What a stage that passed left in the group that the next stage could see, once the
    process groups it made beside the default one are destroyed (transformers' tensor-parallel
    loading makes a mesh of several dimensions, a group each; every rank made them in the same
    order and destroys them in the same order): groups still there, device meshes still
    entered. Empty: the group is as it was."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import _mesh_resources

    left = []
    if dist.is_initialized():
        default = dist.distributed_c10d._get_default_group()
        for group in [g for g in list(dist.distributed_c10d._world.pg_map) if g is not default]:
            dist.destroy_process_group(group)
    if not dist.is_initialized():
        left.append("no default process group")
    else:
        groups = len(dist.distributed_c10d._world.pg_map)
        if groups != 1:
            left.append(f"{groups - 1} process groups beside the default one")
    if _mesh_resources.mesh_stack:
        left.append(f"{len(_mesh_resources.mesh_stack)} device meshes entered")
    return left


def join_group(device: Any, settings: ModelSettings) -> None:
    """Join this rank's group: the launcher's store on loopback, the device's backend (once:
    a rank of the warm group has joined before its first stage)."""
    import torch.distributed as dist

    from runners.stages.distributed.status import phase

    if dist.is_initialized():
        return
    phase("joining the group", SETUP)
    timeout = datetime.timedelta(seconds=settings.timeout_s + GROUP_TIMEOUT_MARGIN_S)
    store = dist.TCPStore(HOST, int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout)
    dist.init_process_group(
        backend=device.process_group_backend,
        store=store,
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        timeout=timeout,
    )
