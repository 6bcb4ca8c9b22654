"""Executors: where plan tasks and model tasks run (a Ray cluster, or this process with --local).

Both take two kinds of work from the run loop and hand back finished work as events:
- a plan task: a batch of catalog entries to resolve and shrink (`sweep.plan.plan_batch`);
- a model task: one unique tiny model to run through its stages in an isolated child process
  (`runners.isolation.run_isolated`).
The Ray executor keeps each task's submission time; a task that never comes back (a lost node, a
wedged worker) is cancelled after a guard time, and lost workers or nodes (system failures) are
retried `retries` times. A model's own failures are never retried: they come back as rows.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from model_configs.spec import CatalogEntry
from reports.errors import SweepError, UsageError
from reports.schema import Stage, Status
from runners.outcome import ModelOutcome, failed_before
from sweep.plan import Planned, Task

PlanFn = Callable[[Sequence[CatalogEntry], list[str], "str | None"], list[Planned]]
RunFn = Callable[[Any, dict[str, Any]], ModelOutcome]


@dataclass
class PlanDone:
    key: int  # the batch's sequence number: the run loop admits plans in catalog order
    entries: Sequence[CatalogEntry]
    planned: list[Planned]
    seconds: float | None = None  # the plan task's own time on its worker


@dataclass
class RunDone:
    task: Task
    outcome: ModelOutcome
    attempt: int
    elapsed_s: float | None = None  # from submission to result, as the driver saw it


Event = PlanDone | RunDone


@dataclass
class TaskSettings:
    """What every model task is told (from the run's config)."""

    device: str
    device_options: dict[str, Any]
    dtype: str
    stages: list[Stage]
    timeout_s: float
    compile_backend: str | None
    retries: int
    config_dir: str | None = None

    def run_kwargs(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "device_options": self.device_options,
            "dtype": self.dtype,
            "stages": [s.value for s in self.stages],
            "timeout_s": self.timeout_s,
            "compile_backend": self.compile_backend,
        }


class Executor(Protocol):
    slots: int  # model tasks that may run at once (cores)
    capacity: int  # model tasks to keep submitted: more than slots queues the next ones on
    # the cluster, so a worker starts its next model without waiting for the driver

    def submit_plan(self, key: int, entries: Sequence[CatalogEntry]) -> None: ...

    def submit_run(self, task: Task, attempt: int = 1) -> None: ...

    def running(self) -> int:
        """Model tasks in flight."""
        ...

    def planning(self) -> int:
        """Plan tasks in flight."""
        ...

    def wait(self, timeout_s: float) -> list[Event]: ...

    def close(self) -> None: ...


# ---- task bodies (what runs on a worker) -----------------------------------------------------


def run_task(spec: Any, kwargs: dict[str, Any]) -> ModelOutcome:
    """The body of one model task: heavy libraries imported once per worker, then fork."""
    import ray

    from runners.isolation import run_isolated

    outcome = run_isolated(spec, **kwargs)
    node = ray.get_runtime_context().get_node_id()
    outcome.worker = f"ray:{node[:12]}:{os.getpid()}"
    return outcome


def plan_task(
    entries: Sequence[CatalogEntry], stages: list[str], config_dir: str | None
) -> list[Planned]:
    from sweep.plan import plan_batch

    return plan_batch(entries, stages, config_dir)


def _timed_plan(fn: PlanFn) -> Callable[..., tuple[list[Planned], float]]:
    def body(
        entries: Sequence[CatalogEntry], stages: list[str], config_dir: str | None
    ) -> tuple[list[Planned], float]:
        start = time.perf_counter()
        planned = fn(entries, stages, config_dir)
        return planned, time.perf_counter() - start

    return body


def _timed_run(fn: RunFn) -> RunFn:
    def body(spec: Any, kwargs: dict[str, Any]) -> ModelOutcome:
        start = time.perf_counter()
        outcome = fn(spec, kwargs)
        outcome.timings["worker_s"] = time.perf_counter() - start
        return outcome

    return body


# ---- local ---------------------------------------------------------------------------------


class LocalExecutor:
    """No Ray: plans in this process, models one at a time in child processes of this one."""

    slots = capacity = 1

    def __init__(
        self, settings: TaskSettings, *, plan_fn: PlanFn | None = None, run_fn: RunFn | None = None
    ):
        self.settings = settings
        self.plan_fn = _timed_plan(plan_fn or _local_plan)
        self.run_fn = _timed_run(run_fn or _local_run)
        self._done: deque[Event] = deque()
        self._plans = 0
        self._runs = 0

    def submit_plan(self, key: int, entries: Sequence[CatalogEntry]) -> None:
        stages = [s.value for s in self.settings.stages]
        planned, seconds = self.plan_fn(entries, stages, self.settings.config_dir)
        self._done.append(PlanDone(key, entries, planned, seconds))
        self._plans += 1

    def submit_run(self, task: Task, attempt: int = 1) -> None:
        start = time.monotonic()
        outcome = self.run_fn(task.spec, self.settings.run_kwargs())
        if outcome.worker is None:
            outcome.worker = f"{socket.gethostname()}:{os.getpid()}"
        self._done.append(RunDone(task, outcome, attempt, time.monotonic() - start))
        self._runs += 1

    def running(self) -> int:
        return self._runs

    def planning(self) -> int:
        return self._plans

    def wait(self, timeout_s: float) -> list[Event]:
        events = list(self._done)
        self._done.clear()
        self._plans = self._runs = 0
        return events

    def close(self) -> None:
        return None


def _local_plan(
    entries: Sequence[CatalogEntry], stages: list[str], config_dir: str | None
) -> list[Planned]:
    from sweep.plan import plan_batch

    return plan_batch(entries, stages, config_dir)


def _local_run(spec: Any, kwargs: dict[str, Any]) -> ModelOutcome:
    from runners.isolation import run_isolated

    return run_isolated(spec, **kwargs)


# ---- Ray -----------------------------------------------------------------------------------


def init_ray(address: str | None, num_cpus: int | None) -> Any:
    import logging

    import ray

    if ray.is_initialized():
        return ray
    if address:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    else:
        ray.init(
            num_cpus=num_cpus or os.cpu_count() or 1,
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
    return ray


# A worker process is replaced after this many model tasks. Model code only ever runs in
# forked children, so the worker itself holds no model state; recycling bounds what the
# libraries' caches (and planning) may leave behind, at the cost of one re-import of torch.
WORKER_MAX_CALLS = 200


class RayExecutor:
    """Plan and model tasks on a Ray cluster (embedded local Ray, or `--address`)."""

    def __init__(
        self,
        settings: TaskSettings,
        *,
        address: str | None = None,
        num_cpus: int | None = None,
        plan_fn: PlanFn | None = None,
        run_fn: RunFn | None = None,
    ):
        self.settings = settings
        self.ray = ray = init_ray(address, num_cpus)
        from ray import exceptions as rex

        self._rex = rex
        self._run_remote = ray.remote(num_cpus=1, max_retries=0, max_calls=WORKER_MAX_CALLS)(
            _timed_run(run_fn or run_task)
        )
        self._plan_remote = ray.remote(num_cpus=1, max_retries=0)(_timed_plan(plan_fn or plan_task))
        self.slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.capacity = self.slots + max(1, self.slots // 2)
        self._kwargs = settings.run_kwargs()
        self._stages = [s.value for s in settings.stages]
        # A task normally returns within its model timeout (the worker enforces it), after at
        # most one other model's run queued ahead of it; this guard catches a worker that never
        # returns at all (a lost node, a wedged process).
        self.guard_s = settings.timeout_s * 2.5 + 120
        self._runs: dict[Any, tuple[Task, int, float]] = {}
        self._plans: dict[Any, tuple[int, Sequence[CatalogEntry], int, float]] = {}

    # submission ---------------------------------------------------------------------------

    def submit_plan(self, key: int, entries: Sequence[CatalogEntry], attempt: int = 1) -> None:
        ref = self._plan_remote.remote(list(entries), self._stages, self.settings.config_dir)
        self._plans[ref] = (key, entries, attempt, time.monotonic())

    def submit_run(self, task: Task, attempt: int = 1) -> None:
        ref = self._run_remote.remote(task.spec, self._kwargs)
        self._runs[ref] = (task, attempt, time.monotonic())

    def running(self) -> int:
        return len(self._runs)

    def planning(self) -> int:
        return len(self._plans)

    # completion ---------------------------------------------------------------------------

    def wait(self, timeout_s: float) -> list[Event]:
        refs = [*self._plans, *self._runs]
        if not refs:
            return []
        ready, _ = self.ray.wait(refs, num_returns=1, timeout=timeout_s)
        if ready:  # take everything else that is done too
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        events: list[Event] = []
        for ref in ready:
            if ref in self._plans:
                events += self._plan_done(ref)
            elif ref in self._runs:
                events += self._run_done(ref)
        events += self._expired()
        return events

    def _expired(self) -> list[Event]:
        now = time.monotonic()
        events: list[Event] = []
        for ref, (task, attempt, started) in list(self._runs.items()):
            if now - started > self.guard_s:
                self.ray.cancel(ref, force=True)
                del self._runs[ref]
                events.append(
                    RunDone(
                        task,
                        failed_before(
                            self._stages,
                            Status.TIMEOUT,
                            "Timeout",
                            f"the Ray task did not return within {self.guard_s:g} s",
                        ),
                        attempt,
                    )
                )
        for ref, (key, entries, _attempt, started) in list(self._plans.items()):
            if now - started > self.guard_s:
                self.ray.cancel(ref, force=True)
                del self._plans[ref]
                message = f"planning did not return within {self.guard_s:g} s"
                events.append(
                    PlanDone(
                        key,
                        entries,
                        self._failed_plans(entries, Status.TIMEOUT, "Timeout", message),
                    )
                )
        return events

    def _system_failure(self, exc: BaseException) -> Status | None:
        """CRASH / OOM for failures of Ray itself (retried), None for anything else."""
        rex = self._rex
        if isinstance(exc, (rex.WorkerCrashedError, rex.NodeDiedError)):
            return Status.CRASH
        if isinstance(exc, rex.OutOfMemoryError):
            return Status.OOM
        return None

    def _run_done(self, ref: Any) -> list[Event]:
        task, attempt, submitted = self._runs.pop(ref)
        try:
            outcome = self.ray.get(ref, timeout=60)
        except Exception as exc:  # the task raised, was cancelled, or its worker or node died
            status = self._system_failure(exc)
            if status is not None and attempt <= self.settings.retries:
                self.submit_run(task, attempt + 1)
                return []
            outcome = failed_before(
                self._stages, status or Status.CRASH, type(exc).__name__, _first_line(exc)
            )
        return [RunDone(task, outcome, attempt, time.monotonic() - submitted)]

    def _plan_done(self, ref: Any) -> list[Event]:
        key, entries, attempt, _ = self._plans.pop(ref)
        seconds = None
        try:
            planned, seconds = self.ray.get(ref, timeout=60)
        except Exception as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, SweepError):  # the environment (the Hub kept failing): one
                raise cause from None  # clear error for the run, never rows for its models
            status = self._system_failure(exc)
            if status is not None and attempt <= self.settings.retries:
                self.submit_plan(key, entries, attempt + 1)
                return []
            planned = self._failed_plans(
                entries, status or Status.CRASH, type(exc).__name__, _first_line(exc)
            )
        return [PlanDone(key, entries, planned, seconds)]

    def _failed_plans(
        self, entries: Sequence[CatalogEntry], status: Status, error_type: str, message: str
    ) -> list[Planned]:
        """Planning itself died: each entry of the batch fails its first stage with the cause."""
        return [
            Planned(entry=e, outcome=failed_before(self._stages, status, error_type, message))
            for e in entries
        ]

    def close(self) -> None:
        for ref in [*self._runs, *self._plans]:
            self.ray.cancel(ref, force=True)
        self._runs.clear()
        self._plans.clear()


def make_executor(
    name: str,
    settings: TaskSettings,
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    plan_fn: PlanFn | None = None,
    run_fn: RunFn | None = None,
) -> Executor:
    if name == "local":
        return LocalExecutor(settings, plan_fn=plan_fn, run_fn=run_fn)
    if name == "ray":
        return RayExecutor(
            settings, address=address, num_cpus=num_cpus, plan_fn=plan_fn, run_fn=run_fn
        )
    raise UsageError(f"unknown executor {name!r} (use ray or local)")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
