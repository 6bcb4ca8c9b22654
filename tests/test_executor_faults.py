"""How the Ray executor sorts what stops a task, with Ray's own exception classes raised by a
stand-in for the cluster (the real cluster's faults are in test_faults_system.py): system
faults are retried and then given up without rows, Ray's memory monitor is the model's `oom`,
a plan batch that fails is planned again one entry at a time."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from ray import exceptions as rex

from ground.errors import EnvironmentFault
from ground.schema import Stage
from model_configs.spec import CatalogEntry, TinySpec
from runners.outcome import ModelOutcome, StageResult
from runners.settings import ModelSettings
from sweep.driver import model_oom
from sweep.executors import fault_policy, ray_cluster
from sweep.executors.protocol import Abandoned, PlanDone, Planner, RunDone
from sweep.executors.ray_cluster import RayExecutor
from sweep.plan import Planned, Task

STAGES = [Stage.LOAD, Stage.FORWARD]


class FakeRay:
    """Runs each task at once; `faults[key]` lists what its next calls raise instead."""

    def __init__(self, faults: dict[str, list[BaseException]]):
        self.faults = faults
        self.results: dict[int, Any] = {}
        self.calls: list[str] = []
        self.cancelled: list[int] = []
        self._ids = itertools.count()

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2}

    def remote(self, **_: Any):
        ray = self

        class Remote:
            def __init__(self, fn):
                self.fn = fn

            def options(self, **_: Any):
                return self

            def remote(self, *args: Any) -> int:
                ref = next(ray._ids)
                key = _key(args[1])  # after the task's beat key
                ray.calls.append(key)
                pending = ray.faults.get(key)
                if pending:
                    ray.results[ref] = pending.pop(0)
                else:
                    try:
                        ray.results[ref] = self.fn(*args)
                    except BaseException as exc:  # a task that raises: Ray wraps it
                        ray.results[ref] = rex.RayTaskError("task", "tb", exc)
                return ref

        return Remote

    def wait(self, refs, num_returns=1, timeout=None):
        return list(refs), []

    def get(self, ref, timeout=None):
        value = self.results.pop(ref)
        if isinstance(value, BaseException):
            raise value
        return value

    def cancel(self, ref, force=False):
        self.cancelled.append(ref)


def _key(first: Any) -> str:
    if isinstance(first, TinySpec):
        return first.model_type
    return ",".join(e.model_id for e in first)


def run_fn(spec, settings) -> ModelOutcome:
    return ModelOutcome([StageResult(stage=s.value, status="pass") for s in settings.stages])


def plan_fn(entries, stages, config_dir) -> list[Planned]:
    return [
        Planned(entry=e, spec=TinySpec("transformers", e.model_id, "X", {"id": e.model_id}))
        for e in entries
    ]


@pytest.fixture
def make(monkeypatch):
    monkeypatch.setattr(fault_policy, "RETRY_BACKOFF_S", 0.0)

    def build(faults: dict[str, list[BaseException]], retries: int = 2):
        fake = FakeRay(faults)
        monkeypatch.setattr(ray_cluster, "init_ray", lambda address, num_cpus: fake)
        planner = Planner(plan_fn, [s.value for s in STAGES])
        ex = RayExecutor(run_fn=run_fn, planner=planner, on_oom=model_oom(STAGES))
        ex.retries = retries
        return ex, fake

    return build


SETTINGS = ModelSettings(device="cpu", stages=STAGES, timeout_s=60.0)


def task(name: str, settings: ModelSettings = SETTINGS) -> Task:
    """A model task of one member, carrying the settings its body runs with."""
    spec = TinySpec("transformers", name, "X", {"id": name})
    member = Planned(entry=CatalogEntry(model_id=f"org/{name}"), spec=spec)
    return Task(spec=spec, members=[member], settings=settings)


def drain(ex) -> list:
    events: list = []
    for _ in range(20):
        events += ex.wait(0)
        if not ex.running() and not ex.planning():
            break
    return events


def test_a_lost_worker_node_or_object_is_retried_and_the_retry_counts(make):
    lost = [
        rex.WorkerCrashedError(),
        rex.NodeDiedError("node gone"),
        rex.ObjectLostError("ff" * 28, "owner", "call"),
    ]
    ex, fake = make({"m": list(lost)}, retries=3)
    ex.submit_run(task("m"))
    (done,) = drain(ex)
    assert isinstance(done, RunDone) and done.attempt == 4
    assert [s.status for s in done.outcome.stages] == ["pass", "pass"]
    assert fake.calls == ["m"] * 4


@pytest.mark.parametrize(
    "fault",
    [
        rex.RuntimeEnvSetupError("pip install failed"),
        rex.GetTimeoutError("get timed out"),
        rex.RayTaskError("run_task", "tb", EnvironmentFault("the device did not set up")),
        rex.WorkerCrashedError(),
    ],
    ids=["runtime-env", "get-timeout", "env-in-child", "worker-crashed"],
)
def test_a_system_fault_that_persists_is_given_up_without_rows(make, fault):
    """Before: a Ray error was recorded as the model's `crash` (RayTaskError, GetTimeoutError)
    or stopped the whole sweep (ObjectLostError, RuntimeEnvSetupError)."""
    ex, fake = make({"m": [fault] * 3})
    ex.submit_run(task("m"))
    (gave_up,) = drain(ex)
    assert isinstance(gave_up, Abandoned)
    assert gave_up.models == ["org/m"] and gave_up.attempts == 3
    assert type(fault.cause if isinstance(fault, rex.RayTaskError) else fault).__name__ in (
        gave_up.cause
    )


def test_rays_memory_monitor_is_the_models_oom_and_not_retried(make):
    ex, fake = make({"m": [rex.OutOfMemoryError("memory monitor killed the worker")]})
    ex.submit_run(task("m"))
    (done,) = drain(ex)
    assert isinstance(done, RunDone) and done.attempt == 1
    assert [s.status for s in done.outcome.stages] == ["oom", "not_run"]
    assert "memory monitor" in done.outcome.stages[0].error_message
    assert fake.calls == ["m"]


def test_a_failed_plan_batch_is_planned_again_one_by_one(make):
    entries = [CatalogEntry(model_id=f"m{i}", rank=i) for i in range(4)]
    batch = ",".join(e.model_id for e in entries)
    ex, fake = make({batch: [rex.WorkerCrashedError()], "m2": [rex.WorkerCrashedError()] * 3})
    ex.submit_plan(0, entries)
    events = drain(ex)
    (gave_up,) = [e for e in events if isinstance(e, Abandoned)]
    (plan,) = [e for e in events if isinstance(e, PlanDone)]
    assert gave_up.kind == "plan" and gave_up.models == ["m2"]
    assert [p.entry.model_id for p in plan.planned] == ["m0", "m1", "m3"]
    assert plan.key == 0


def test_a_task_that_never_returns_is_cancelled_and_retried(make, monkeypatch):
    ex, fake = make({})
    ex.guard_s = -1.0  # every task is past its guard at once
    monkeypatch.setattr(fake, "wait", lambda refs, num_returns=1, timeout=None: ([], list(refs)))
    ex.submit_run(task("m"))
    events = ex.wait(0)
    assert events == [] and fake.cancelled  # cancelled, retry queued
    assert ex.running() == 1


def test_retries_back_off_1_s_2_s_4_s_at_most_30_s():
    assert [fault_policy.backoff_s(a) for a in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert fault_policy.backoff_s(20) == 30.0


class Clock:
    """The Ray executor's clock, moved by the test (`ray_cluster.time` while patched): what
    the executor does at a time is then decided by the time, never by how fast the machine
    got there."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(ray_cluster, "time", fake)
    return fake


def test_a_retry_waits_for_its_backoff(make, monkeypatch, clock):
    ex, fake = make({"m": [rex.WorkerCrashedError()]})
    monkeypatch.setattr(fault_policy, "RETRY_BACKOFF_S", 0.5)
    ex.submit_run(task("m"))
    assert ex.wait(0) == [] and fake.calls == ["m"]  # the fault: a retry is queued
    clock.now += 0.49
    assert ex.wait(0) == [] and fake.calls == ["m"]  # not before its backoff
    clock.now += 0.02
    (done,) = ex.wait(0)
    assert isinstance(done, RunDone) and done.attempt == 2 and fake.calls == ["m", "m"]


def test_a_slow_task_that_beats_is_not_given_up_and_a_silent_one_is(make, monkeypatch, clock):
    """Before: a task was given up once its wall time passed a guard (2.5 timeouts + 120 s),
    however alive its worker was: on a loaded machine a slow model was retried, then lost. Now
    only silence counts: the worker's beat, or before the task starts, the others'."""
    ex, fake = make({})
    ex.guard_s = 0.2
    monkeypatch.setattr(fake, "wait", lambda refs, num_returns=1, timeout=None: ([], list(refs)))
    beats = itertools.count()
    monkeypatch.setattr(ex, "_beats", lambda keys: {k: str(next(beats)).encode() for k in keys})
    ex.submit_run(task("m"))
    for _ in range(5):  # five guards long, and it beats
        clock.now += 0.3
        assert ex.wait(0) == []
    assert not fake.cancelled and ex.running() == 1
    monkeypatch.setattr(ex, "_beats", lambda keys: {k: b"still" for k in keys})
    clock.now += 0.3
    ex.wait(0)  # its last new beat
    assert not fake.cancelled
    clock.now += 0.3
    ex.wait(0)  # the same beat a guard later
    assert fake.cancelled  # silent for its guard: cancelled, retry queued


def test_a_cluster_that_stops_answering_is_one_error(make, monkeypatch, clock):
    from ground.errors import SystemFaultError

    ex, fake = make({})
    monkeypatch.setattr(ray_cluster, "PING_S", 0.0)
    monkeypatch.setattr(ray_cluster, "GONE_AFTER_S", 0.5)
    monkeypatch.setattr(ex, "_beats", lambda keys: None)  # the GCS does not answer
    ex._embedded = False
    clock.now += 0.4
    ex.wait(0)  # not for long enough yet
    clock.now += 0.2
    with pytest.raises(SystemFaultError, match="the Ray cluster stopped under the driver"):
        ex.wait(0)
    ex.close()  # nothing to cancel on a cluster that is gone
    assert not fake.cancelled
