"""One rank of a distributed stage, in its own supervised child process (`group.py`).

It sets its device up as the model's own process does (any failure until then is the
environment's), makes the process its rank's (`Device.setup_rank`), joins the group through the
launcher's store on loopback with the backend the device names
(`Device.process_group_backend`), runs the stage's rank body under the device's fallback
recording (`runners.stages.run_stage`: a model's failure is a result, never an exception), and
sends the result; a rank whose stage failed then waits to be stopped with its group (a peer
may be waiting for it in a collective, and would otherwise fail on the closed connection).
The group's own timeout is set past the stage's deadline, so a rank that waits for a dead peer
is ended by its deadline (a `timeout`), not by the backend's error.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any

from model_configs.spec import TinySpec
from runners import faults
from runners.distributed.status import SETUP, Board, RankStatus, attach
from runners.distributed.verdict import with_evidence
from runners.settings import ModelSettings
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
    spec: TinySpec,
    settings: ModelSettings,
    stage: str,
    rank: int,
    world: int,
    port: int,
    board: Board,
) -> None:
    started = time.perf_counter()
    status = RankStatus(board, rank)
    attach(status)
    status.phase("the device", SETUP)
    os.environ.update(rank_env(rank, world, port))
    import torch

    torch.set_num_threads(max(1, settings.threads))
    import torch.distributed as dist

    from reports.schema import Stage
    from runners.devices import collective_log
    from runners.run_model import quiet_libraries
    from runners.stages import StageContext, run_stage, stage_runner

    quiet_libraries()
    device = settings.device.build()
    faults.known_as(spec)  # what the group's own places (its collectives) match on
    faults.inject_spec("setup", spec)
    device.setup()
    device.setup_rank(rank, world)
    status.exact = bool(getattr(device, "collective_waits", False))
    collective_log.watch(status.collective)
    send((Kind.READY, time.perf_counter() - started))
    status.phase(stage)
    ctx = StageContext(spec=spec, device=device, settings=settings, compare=True)
    runner = stage_runner(Stage(stage))()
    result = run_stage(runner, ctx)  # the stage joins the group once its model is loaded
    with_evidence(result, device)
    send((Kind.PEAK, peak_rss_bytes()))
    send((Kind.STAGE, result))
    if result.status not in ("pass", "skip"):
        # A peer may be waiting for this rank in a collective: leaving would close its
        # connections and make it fail too. The launcher ends the whole group.
        while True:
            time.sleep(3600)
    if dist.is_initialized():
        dist.destroy_process_group()


def rank_and_world() -> tuple[int, int]:
    """This rank's number and its group's size (from the launcher's variables)."""
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def join_group(device: Any, settings: ModelSettings) -> None:
    """Join this rank's group: the launcher's store on loopback, the device's backend. (A
    model is loaded before: libraries save only on rank 0 of an initialised group.)"""
    import torch.distributed as dist

    from runners.distributed.status import phase

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
    # joined: from here a rank that stops making progress is in its stage (it runs until it
    # ends or its deadline), not still setting up (stopped at once when a peer fails)
    phase("the stage, in the group")
