"""The run loop with planning that streams, on an executor that answers out of order: dedup runs
each unique tiny model exactly once across the run, the best-ranked member leads its group,
members that arrive after their group ran share its outcome, every model gets one row per
stage, and the loop's own state stays bounded by the slots, not the catalog."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence

import pytest

from model_configs.spec import CatalogEntry, TinySpec
from reports.store import Store
from runners.outcome import ModelOutcome, StageResult, skipped
from runners.settings import ModelSettings
from sweep.executors.protocol import Event, PlanDone, RunDone
from sweep.ledger import Ledger
from sweep.loop import RunLoop
from sweep.plan import Planned, Task
from sweep.rows import RunContext
from sweep.writer import RowWriter
from tests.store_writes import completed_models

STAGES = ["load", "forward"]
RUN = RunContext("r", "cpu", False, None, None, "fp32")
SETTINGS = ModelSettings(stages=tuple(STAGES))
# The writer's flush interval: the rows reach the store when the test flushes (one part, not one
# per model: 300 parquet parts written and read back cost seconds, and the loop never reads the
# store; flushes on the writer's timer are tests/test_driver_faults.py's and test_op_sweep_faults.py's)
AT_THE_END = 3600.0


def at(dtype: str) -> ModelSettings:
    return SETTINGS


def entry(rank: int) -> CatalogEntry:
    return CatalogEntry(model_id=f"org/m{rank:05d}", rank=rank, downloads=100_000 - rank)


def plan(e: CatalogEntry, groups: int) -> Planned:
    """Entries whose rank is a multiple of 7 are skipped; the rest shrink to `rank % groups`."""
    if e.rank and e.rank % 7 == 0:
        return Planned(entry=e, outcome=skipped(STAGES, "remote_code", "needs remote code"))
    group = (e.rank or 0) % groups
    spec = TinySpec("transformers", "llama", "LlamaForCausalLM", {"group": group})
    return Planned(entry=e, spec=spec, config_source="hub", config_hash=f"c{group}")


class ScrambledExecutor:
    """Plans come back newest first; one model task finishes per wait, oldest first."""

    slots, capacity = 2, 3

    def __init__(self, groups: int):
        self.groups = groups
        self.plans: list[tuple[int, Sequence[CatalogEntry]]] = []
        self.runs: deque[Task] = deque()
        self.ran: list[str] = []  # task keys, in the order they ran

    def submit_plan(self, key: int, entries: Sequence[CatalogEntry]) -> None:
        self.plans.append((key, entries))

    def submit_run(self, task: Task, attempt: int = 1) -> None:
        assert len(self.runs) < self.capacity
        self.runs.append(task)

    def running(self) -> int:
        return len(self.runs)

    def planning(self) -> int:
        return len(self.plans)

    def wait(self, timeout_s: float) -> list[Event]:
        events: list[Event] = []
        while self.plans:
            key, entries = self.plans.pop()  # newest first
            events.append(PlanDone(key, entries, [plan(e, self.groups) for e in entries]))
        if self.runs:
            task = self.runs.popleft()
            self.ran.append(task.key)
            outcome = ModelOutcome(
                [StageResult(stage=s, status="pass", duration_s=0.1) for s in STAGES],
                param_count=task.spec.config["group"],
            )
            events.append(RunDone(task, outcome, 1))
        return events

    def close(self) -> None:
        return None


@pytest.mark.parametrize("groups", [1, 5, 40])
def test_streamed_dedup_runs_each_tiny_model_once(tmp_path, groups: int) -> None:
    n = 300
    store = Store(tmp_path / "s")
    ex = ScrambledExecutor(groups)
    with Ledger() as ledger:
        loop = RunLoop(
            ex, ledger, RowWriter(store, "r", AT_THE_END), RUN, settings_at=at, plan_batch=8
        )
        loop.run_entries(iter(entry(i) for i in range(1, n + 1)))
        assert not ledger.open  # every opened task ran
        unique = ledger.unique
    loop.writer.flush()
    rows = store.read("results", "r").to_pylist()
    assert Counter((r["model_id"], r["stage"]) for r in rows) == Counter(
        {(entry(i).model_id, s): 1 for i in range(1, n + 1) for s in STAGES}
    )
    skips = {r["model_id"] for r in rows if r["status"] == "skip"}
    assert skips == {entry(i).model_id for i in range(7, n + 1, 7)}
    assert len(ex.ran) == len(set(ex.ran)) == unique == min(groups, n)
    # the lead of each group is its best-ranked member, though plans came back out of order
    leads = {}
    for r in sorted(rows, key=lambda r: r["rank"]):
        if r["status"] == "pass" and r["stage"] == "load":
            leads.setdefault(r["shrunk_config_hash"], r["model_id"])
    for r in rows:
        if r["status"] == "pass":
            lead = leads[r["shrunk_config_hash"]]
            assert r["dedup_of"] == (None if r["model_id"] == lead else lead)
            assert r["param_count"] == int(r["model_id"][-5:]) % groups
    # the config pairs a group shares are stored once each, not per row
    configs = store.read("configs", "r").to_pylist()
    assert len(configs) == len({(c["config_hash"], c["shrunk_config_hash"]) for c in configs})
    assert len(configs) == unique
    # the loop's own state: the queue, the tasks in flight and the plans in flight
    assert loop.max_open <= 2 * ex.slots + ex.capacity + ex.slots * 8
    assert loop.skipped == len(skips) and loop.models_run == n - len(skips)


def test_planning_shows_on_the_progress_line(tmp_path, capsys, monkeypatch) -> None:
    """A line at the start (before any model is planned), then `planned P/T` as plans come
    back, and no ETA before a model finished: a long planning phase is never silent."""
    from sweep import progress as progress_module
    from sweep.progress import SweepProgress

    clock = iter(range(0, 10**6, 11))  # every line 11 s after the last: none held back
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: float(next(clock)))
    n = 20
    with SweepProgress(n, description="run r", enabled=False) as bar, Ledger() as ledger:
        loop = RunLoop(
            ScrambledExecutor(3),
            ledger,
            RowWriter(Store(tmp_path / "s"), "r", AT_THE_END),
            RUN,
            settings_at=at,
            plan_batch=8,
            on_model=lambda outcome, k: bar.advance(outcome, n=k),
            on_planned=bar.plan_done,
        )
        loop.run_entries(iter(entry(i) for i in range(1, n + 1)))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "[run r] 0/20 elapsed 11s eta -"
    planned = [line for line in lines if " planned " in line]
    assert planned and planned[0].startswith("[run r] 0/20 planned 8/20 ") and "eta -" in planned[0]
    assert lines[-1].startswith("[run r] 20/20 ") and " planned " not in lines[-1]


def test_without_dedup_every_model_runs(tmp_path) -> None:
    store = Store(tmp_path / "s")
    ex = ScrambledExecutor(groups=2)
    with Ledger(dedup=False) as ledger:
        loop = RunLoop(
            ex, ledger, RowWriter(store, "r", AT_THE_END), RUN, settings_at=at, plan_batch=4
        )
        loop.run_entries(iter(entry(i) for i in range(1, 21)))
    loop.writer.flush()
    rows = store.read("results", "r").to_pylist()
    assert len(ex.ran) == 20 - 2  # ranks 7 and 14 are skips
    assert all(r["dedup_of"] is None for r in rows)


def test_ledger_keeps_finished_groups_out_of_memory(tmp_path) -> None:
    with Ledger(folder=tmp_path) as ledger:
        lead = plan(entry(1), 3)
        task = ledger.admit(lead, "fp32", SETTINGS)
        assert isinstance(task, Task)
        assert ledger.admit(plan(entry(4), 3), "fp32", SETTINGS) is None  # joins the open task
        outcome = ModelOutcome([StageResult(stage="load", status="pass")], param_count=7)
        ledger.finish(task, outcome, attempt=2)
        assert not ledger.open
        late = ledger.admit(plan(entry(10), 3), "fp32", SETTINGS)  # same group, after it ran
        assert late is not None and not isinstance(late, Task)
        assert (late.lead, late.attempt, late.outcome.param_count) == (lead.entry.model_id, 2, 7)
        assert ledger.first_pair(lead) and not ledger.first_pair(plan(entry(4), 3))
    assert not list(tmp_path.iterdir())  # the ledger's folder is removed with it


def test_a_resumed_run_does_not_run_a_group_again(tmp_path) -> None:
    """The first attempt stops after 60 entries; the resume finds those groups in the store."""
    store = Store(tmp_path / "s")
    first = ScrambledExecutor(groups=10)
    with Ledger() as ledger:
        loop = RunLoop(
            first, ledger, RowWriter(store, "r", AT_THE_END), RUN, settings_at=at, plan_batch=8
        )
        loop.run_entries(iter(entry(i) for i in range(1, 61)))
    loop.writer.flush()
    done = completed_models(store, "r")
    again = ScrambledExecutor(groups=10)
    with Ledger() as ledger:
        assert ledger.resume(store, "r") == 10
        loop = RunLoop(
            again, ledger, RowWriter(store, "r", AT_THE_END), RUN, settings_at=at, plan_batch=8
        )
        loop.run_entries(iter(e for i in range(1, 201) if (e := entry(i)).model_id not in done))
    loop.writer.flush()
    assert again.ran == []  # every group already ran in the first attempt
    rows = store.read("results", "r").to_pylist()
    assert len(rows) == 200 * len(STAGES)
    late = next(r for r in rows if r["model_id"] == entry(123).model_id)
    assert late["dedup_of"] == entry(3).model_id and late["param_count"] == 3
