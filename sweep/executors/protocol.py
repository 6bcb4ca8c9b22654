"""The executor protocol: what both drivers' loops ask of an executor, and what comes back.

A task (`Work`: a model task, `sweep.plan.Task`, or an op-sweep task, `sweep.op_driver.OpGroup`)
is submitted with `submit_run`; a batch of catalog entries to plan (the model sweep's plan
tasks, `sweep.plan.plan_batch`) with `submit_plan`. `wait` returns what finished since the last
call, as events: a plan done (`PlanDone`), a task done (`RunDone`, with the body's outcome: its
rows' data, a model's or a sample's own failures included), or a task the environment kept
failing (`Abandoned`: no rows). How failures are sorted into those is the fault policy
(`sweep.executors.fault_policy`); where the bodies run is the executor's (`local`,
`ray_cluster`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from model_configs.spec import CatalogEntry
from sweep.plan import Planned

RunFn = Callable[[Any, Any], Any]  # (payload, settings) -> outcome (with .worker, .timings)
PlanFn = Callable[[Sequence[CatalogEntry], list[str], "str | None"], list[Planned]]
OomFn = Callable[[Any, str], Any]  # (task, cause) -> its outcome when Ray's memory monitor hit


class Work(Protocol):
    """A task as the executor sees it, whatever it sweeps."""

    key: str

    @property
    def payload(self) -> Any:
        """What the body receives (with the settings) on the worker."""
        ...

    @property
    def settings(self) -> Any:
        """What the body runs with (`runners.settings`: `ModelSettings` at the task's dtype,
        `OpSettings`): every task carries its own."""
        ...

    def names(self) -> list[str]:
        """What it answers for (model ids, OpInfo x dtype): what gets no rows if given up."""
        ...

    def fault_keys(self) -> tuple[str | None, ...]:
        """What the test-only fault hook matches it by."""
        ...


@dataclass
class PlanDone:
    key: int  # the batch's sequence number: the run loop admits plans in catalog order
    entries: Sequence[CatalogEntry]
    planned: list[Planned]
    seconds: float | None = None  # the plan task's own time on its worker


@dataclass
class RunDone:
    task: Any
    outcome: Any
    attempt: int
    elapsed_s: float | None = None  # from submission to result, as the driver saw it


@dataclass
class Abandoned:
    """A task the environment kept failing: what it covers gets no rows (a rerun retries it)."""

    kind: str  # "run" | "plan"
    models: list[str]  # the names it answers for
    cause: str
    attempts: int
    task: Any = None


Event = PlanDone | RunDone | Abandoned


@dataclass(frozen=True)
class Planner:
    """How a model sweep's plan tasks are run: their body, the stages and the configs folder,
    and what planning one entry that ran the node out of memory says (`on_oom(cause)`)."""

    fn: PlanFn
    stages: list[str]
    config_dir: str | None = None
    on_oom: Callable[[str], Any] | None = None


class Executor(Protocol):
    @property
    def slots(self) -> int:
        """Tasks that may run at once (cores)."""
        ...

    @property
    def capacity(self) -> int:
        """Tasks to keep submitted: more than slots queues the next ones on the cluster, so a
        worker starts its next task without waiting for the driver."""
        ...

    def submit_plan(self, key: int, entries: Sequence[CatalogEntry]) -> None: ...

    def submit_run(self, task: Any, attempt: int = 1) -> None: ...

    def running(self) -> int:
        """Run tasks in flight."""
        ...

    def planning(self) -> int:
        """Plan tasks in flight."""
        ...

    def wait(self, timeout_s: float) -> list[Event]: ...

    def close(self) -> None: ...


def timed(fn: Callable[..., Any]) -> Callable[..., tuple[Any, float]]:
    """`fn` returning (its result, the seconds it took)."""

    def body(*args: Any) -> tuple[Any, float]:
        start = time.perf_counter()
        result = fn(*args)
        return result, time.perf_counter() - start

    return body


def finished(outcome: Any, seconds: float, worker: str) -> Any:
    """A task's outcome with its time on the worker, and the worker where the body set none."""
    outcome.timings["worker_s"] = seconds
    if outcome.worker is None:
        outcome.worker = worker
    return outcome
