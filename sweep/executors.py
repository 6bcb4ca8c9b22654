"""Executors: where a sweep's tasks run (a Ray cluster, or this process with --local), for both
sweeps: a model task (`sweep.plan.Task`: one unique tiny model) and an op-sweep task
(`sweep.op_driver.OpGroup`: a few OpInfos), and the model sweep's plan tasks (a batch of
catalog entries to resolve and shrink, `sweep.plan.plan_batch`).

A task's body runs on a worker with the run's settings, unchanged (`runners.settings`), and
returns an outcome: its rows' data, a model's or a sample's own failures included. What fails
is sorted once, here (the fault policy). Anything that stops a task (the environment failing
in the child, a worker or node lost, a lost object, a runtime env that cannot be set up, a
task that shows no sign of life) is a system fault: the task is retried `retries` times with
a backoff, then given up (`Abandoned`): what it covers gets no rows, so a rerun with the same
run id retries it, and `GiveUp` stops the run with one error when task after task is given
up. A plan batch that fails is split and its entries planned one by one, so one bad entry
cannot take its batch with it. The one exception: Ray's memory monitor killing a worker while
a single model ran is that model's `oom` row (`on_oom`), not a retry.

What is slow is not lost. A task's worker says it is alive every `BEAT_S` seconds (Ray's key
value store); a task is given up as lost only when nothing of it (or, before it starts,
nothing in the executor) shows life for `guard_s`, never because a loaded machine runs it
slowly. The embedded Ray's workers run at the driver's niceness (Ray's default, +15, lets any
other process on the machine starve the models). A cluster that goes away under the driver
(its raylet or GCS dead) stops the run with one `SystemFaultError` (exit 3) before Ray's own
client gives up on it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from model_configs.spec import CatalogEntry
from reports.errors import SystemFaultError, UsageError, safe_text
from runners import containment, faults
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

    def names(self) -> list[str]:
        """What it answers for (model ids, OpInfo x dtype): what gets no rows if given up."""
        ...

    def fault_keys(self) -> tuple[str | None, ...]:
        """What the test-only fault hook matches it by."""
        ...


def task_settings(task: Any, settings: Any) -> Any:
    """What a task's body runs with: its own settings where it carries them (a model task at
    one dtype of a run of several), else the executor's."""
    own = getattr(task, "settings", None)
    return settings if own is None else own


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

RETRY_BACKOFF_S = 1.0  # before the first retry; doubled for each further one (at most 30 s)
GIVE_UP_AFTER = 3  # tasks of one kind given up in a row (each after its retries): stop the run


def backoff_s(attempt: int) -> float:
    """How long to wait before attempt `attempt + 1`."""
    return min(30.0, RETRY_BACKOFF_S * 2 ** (attempt - 1))


def describe_failure(exc: BaseException) -> str:
    """`Type: first line` of what stopped a task (a Ray task error names its cause)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    return f"{type(exc).__name__}: {_first_line(exc)}"


class GiveUp:
    """The tasks a run gave up (no rows: a rerun runs them), and the rule that stops the run:
    `GIVE_UP_AFTER` tasks of one kind given up in a row, each after its retries."""

    def __init__(self, noun: str = "model"):
        self.noun = noun  # what a run task is, in the error
        self.names: list[str] = []
        self.causes: dict[str, str] = {}  # what stopped them -> the first name it hit
        self._streak: Counter[str] = Counter()

    def ran(self, kind: str) -> None:
        """A task of `kind` came back: the streak is broken."""
        self._streak[kind] = 0

    def add(self, event: Abandoned) -> None:
        self.names += event.models
        self.causes.setdefault(event.cause, event.models[0] if event.models else "")
        self._streak[event.kind] += 1
        if self._streak[event.kind] >= GIVE_UP_AFTER:
            raise SystemFaultError(
                f"the environment keeps failing: {self._streak[event.kind]} "
                f"{self.noun if event.kind == 'run' else 'plan'} tasks in a row could not run "
                f"after {event.attempts} attempts each (last: {event.cause})",
                hint="fix the machine (device, packages, Ray, store), then rerun the same "
                "command with the same --run-id: what has no rows runs then",
            )


def gave_up_error(
    run_id: str, names: list[str], causes: dict[str, str], what: tuple[str, str]
) -> SystemFaultError:
    """The one error for what the environment kept from running (it has no rows);
    `what`: (one, several) of what the names are."""
    n = len(names)
    listed = "; ".join(f"{cause} (first: {name})" for cause, name in causes.items())
    return SystemFaultError(
        f"{n} {what[0] if n == 1 else what[1]} of run {run_id} got no rows: the environment "
        f"kept failing after retries: {listed}",
        hint=f"rerun the same command (--run-id {run_id}): only those run again",
    )


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


def _timed(fn: Callable[..., Any]) -> Callable[..., tuple[Any, float]]:
    def body(*args: Any) -> tuple[Any, float]:
        start = time.perf_counter()
        result = fn(*args)
        return result, time.perf_counter() - start

    return body


def _finished(outcome: Any, seconds: float, worker: str) -> Any:
    outcome.timings["worker_s"] = seconds
    if outcome.worker is None:
        outcome.worker = worker
    return outcome


# ---- local ---------------------------------------------------------------------------------


class LocalExecutor:
    """No Ray: plans in this process, tasks one at a time in child processes of this one.
    System faults are retried in place (after the same backoff), then given up."""

    slots = capacity = 1

    def __init__(self, settings: Any, *, run_fn: RunFn, planner: Planner | None = None):
        self.settings = settings
        self.retries = 0
        self.run_fn = _timed(run_fn)
        self.planner = planner
        self._plan = _timed(planner.fn) if planner else None
        self._done: deque[Event] = deque()
        self._plans = 0
        self._runs = 0
        self.sleep: Callable[[float], None] = time.sleep

    def submit_plan(self, key: int, entries: Sequence[CatalogEntry]) -> None:
        assert self.planner is not None and self._plan is not None
        self._plans += 1
        try:
            planned, seconds = self._plan(entries, self.planner.stages, self.planner.config_dir)
        except Exception:  # the environment failed under one of them: one by one, retried
            planned, seconds = [], None
            for entry in entries:
                planned += self._plan_one(entry)
        self._done.append(PlanDone(key, entries, planned, seconds))

    def _plan_one(self, entry: CatalogEntry) -> list[Planned]:
        assert self.planner is not None and self._plan is not None
        attempt = 1
        while True:
            try:
                return self._plan([entry], self.planner.stages, self.planner.config_dir)[0]
            except Exception as exc:
                if attempt > self.retries:
                    self._done.append(
                        Abandoned("plan", [entry.model_id], describe_failure(exc), attempt)
                    )
                    return []
                self.sleep(backoff_s(attempt))
                attempt += 1

    def submit_run(self, task: Any, attempt: int = 1) -> None:
        start = time.monotonic()
        self._runs += 1
        while True:
            try:
                outcome, seconds = self.run_fn(task.payload, task_settings(task, self.settings))
                break
            except Exception as exc:  # not the model's (a body returns its failures as data)
                if attempt > self.retries:
                    self._done.append(
                        Abandoned("run", task.names(), describe_failure(exc), attempt, task)
                    )
                    return
                self.sleep(backoff_s(attempt))
                attempt += 1
        outcome = _finished(outcome, seconds, f"{socket.gethostname()}:{os.getpid()}")
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
                # the workers at the driver's own niceness, not Ray's +15
                _system_config={"worker_niceness": 0},
            )
    return ray


# A worker process is replaced after this many tasks. Model code only ever runs in forked
# children, so the worker itself holds no model state; recycling bounds what the libraries'
# caches (and planning) may leave behind, at the cost of one re-import of torch.
WORKER_MAX_CALLS = 200

# What the test-only `runtime_env` fault submits a task with: a module to fetch from a port
# nothing listens on, so the runtime env cannot be set up (RuntimeEnvSetupError in about 2 s).
BROKEN_RUNTIME_ENV = {"py_modules": ["https://127.0.0.1:9/hfsweep-test-unreachable.zip"]}

BEAT_S = 5.0  # how often a task's worker says it is alive
GUARD_S = 300.0  # silence after which a task is taken for lost (a wedged worker or node)
PING_S = 5.0  # how often the driver checks that its cluster is still there
GONE_AFTER_S = 20.0  # a cluster that does not answer for this long is gone (Ray's own
# client gives up after 60 s, with a line of its own and exit 1)
NAMESPACE = "hfsweep"


def _beating(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The body of a task on a worker: while it runs, a thread says so under `key` in Ray's
    key-value store every `BEAT_S` seconds (a worker that is slow still beats)."""

    def body(key: bytes, *args: Any) -> Any:
        stop = threading.Event()

        def beat() -> None:
            from ray.experimental.internal_kv import internal_kv_get_gcs_client

            count = 0
            while True:
                count += 1
                with contextlib.suppress(Exception):
                    client = internal_kv_get_gcs_client()
                    client.internal_kv_put(
                        key, str(count).encode(), True, NAMESPACE.encode(), timeout=BEAT_S
                    )
                if stop.wait(BEAT_S):
                    return

        thread = threading.Thread(target=beat, daemon=True, name="task-beat")
        thread.start()
        try:
            return fn(*args)
        finally:
            stop.set()
            thread.join(1.0)
            with contextlib.suppress(Exception):  # the task is over: its key goes
                from ray.experimental.internal_kv import internal_kv_get_gcs_client

                client = internal_kv_get_gcs_client()
                client.internal_kv_del(key, False, NAMESPACE.encode(), timeout=BEAT_S)

    return body


def _on_ray_worker(fn: RunFn) -> Callable[..., Any]:
    def body(payload: Any, settings: Any) -> Any:
        outcome, seconds = _timed(fn)(payload, settings)
        return _finished(outcome, seconds, _ray_worker_name())

    return _beating(body)


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


def _test_runtime_env() -> dict[str, Any] | None:
    """The test-only fault hook's variables, forwarded to the workers when the driver has them
    (workers of an already running Ray do not see the driver's environment otherwise)."""
    names = (faults.ENV, faults.STATE_ENV)
    env = {n: os.environ[n] for n in names if n in os.environ}
    return {"env_vars": env} if env else None


class RayExecutor:
    """Tasks on a Ray cluster (embedded local Ray, or `--address`)."""

    def __init__(
        self,
        settings: Any,
        *,
        run_fn: RunFn,
        planner: Planner | None = None,
        on_oom: OomFn | None = None,
        address: str | None = None,
        num_cpus: int | None = None,
    ):
        self.settings = settings
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
            self._plan_remote = ray.remote(num_cpus=1, max_retries=0)(_beating(_timed(planner.fn)))
        self._runtime_env = runtime_env = _test_runtime_env()
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
        settings = task_settings(job.task, self.settings)
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
        from ray.experimental.internal_kv import internal_kv_get_gcs_client

        client = internal_kv_get_gcs_client()
        if client is None:  # no cluster client here (a stand-in cluster in tests)
            return {}
        try:
            found = client.internal_kv_multi_get(keys, NAMESPACE.encode(), timeout=PING_S)
        except Exception:
            return None
        self._answered = time.monotonic()
        return dict(found or {})

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
    settings: Any,
    *,
    run_fn: RunFn,
    planner: Planner | None = None,
    on_oom: OomFn | None = None,
) -> Executor:
    """The executor `job` (`sweep.settings.JobSettings`) asks for, with its retries."""
    executor: LocalExecutor | RayExecutor
    if job.executor == "local":
        executor = LocalExecutor(settings, run_fn=run_fn, planner=planner)
    elif job.executor == "ray":
        executor = RayExecutor(
            settings,
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


def _first_line(exc: BaseException) -> str:
    text = safe_text(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
