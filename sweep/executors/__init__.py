"""Executors: where a sweep's tasks run (a Ray cluster, or this process with `--local`), for both
sweeps: a model task (`sweep.plan.Task`: one unique tiny model) and an op-sweep task
(`sweep.op_driver.OpGroup`: a few OpInfos), and the model sweep's plan tasks (a batch of
catalog entries to resolve and shrink, `sweep.plan.plan_batch`).

- `protocol`: the executor protocol the drivers' loops use, and its events;
- `fault_policy`: what is retried, after which backoff, and when the run stops;
- `local`: `--local`, tasks one at a time in children of the driver;
- `ray_cluster`: tasks on Ray, with `liveness` (a task is lost only when it shows no sign of
  life, never for being slow);
- here: `make_executor`, the executor a run's job settings ask for, and `Deferred`, one that
  starts with its first task (a run with nothing to run starts no Ray).

Every task carries the settings its body runs with (`runners.settings`: a model task its
`ModelSettings` at its dtype, an op-sweep task its `OpSettings`), unchanged to the worker; the
body returns an outcome: its rows' data, a model's or a sample's own failures included.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from ground.errors import UsageError
from model_configs.spec import CatalogEntry
from sweep.executors.local import LocalExecutor
from sweep.executors.protocol import Event, Executor, OomFn, Planner, RunFn
from sweep.executors.ray_cluster import RayExecutor


class Deferred:
    """An executor started by its first task: a run that has nothing to plan or run (every
    entry's plan and outcome reused) starts no Ray. Until then it has nothing in flight and
    says how many slots it expects (`slots`)."""

    def __init__(self, start: Callable[[], Executor], slots: int):
        self._start = start
        self._executor: Executor | None = None
        self._slots = max(1, slots)
        self.start_s = 0.0  # how long starting it took (Ray's start-up)

    @property
    def started(self) -> bool:
        return self._executor is not None

    def _get(self) -> Executor:
        if self._executor is None:
            began = time.monotonic()
            self._executor = self._start()
            self.start_s = time.monotonic() - began
        return self._executor

    @property
    def slots(self) -> int:
        return self._executor.slots if self._executor is not None else self._slots

    @property
    def capacity(self) -> int:
        return self._executor.capacity if self._executor is not None else self._slots

    def submit_plan(self, key: int, entries: Sequence[CatalogEntry]) -> None:
        self._get().submit_plan(key, entries)

    def submit_run(self, task: Any, attempt: int = 1) -> None:
        self._get().submit_run(task, attempt)

    def running(self) -> int:
        return self._executor.running() if self._executor is not None else 0

    def planning(self) -> int:
        return self._executor.planning() if self._executor is not None else 0

    def wait(self, timeout_s: float) -> list[Event]:
        return self._executor.wait(timeout_s) if self._executor is not None else []

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()


def make_executor(
    job: Any,
    *,
    run_fn: RunFn,
    planner: Planner | None = None,
    on_oom: OomFn | None = None,
) -> Executor:
    """The executor `job` (`sweep.settings.JobSettings`) asks for, with its retries."""
    executor: LocalExecutor | RayExecutor
    if job.executor == "local":
        executor = LocalExecutor(run_fn=run_fn, planner=planner)
    elif job.executor == "ray":
        executor = RayExecutor(
            run_fn=run_fn,
            planner=planner,
            on_oom=on_oom,
            address=job.address,
            num_cpus=job.num_cpus,
        )
    else:
        raise UsageError(f"unknown executor {job.executor!r} (use ray or local)")
    executor.retries = job.retries
    return executor
