"""The Ray executor: a sweep's tasks on a Ray cluster (an embedded local Ray, or `--address`).

Each task runs as a Ray task of one CPU, never retried by Ray itself: what fails is sorted by
the fault policy (`sweep.executors.fault_policy`), retried here after its backoff, then given up.
A worker process runs at most `WORKER_MAX_CALLS` tasks. A plan batch that fails is split and
its entries planned one by one, so one bad entry cannot take its batch with it. The one
exception to retrying: Ray's memory monitor killing a worker while a single model ran is that
model's `oom` row (`on_oom`).

What is slow is not lost (`sweep.executors.liveness`): a task is given up as lost only when
nothing of it (or, before it starts, nothing in the executor) shows life for `guard_s`. The
embedded Ray's workers run at the driver's niceness (Ray's default, +15, lets any other
process on the machine starve the models). A cluster that goes away under the driver (its
raylet or GCS dead) stops the run with one `SystemFaultError` (exit 3) before Ray's own client
gives up on it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ground.errors import SystemFaultError, UsageError
from model_configs.spec import CatalogEntry
from runners import containment, faults
from sweep import stop_signals
from sweep.executors.fault_policy import backoff_s, describe_failure
from sweep.executors.liveness import GUARD_S, beating, read_beats
from sweep.executors.protocol import (
    Abandoned,
    Event,
    OomFn,
    PlanDone,
    Planner,
    RunDone,
    RunFn,
    finished,
    timed,
)
from sweep.plan import Planned


def init_ray(address: str | None, num_cpus: int | None) -> Any:
    import logging

    import ray

    if ray.is_initialized():
        return ray
    if address:
        with stop_signals.kept_across():  # SIGTERM stays ours, not Ray's abort
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        return ray

    def start() -> None:
        with (
            containment.embedded_ray_dies_with_this_process(),  # even if the driver is killed
            stop_signals.kept_across(),  # SIGTERM stays ours, not Ray's abort
        ):
            ray.init(
                address="local",  # a new embedded Ray, even where `ray start` ran here
                num_cpus=num_cpus or os.cpu_count() or 1,
                include_dashboard=False,
                logging_level=logging.WARNING,
                log_to_driver=False,
                # the workers at the driver's own niceness, not Ray's +15
                _system_config={"worker_niceness": 0},
            )

    start_embedded(start)
    return ray


# Ray waits a fixed 30 s for a new node's raylet to register with its GCS and then raises
# "The current node timed out during startup"; a machine busy with other work can miss that
# once. It is the machine's problem, not a model's: start again, then say so.
RAY_START_TRIES = 3


def start_embedded(start: Callable[[], None], *, tries: int = RAY_START_TRIES) -> None:
    """Run `start` (an embedded `ray.init`) until it starts, retrying Ray's startup timeout;
    after `tries` timeouts, one `SystemFaultError` that says what to do."""
    import ray

    for attempt in range(1, tries + 1):
        try:
            start()
            return
        except Exception as exc:
            if "timed out during startup" not in str(exc):
                raise
            ray.shutdown()  # what the failed start left running
            if attempt == tries:
                raise SystemFaultError(
                    f"the embedded Ray did not start: its raylet did not register within "
                    f"Ray's 30 s, {tries} times",
                    hint="the machine is too busy to start Ray: rerun when it is less loaded, "
                    "or run without Ray (--local)",
                    tries=tries,
                ) from exc


# A worker process is replaced after this many tasks. Model code only ever runs in forked
# children, so the worker itself holds no model state; recycling bounds what the libraries'
# caches (and planning) may leave behind, at the cost of one re-import of torch.
WORKER_MAX_CALLS = 200

# What the test-only `runtime_env` fault submits a task with: a module to fetch from a port
# nothing listens on, so the runtime env cannot be set up (RuntimeEnvSetupError in about 2 s).
BROKEN_RUNTIME_ENV = {"py_modules": ["https://127.0.0.1:9/hfsweep-test-unreachable.zip"]}

PING_S = 5.0  # how often the driver checks that its cluster is still there
GONE_AFTER_S = 20.0  # a cluster that does not answer for this long is gone (Ray's own
# client gives up after 60 s, with a line of its own and exit 1)


def _on_ray_worker(fn: RunFn) -> Callable[..., Any]:
    def body(payload: Any, settings: Any) -> Any:
        outcome, seconds = timed(fn)(payload, settings)
        return finished(outcome, seconds, _ray_worker_name())

    return beating(body)


def _ray_worker_name() -> str:
    """`ray:<node>:<pid>`: where a task ran (the node id's first 12 digits)."""
    node = socket.gethostname()  # not on a Ray worker (a stand-in cluster in tests)
    with contextlib.suppress(Exception):
        import ray

        if ray.is_initialized():
            node = ray.get_runtime_context().get_node_id()
    return f"ray:{node[:12]}:{os.getpid()}"


@dataclass
class _Job:
    attempt: int
    key: bytes = b""  # where its worker beats: new for every submission
    submitted: float = 0.0
    alive: float = 0.0  # the last sign of life the driver saw (its clock)
    beat: bytes | None = None  # the last beat seen (None: the task has not started)

    def submitting(self) -> bytes:
        self.key = f"beat:{uuid.uuid4().hex}".encode()
        self.submitted = self.alive = time.monotonic()
        self.beat = None
        return self.key


@dataclass
class _RunJob(_Job):
    task: Any = None


@dataclass
class _PlanJob(_Job):
    batch: int = 0
    entries: Sequence[CatalogEntry] = ()
    part: int | None = None  # its index in a batch that was split after a failure


@dataclass
class _Split:
    """A plan batch that failed, planned again one entry at a time."""

    entries: Sequence[CatalogEntry]
    parts: dict[int, list[Planned]] = field(default_factory=dict)
    pending: int = 0


def _forwarded_env(address: str | None) -> dict[str, Any] | None:
    """The test-only fault hook's variables, and on a cluster given by `--address` the Hub's
    offline switch, forwarded to the workers when the driver has them (workers of an already
    running Ray do not see the driver's environment; an embedded Ray's inherit it)."""
    names = (faults.ENV, faults.STATE_ENV, *(("HF_HUB_OFFLINE",) if address else ()))
    env = {n: os.environ[n] for n in names if n in os.environ}
    return {"env_vars": env} if env else None


class RayExecutor:
    """Tasks on a Ray cluster (embedded local Ray, or `--address`)."""

    def __init__(
        self,
        *,
        run_fn: RunFn,
        planner: Planner | None = None,
        on_oom: OomFn | None = None,
        address: str | None = None,
        num_cpus: int | None = None,
    ):
        self.retries = 0
        self.planner = planner
        self.on_oom = on_oom
        self.ray = ray = init_ray(address, num_cpus)
        from ray import exceptions as rex

        self._rex = rex
        self._embedded = not address
        self._run_base = ray.remote(num_cpus=1, max_retries=0, max_calls=WORKER_MAX_CALLS)(
            _on_ray_worker(run_fn)
        )
        self._run_remote = self._run_base
        self._plan_remote = None
        if planner is not None:
            self._plan_remote = ray.remote(num_cpus=1, max_retries=0)(beating(timed(planner.fn)))
        self._runtime_env = runtime_env = _forwarded_env(address)
        if runtime_env:
            self._run_remote = self._run_remote.options(runtime_env=runtime_env)
            if self._plan_remote is not None:
                self._plan_remote = self._plan_remote.options(runtime_env=runtime_env)
        self.slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.capacity = self.slots + max(1, self.slots // 2)
        self.guard_s = GUARD_S
        self._runs: dict[Any, _RunJob] = {}
        self._plans: dict[Any, _PlanJob] = {}
        self._splits: dict[int, _Split] = {}
        self._later: list[tuple[float, _RunJob | _PlanJob]] = []  # retries waiting their turn
        self._progress = time.monotonic()  # the last sign of life of any task
        self._answered = self._pinged = time.monotonic()
        self._gone: str | None = None

    # submission ---------------------------------------------------------------------------

    def submit_plan(self, key: int, entries: Sequence[CatalogEntry]) -> None:
        self._submit_plan(_PlanJob(attempt=1, batch=key, entries=entries))

    def _submit_plan(self, job: _PlanJob) -> None:
        assert self.planner is not None and self._plan_remote is not None
        ref = self._plan_remote.remote(
            job.submitting(), list(job.entries), self.planner.stages, self.planner.config_dir
        )
        self._plans[ref] = job

    def submit_run(self, task: Any, attempt: int = 1) -> None:
        self._submit_run(_RunJob(attempt=attempt, task=task))

    def _submit_run(self, job: _RunJob) -> None:
        from runners.distributed import task_resources

        remote = self._run_remote
        settings = job.task.settings
        runtime_env = self._runtime_env
        if faults.ENV in os.environ and self._test_fault("submit", job) == "runtime_env":
            runtime_env = {**(self._runtime_env or {}), **BROKEN_RUNTIME_ENV}
        resources = task_resources(settings)  # a task of several ranks asks for each one
        self._check_feasible(resources)
        if runtime_env is not self._runtime_env or resources:
            env = {"runtime_env": runtime_env} if runtime_env else {}
            remote = self._run_base.options(**env, **resources)
        ref = remote.remote(job.submitting(), job.task.payload, settings)
        self._runs[ref] = job

    def _check_feasible(self, resources: dict[str, Any]) -> None:
        """A task asking for more than the whole cluster has would wait forever: refuse it."""
        if not resources:
            return
        have = self.ray.cluster_resources()
        wanted = {
            "CPU": resources.get("num_cpus", 0),
            "GPU": resources.get("num_gpus", 0),
            **resources.get("resources", {}),
        }
        short = {k: v for k, v in wanted.items() if v and have.get(k, 0) < v}
        if short:
            name, need = next(iter(short.items()))
            raise UsageError(
                f"a task of the distributed stages asks for {need:g} {name} (one per rank); "
                f"the Ray cluster has {have.get(name, 0):g}",
                hint="lower --world-size, or give the cluster more (--num-cpus for the "
                "embedded Ray)",
            )

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
        self._check_cluster()
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
            self._progress = time.monotonic()
        events: list[Event] = []
        for ref in ready:
            if ref in self._plans:
                events += self._plan_done(ref)
            elif ref in self._runs:
                events += self._run_done(ref)
        events += self._expired()
        return events

    def _beats(self, keys: list[bytes]) -> dict[bytes, bytes] | None:
        """The tasks' last beats (None: the cluster's store did not answer)."""
        found = read_beats(keys, PING_S)
        if found is not None:
            self._answered = time.monotonic()
        return found

    def _expired(self) -> list[Event]:
        """Tasks that showed no sign of life for `guard_s`: cancelled, a system fault."""
        now = time.monotonic()
        jobs: list[tuple[Any, _RunJob | _PlanJob]] = [
            *self._runs.items(),
            *self._plans.items(),
        ]
        silent = [(ref, job) for ref, job in jobs if now - job.alive > self.guard_s]
        if not silent:
            return []
        beats = self._beats([job.key for _, job in silent]) or {}
        for _, job in silent:
            beat = beats.get(job.key)
            if beat is not None and beat != job.beat:
                job.beat, job.alive = beat, now
                self._progress = now
        events: list[Event] = []
        for ref, job in silent:
            if job.alive == now:
                continue
            if job.beat is None and now - self._progress <= self.guard_s:
                job.alive = self._progress  # not started yet, and the others are alive
                continue
            self.ray.cancel(ref, force=True)
            message = f"the task showed no sign of life for {self.guard_s:g} s"
            if isinstance(job, _RunJob):
                del self._runs[ref]
                events += self._run_failed(job, message, oom=False)
            else:
                del self._plans[ref]
                events += self._plan_failed(job, message, oom=False)
        return events

    def _check_cluster(self) -> None:
        """Raise `SystemFaultError` once the cluster is gone from under the driver."""
        now = time.monotonic()
        if self._gone is None and now - self._pinged >= PING_S:
            self._pinged = now
            dead = self._dead_embedded_process()
            if dead is not None:
                self._gone = f"its {dead} is dead"
            elif self._beats([b"ping"]) is None and now - self._answered > GONE_AFTER_S:
                self._gone = f"its GCS did not answer for {now - self._answered:.0f} s"
        if self._gone is not None:
            where = "the embedded Ray" if self._embedded else "the Ray cluster"
            raise SystemFaultError(
                f"{where} stopped under the driver: {self._gone}; the tasks in flight have no rows",
                hint="find what stopped Ray (another `ray stop`?), then rerun the same command "
                "with the same --run-id: what has no rows runs then",
            )

    def _dead_embedded_process(self) -> str | None:
        """The embedded Ray's GCS or raylet, if one is dead (None: alive, or not embedded)."""
        if not self._embedded:
            return None
        try:
            node = self.ray._private.worker._global_node
            processes = node.all_processes
        except Exception:
            return None
        for name in ("gcs_server", "raylet"):
            for info in processes.get(name, ()):
                if info.process.poll() is not None:
                    return f"{name} (pid {info.process.pid})"
        return None

    def _test_fault(self, at: str, job: _RunJob) -> str | None:
        """The test-only hook's faults that the driver plays itself (`runners.faults`)."""
        return faults.take(at, *job.task.fault_keys())

    def _run_done(self, ref: Any) -> list[Event]:
        job = self._runs.pop(ref)
        try:
            if faults.ENV in os.environ and self._test_fault("get", job) == "lose_object":
                # Ray 2.60 has no call that frees one object: raise what `get` raises then
                raise self._rex.ObjectLostError(ref.hex(), None, "test-only hook")
            outcome = self.ray.get(ref, timeout=60)
        except Exception as exc:  # a system fault: the task never ran to the end
            if isinstance(exc, self._rex.GetTimeoutError):
                self.ray.cancel(ref, force=True)
            oom = isinstance(exc, self._rex.OutOfMemoryError)
            return self._run_failed(job, describe_failure(exc), oom=oom)
        return [RunDone(job.task, outcome, job.attempt, time.monotonic() - job.submitted)]

    def _run_failed(self, job: _RunJob, cause: str, *, oom: bool) -> list[Event]:
        if oom and self.on_oom is not None:  # Ray's memory monitor: the model's own result
            outcome = self.on_oom(job.task, cause)
            return [RunDone(job.task, outcome, job.attempt, time.monotonic() - job.submitted)]
        if job.attempt <= self.retries:
            self._retry_later(job)
            return []
        return [Abandoned("run", job.task.names(), cause, job.attempt, job.task)]

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
            self._splits[job.batch] = _Split(job.entries, pending=len(job.entries))
            for i, entry in enumerate(job.entries):
                self._submit_plan(_PlanJob(attempt=1, batch=job.batch, entries=[entry], part=i))
            return []
        entry = job.entries[0]
        assert self.planner is not None
        if oom and self.planner.on_oom is not None:  # planning it ran the node out of memory
            outcome = self.planner.on_oom(cause)
            return self._planned(job, [Planned(entry=entry, outcome=outcome)], None)
        if job.attempt <= self.retries:
            self._retry_later(job)
            return []
        gave_up = Abandoned("plan", [entry.model_id], cause, job.attempt)
        return [gave_up, *self._planned(job, [], None)]

    def _planned(self, job: _PlanJob, planned: list[Planned], seconds: float | None) -> list[Event]:
        if job.part is None:
            return [PlanDone(job.batch, job.entries, planned, seconds)]
        split = self._splits[job.batch]
        split.parts[job.part] = planned
        split.pending -= 1
        if split.pending:
            return []
        del self._splits[job.batch]
        merged = [p for i in sorted(split.parts) for p in split.parts[i]]
        return [PlanDone(job.batch, split.entries, merged, seconds)]

    def close(self) -> None:
        if self._gone is None:
            for ref in [*self._runs, *self._plans]:
                self.ray.cancel(ref, force=True)
        self._runs.clear()
        self._plans.clear()
        self._later.clear()
