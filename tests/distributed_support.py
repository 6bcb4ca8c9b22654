"""Test support for process groups: run a body on each rank of a real group of processes.

`run_ranks(body, device=..., world=2)` starts `world` fresh processes (children of a
`forkserver` that imported torch and transformers once: the pytest process never sets a device
up, see tests/neuron_support.py), each with the device set up as a rank's (`setup_rank`) and
joined to a group through a TCP store this process serves on loopback on a port the kernel
picks; it returns each rank's `body(rank, world)` in rank order. A rank that raises fails the
test with its traceback; every rank is killed at the end, and the test fails if one outlives it.
"""

from __future__ import annotations

import datetime
import os
import traceback
from collections.abc import Callable
from typing import Any

import pytest

from tests.neuron_support import _context

TIMEOUT_S = 240


def _rank_entry(
    body: Callable[[int, int], Any], device: str, rank: int, world: int, port: int, send: Any
) -> None:
    try:
        import torch
        import torch.distributed as dist

        from runners.devices import get_device

        torch.set_num_threads(1)
        os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world)})
        built = get_device(device)
        built.setup()
        built.setup_rank(rank, world)
        timeout = datetime.timedelta(seconds=TIMEOUT_S)
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
        dist.init_process_group(
            built.process_group_backend, store=store, rank=rank, world_size=world, timeout=timeout
        )
        send.send(("ok", body(rank, world)))
    except BaseException as exc:
        send.send(("error", "".join(traceback.format_exception(exc))))
    finally:
        send.close()
        os._exit(0)


def run_ranks(body: Callable[[int, int], Any], *, device: str = "neuron", world: int = 2) -> list:
    """`body(rank, world)` on every rank of a fresh group of `device` (see the module)."""
    import torch.distributed as dist

    context = _context()
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    pipes, procs = [], []
    for rank in range(world):
        receive, send = context.Pipe(duplex=False)
        proc = context.Process(
            target=_rank_entry, args=(body, device, rank, world, store.port, send)
        )
        proc.start()
        send.close()
        pipes.append(receive)
        procs.append(proc)
    results, failures = [], []
    try:
        for rank, receive in enumerate(pipes):
            if not receive.poll(TIMEOUT_S):
                failures.append(f"rank {rank} did not answer in {TIMEOUT_S} s")
                break
            kind, value = receive.recv()
            if kind == "error":
                failures.append(f"rank {rank}:\n{value}")
            results.append(value)
    finally:
        for proc in procs:
            proc.kill()
            proc.join(10)
        del store
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
    assert not [p.pid for p in procs if p.is_alive()], "a rank outlived its test"
    return results
