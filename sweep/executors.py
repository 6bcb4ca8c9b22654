"""Executors: where plan tasks and model tasks run (a Ray cluster, or this process with --local).

Both take two kinds of work from the run loop and hand back finished work as events:
- a plan task: a batch of catalog entries to resolve and shrink (`sweep.plan.plan_batch`);
- a model task: one unique tiny model to run through its stages in an isolated child process
  (`runners.isolation.run_isolated`).
What fails is sorted once, here. A model's own failures never reach this code: they come back
as rows. Anything else that stops a task (the environment failing in the child, a worker or
node lost, a lost object, a runtime env that cannot be set up, a task that never returns) is a
system fault: the task is retried `retries` times with a short backoff, and then given up
(`Abandoned`): its models get no rows, so a rerun with the same run id retries them. A plan
batch that fails is split and its entries planned one by one, so one bad entry cannot take
its batch with it. The one exception is Ray's memory monitor killing a worker: the node ran
out of memory while that model ran, which is the model's `oom` row, not a retry.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from model_configs.spec import CatalogEntry
from reports.errors import UsageError, safe_text
from reports.schema import Stage, Status
from runners import containment, faults
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


@dataclass
class Abandoned:
    """A task the environment kept failing: its models get no rows (a rerun retries them)."""

    kind: str  # "run" | "plan"
    models: list[str]
    cause: str
    attempts: int
    task: Task | None = None


Event = PlanDone | RunDone | Abandoned

RETRY_BACKOFF_S = 1.0  # before the first retry; doubled for each further one (at most 30 s)


def backoff_s(attempt: int) -> float:
    """How long to wait before attempt `attempt + 1`."""
    return min(30.0, RETRY_BACKOFF_S * 2 ** (attempt - 1))


def describe_failure(exc: BaseException) -> str:
    """`Type: first line` of what stopped a task (a Ray task error names its cause)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    return f"{type(exc).__name__}: {_first_line(exc)}"


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
    memory_limit: int | None = None  # bytes per model beyond the child's start (None: no cap)

    def run_kwargs(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "device_options": self.device_options,
            "dtype": self.dtype,
            "stages": [s.value for s in self.stages],
            "timeout_s": self.timeout_s,
            "compile_backend": self.compile_backend,
            "memory_limit": self.memory_limit,
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

    from runners import faults
    from runners.isolation import run_isolated

    faults.inject_spec("task", spec)
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
    """No Ray: plans in this process, models one at a time in child processes of this one.
    System faults are retried in place (after the same backoff), then given up."""

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
        self.sleep: Callable[[float], None] = time.sleep

    def submit_plan(self, key: int, entries: Sequence[CatalogEntry]) -> None:
        stages = [s.value for s in self.settings.stages]
        self._plans += 1
        try:
            planned, seconds = self.plan_fn(entries, stages, self.settings.config_dir)
        except Exception:  # the environment failed under one of them: one by one, retried
            planned, seconds = [], None
            for entry in entries:
                planned += self._plan_one(entry, stages)
        self._done.append(PlanDone(key, entries, planned, seconds))

    def _plan_one(self, entry: CatalogEntry, stages: list[str]) -> list[Planned]:
        attempt = 1
        while True:
            try:
                return self.plan_fn([entry], stages, self.settings.config_dir)[0]
            except Exception as exc:
                if attempt > self.settings.retries:
                    self._done.append(
                        Abandoned("plan", [entry.model_id], describe_failure(exc), attempt)
                    )
                    return []
                self.sleep(backoff_s(attempt))
                attempt += 1

    def submit_run(self, task: Task, attempt: int = 1) -> None:
        start = time.monotonic()
        self._runs += 1
        while True:
            try:
                outcome = self.run_fn(task.spec, self.settings.run_kwargs())
                break
            except Exception as exc:  # not the model (run_isolated returns its failures)
                if attempt > self.settings.retries:
                    models = [m.entry.model_id for m in task.members]
                    self._done.append(
                        Abandoned("run", models, describe_failure(exc), attempt, task)
                    )
                    return
                self.sleep(backoff_s(attempt))
                attempt += 1
        if outcome.worker is None:
            outcome.worker = f"{socket.gethostname()}:{os.getpid()}"
        self._done.append(RunDone(task, outcome, attempt, time.monotonic() - start))

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
        with containment.embedded_ray_dies_with_this_process():  # even if the driver is killed
            ray.init(
                address="local",  # a new embedded Ray, even where `ray start` ran here
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


# What the test-only `runtime_env` fault submits a task with: a module to fetch from a port
# nothing listens on, so the runtime env cannot be set up (RuntimeEnvSetupError in about 2 s).
BROKEN_RUNTIME_ENV = {"py_modules": ["https://127.0.0.1:9/hfsweep-test-unreachable.zip"]}


@dataclass
class _RunJob:
    task: Task
    attempt: int
    submitted: float = 0.0


@dataclass
class _PlanJob:
    key: int
    entries: Sequence[CatalogEntry]
    attempt: int = 1
    part: int | None = None  # its index in a batch that was split after a failure
    submitted: float = 0.0


@dataclass
class _Split:
    """A plan batch that failed, planned again one entry at a time."""

    entries: Sequence[CatalogEntry]
    parts: dict[int, list[Planned]] = field(default_factory=dict)
    pending: int = 0


def _test_runtime_env() -> dict[str, Any] | None:
    """The test-only fault hook's variables, forwarded to the workers when the driver has them
    (workers of an already running Ray do not see the driver's environment otherwise)."""
    from runners import faults

    names = (faults.ENV, faults.STATE_ENV)
    env = {n: os.environ[n] for n in names if n in os.environ}
    return {"env_vars": env} if env else None


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
        self._run_base = ray.remote(num_cpus=1, max_retries=0, max_calls=WORKER_MAX_CALLS)(
            _timed_run(run_fn or run_task)
        )
        self._run_remote = self._run_base
        self._plan_remote = ray.remote(num_cpus=1, max_retries=0)(_timed_plan(plan_fn or plan_task))
        self._runtime_env = runtime_env = _test_runtime_env()
        if runtime_env:
            self._run_remote = self._run_remote.options(runtime_env=runtime_env)
            self._plan_remote = self._plan_remote.options(runtime_env=runtime_env)
        self.slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.capacity = self.slots + max(1, self.slots // 2)
        self._kwargs = settings.run_kwargs()
        self._stages = [s.value for s in settings.stages]
        # A task normally returns within its model timeout (the worker enforces it), after at
        # most one other model's run queued ahead of it; this guard catches a worker that never
        # returns at all (a lost node, a wedged process): a system fault, retried.
        self.guard_s = settings.timeout_s * 2.5 + 120
        self._runs: dict[Any, _RunJob] = {}
        self._plans: dict[Any, _PlanJob] = {}
        self._splits: dict[int, _Split] = {}
        self._later: list[tuple[float, _RunJob | _PlanJob]] = []  # retries waiting their turn

    # submission ---------------------------------------------------------------------------

    def submit_plan(self, key: int, entries: Sequence[CatalogEntry]) -> None:
        self._submit_plan(_PlanJob(key, entries))

    def _submit_plan(self, job: _PlanJob) -> None:
        ref = self._plan_remote.remote(list(job.entries), self._stages, self.settings.config_dir)
        job.submitted = time.monotonic()
        self._plans[ref] = job

    def submit_run(self, task: Task, attempt: int = 1) -> None:
        self._submit_run(_RunJob(task, attempt))

    def _submit_run(self, job: _RunJob) -> None:
        remote = self._run_remote
        if faults.ENV in os.environ and self._test_fault("submit", job) == "runtime_env":
            broken = {**(self._runtime_env or {}), **BROKEN_RUNTIME_ENV}
            remote = self._run_base.options(runtime_env=broken)
        ref = remote.remote(job.task.spec, self._kwargs)
        job.submitted = time.monotonic()
        self._runs[ref] = job

    def running(self) -> int:
        return len(self._runs) + sum(isinstance(j, _RunJob) for _, j in self._later)

    def planning(self) -> int:
        return len(self._plans) + sum(isinstance(j, _PlanJob) for _, j in self._later)

    def _retry_later(self, job: _RunJob | _PlanJob) -> None:
        self._later.append((time.monotonic() + backoff_s(job.attempt), job))
        job.attempt += 1

    def _submit_due(self) -> None:
        now = time.monotonic()
        due = [j for t, j in self._later if t <= now]
        self._later = [(t, j) for t, j in self._later if t > now]
        for job in due:
            if isinstance(job, _RunJob):
                self._submit_run(job)
            else:
                self._submit_plan(job)

    # completion ---------------------------------------------------------------------------

    def wait(self, timeout_s: float) -> list[Event]:
        self._submit_due()
        refs = [*self._plans, *self._runs]
        if not refs:
            if self._later:
                time.sleep(
                    max(0.0, min(timeout_s, min(t for t, _ in self._later) - time.monotonic()))
                )
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
        for ref, run in list(self._runs.items()):
            if now - run.submitted > self.guard_s:
                self.ray.cancel(ref, force=True)
                del self._runs[ref]
                message = f"the model task did not return within {self.guard_s:g} s"
                events += self._run_failed(run, message, oom=False)
        for ref, plan in list(self._plans.items()):
            if now - plan.submitted > self.guard_s:
                self.ray.cancel(ref, force=True)
                del self._plans[ref]
                message = f"planning did not return within {self.guard_s:g} s"
                events += self._plan_failed(plan, message, oom=False)
        return events

    def _test_fault(self, at: str, job: _RunJob) -> str | None:
        """The test-only hook's faults that the driver plays itself (`runners.faults`)."""
        return faults.take(at, *faults.spec_keys(job.task.spec))

    def _run_done(self, ref: Any) -> list[Event]:
        job = self._runs.pop(ref)
        try:
            if faults.ENV in os.environ and self._test_fault("get", job) == "lose_object":
                # Ray 2.60 has no call that frees one object: raise what `get` raises then
                raise self._rex.ObjectLostError(ref.hex(), None, "test-only hook")
            outcome = self.ray.get(ref, timeout=60)
        except Exception as exc:  # a system fault: the task never ran its model to the end
            if isinstance(exc, self._rex.GetTimeoutError):
                self.ray.cancel(ref, force=True)
            return self._run_failed(
                job, describe_failure(exc), oom=isinstance(exc, self._rex.OutOfMemoryError)
            )
        return [RunDone(job.task, outcome, job.attempt, time.monotonic() - job.submitted)]

    def _run_failed(self, job: _RunJob, cause: str, *, oom: bool) -> list[Event]:
        if oom:  # Ray's memory monitor killed the worker while this model ran: its result
            outcome = failed_before(
                self._stages,
                Status.OOM,
                "OutOfMemoryError",
                "Ray's memory monitor killed the worker running this model "
                f"(the node ran short of memory): {cause}",
            )
            return [RunDone(job.task, outcome, job.attempt, time.monotonic() - job.submitted)]
        if job.attempt <= self.settings.retries:
            self._retry_later(job)
            return []
        models = [m.entry.model_id for m in job.task.members]
        return [Abandoned("run", models, cause, job.attempt, job.task)]

    def _plan_done(self, ref: Any) -> list[Event]:
        job = self._plans.pop(ref)
        try:
            planned, seconds = self.ray.get(ref, timeout=60)
        except Exception as exc:
            if isinstance(exc, self._rex.GetTimeoutError):
                self.ray.cancel(ref, force=True)
            oom = isinstance(exc, self._rex.OutOfMemoryError)
            return self._plan_failed(job, describe_failure(exc), oom=oom)
        return self._planned(job, planned, seconds)

    def _plan_failed(self, job: _PlanJob, cause: str, *, oom: bool) -> list[Event]:
        if job.part is None and len(job.entries) > 1:  # find the entry that fails: one by one
            self._splits[job.key] = _Split(job.entries, pending=len(job.entries))
            for i, entry in enumerate(job.entries):
                self._submit_plan(_PlanJob(job.key, [entry], part=i))
            return []
        entry = job.entries[0]
        if oom:  # planning this one entry ran the node out of memory: the model's result
            outcome = failed_before(
                self._stages, Status.OOM, "OutOfMemoryError", f"planning ran out of memory: {cause}"
            )
            return self._planned(job, [Planned(entry=entry, outcome=outcome)], None)
        if job.attempt <= self.settings.retries:
            self._retry_later(job)
            return []
        gave_up = Abandoned("plan", [entry.model_id], cause, job.attempt)
        return [gave_up, *self._planned(job, [], None)]

    def _planned(self, job: _PlanJob, planned: list[Planned], seconds: float | None) -> list[Event]:
        if job.part is None:
            return [PlanDone(job.key, job.entries, planned, seconds)]
        split = self._splits[job.key]
        split.parts[job.part] = planned
        split.pending -= 1
        if split.pending:
            return []
        del self._splits[job.key]
        merged = [p for i in sorted(split.parts) for p in split.parts[i]]
        return [PlanDone(job.key, split.entries, merged, seconds)]

    def close(self) -> None:
        for ref in [*self._runs, *self._plans]:
            self.ray.cancel(ref, force=True)
        self._runs.clear()
        self._plans.clear()
        self._later.clear()


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
    text = safe_text(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
