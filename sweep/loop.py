"""The run loop: catalog entries stream into plan tasks, plans into model tasks, outcomes into rows.

One loop, one thread. Each turn it
1. plans ahead: submits the next batch of catalog entries as a plan task while fewer than two
   model tasks per slot are queued (one plan always when the queue runs low, more only on idle
   cores), so that planning happens on the workers while models run and no core waits on it;
2. keeps the executor's capacity of model tasks submitted (a few more than the slots, so a
   worker that finishes a model starts the next one without waiting for the driver);
3. takes what finished: plans are admitted in catalog order (the dedup lead of a group is its
   best-ranked member, as if planned serially), outcomes become rows for every member of the
   task, and the writer gets its chance to flush.
The loop holds the open tasks and their members, one batch of entries per plan in flight, and
the writer's buffer: all bounded by the number of slots, not by the catalog. What the run must
remember about every group lives in the `Ledger`, on disk.

A run of several dtypes plans each model once and admits it once per dtype: a task (a group) is
a shrunk config at one dtype, run with the run's settings at that dtype, its rows saying it. A
resumed run admits a model only at the dtypes it has no rows for yet (`pending`).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from ground.schema import Status
from model_configs.spec import CatalogEntry
from runners.outcome import ModelOutcome
from runners.settings import ModelSettings
from sweep.executors.fault_policy import GiveUp
from sweep.executors.protocol import Abandoned, Executor, PlanDone, RunDone
from sweep.ledger import Finished, Ledger
from sweep.plan import Planned, Task
from sweep.plans import PlanCache, plan_row
from sweep.rows import RunContext, alternative_rows, config_row, model_rows, sizing_rows
from sweep.settings import PLAN_BATCH
from sweep.writer import RowWriter

WAIT_S = 1.0  # the longest the loop sleeps between turns


class RunLoop:
    def __init__(
        self,
        executor: Executor,
        ledger: Ledger,
        writer: RowWriter,
        run: RunContext,
        *,
        settings_at: Callable[[str], ModelSettings],
        plan_batch: int = PLAN_BATCH,
        on_model: Callable[[str, int], None] | None = None,
        on_planned: Callable[[int], None] | None = None,
        dtypes: Sequence[str] = (),
        pending: dict[str, tuple[str, ...]] | None = None,
        plans: PlanCache | None = None,
    ):
        self.executor, self.ledger, self.writer, self.run = executor, ledger, writer, run
        # the run's dtypes (default: its context's one), each with its rows' context and the
        # settings its tasks carry (`settings_at`); `pending`: the dtypes a model still needs
        # where that is not every dtype (a resumed run), read as its plan is admitted
        self.dtypes = tuple(dtypes) or (run.dtype,)
        self.contexts = {d: replace(run, dtype=d) for d in self.dtypes}
        self.settings_at = settings_at
        self.pending = pending if pending is not None else {}
        self.key_of = ledger.key_of  # each task's content key, in its rows
        self.plan_batch = plan_batch
        self.on_model = on_model or (lambda outcome, n: None)
        self.on_planned = on_planned or (lambda n: None)  # models planned (progress)
        self.queue: deque[Task] = deque()
        self._configs: dict[str, dict[str, Any]] = {}  # model id -> its new config pair row
        # the full-size configs sized in this run so far, and each model's sizing rows (its
        # config's first model's) until its first rows are written
        self._sized: set[str] = set()
        self._sizing: dict[str, list[dict[str, Any]]] = {}
        # earlier plans by content (None: plan everything, keep no plans), the batches whose
        # entries are partly planned from them (key -> each entry's plan, None: being planned)
        # and each model's plans row until its first rows are written
        self.plans = plans
        self._partial: dict[int, tuple[list[CatalogEntry], list[Planned | None]]] = {}
        self._plan_keys: dict[str, str] = {}  # model id -> the key of its plan being made
        self._plan_rows: dict[str, dict[str, Any]] = {}
        self.skipped = 0  # decided at planning (skip, shrink failure)
        self.models_run = 0  # models whose rows came from a model task (dedup members too)
        self.reused = 0  # of those, models whose rows were copied from an earlier run
        self.max_open = 0  # the most tasks open at once (the loop's own state)
        self.gave_up = GiveUp("model")  # models the environment kept from running (no rows)
        # seconds summed over tasks: model tasks as the driver saw them (`task_s`: submission
        # to result, queueing included), their time on the worker (`worker_s`) and the parts
        # the child measured; plan tasks' time on their workers (`plan_s`)
        self.timings: dict[str, float] = {}

    # ---- the loop ------------------------------------------------------------------------

    def run_entries(self, entries: Iterator[CatalogEntry]) -> None:
        ex = self.executor
        batches = _batched(entries, self.plan_batch)
        next_key = admit_key = 0
        arrived: dict[int, PlanDone] = {}
        exhausted = False
        while True:
            while not exhausted and self._plan_ahead():
                batch = next(batches, None)
                if batch is None:
                    exhausted = True
                    break
                self._plan(next_key, batch, arrived)
                next_key += 1
            while admit_key in arrived:  # batches planned from earlier plans alone
                self._admit(arrived.pop(admit_key).planned)
                admit_key += 1
            while self.queue and ex.running() < ex.capacity:
                ex.submit_run(self.queue.popleft())
            if exhausted and not self.queue and not ex.running() and not ex.planning():
                break
            for event in ex.wait(WAIT_S):
                if isinstance(event, PlanDone):
                    self._add_time("plan_s", event.seconds)
                    arrived[event.key] = self._merged(event)
                    while admit_key in arrived:
                        self._admit(arrived.pop(admit_key).planned)
                        admit_key += 1
                    if event.planned:
                        self.gave_up.ran("plan")
                elif isinstance(event, Abandoned):
                    self._abandon(event)
                else:
                    self.gave_up.ran("run")
                    self._ran(event)
            self.max_open = max(self.max_open, len(self.ledger.open))
            self.writer.tick()

    def _abandon(self, event: Abandoned) -> None:
        """The environment kept failing this task: no rows (a rerun retries its models); the
        run stops with one error when it keeps happening to task after task."""
        if event.task is not None:
            self.ledger.abandon(event.task)
        self.on_model("system_fault", len(event.models))
        self.gave_up.add(event)

    @property
    def abandoned(self) -> list[str]:
        return self.gave_up.names

    @property
    def causes(self) -> dict[str, str]:
        return self.gave_up.causes

    def _plan_ahead(self) -> bool:
        ex = self.executor
        if len(self.queue) >= 2 * ex.slots:
            return False
        if ex.planning() == 0:
            return True
        return ex.planning() + ex.running() < ex.slots  # an idle core: plan on it

    # ---- plans ---------------------------------------------------------------------------

    def _plan(self, key: int, batch: list[CatalogEntry], arrived: dict[int, PlanDone]) -> None:
        """Plan a batch: what an earlier run planned from the same content is taken from it,
        the rest goes to a plan task; a batch wholly taken is ready at once."""
        if self.plans is None:
            self.executor.submit_plan(key, batch)
            return
        keys = [self.plans.keys.key(e) for e in batch]
        taken = [self.plans.take(e, k) for e, k in zip(batch, keys, strict=True)]
        for entry, k, planned in zip(batch, keys, taken, strict=True):
            if planned is None and k is not None:
                self._plan_keys[entry.model_id] = k
        misses = [e for e, p in zip(batch, taken, strict=True) if p is None]
        if not misses:
            arrived[key] = PlanDone(key, batch, [p for p in taken if p is not None], 0.0)
            return
        if len(misses) < len(batch):
            self._partial[key] = (batch, taken)
        self.executor.submit_plan(key, misses)

    def _merged(self, done: PlanDone) -> PlanDone:
        """A plan task's batch with its keys, and the batch's plans taken from earlier runs in
        catalog order (an entry the environment kept from planning is left out)."""
        for p in done.planned:
            p.plan_key = self._plan_keys.pop(p.entry.model_id, None)
        if done.key not in self._partial:
            return done
        batch, taken = self._partial.pop(done.key)
        fresh = {p.entry.model_id: p for p in done.planned}
        merged = [
            t if t is not None else fresh.get(e.model_id) for e, t in zip(batch, taken, strict=True)
        ]
        return PlanDone(done.key, batch, [p for p in merged if p is not None], done.seconds)

    def _admit(self, planned: list[Planned]) -> None:
        self.on_planned(
            sum(len(self.pending.get(p.entry.model_id) or self.dtypes) for p in planned)
        )
        for p in planned:
            dtypes = self.pending.pop(p.entry.model_id, None) if self.pending else None
            dtypes = dtypes or self.dtypes
            plan = (
                plan_row(self.run.run_id, p, self.plans.records.get(p.plan_key or ""))
                if self.plans is not None
                else None
            )
            if p.size is not None and p.config_hash and p.config_hash not in self._sized:
                self._sized.add(p.config_hash)
                self._sizing[p.entry.model_id] = sizing_rows(self.run, p)
            if p.outcome is not None:
                for dtype in dtypes:
                    results, fallbacks = model_rows(self.contexts[dtype], p, p.outcome)
                    plans, plan = [plan] if plan else None, None
                    sizing = self._sizing.pop(p.entry.model_id, None)
                    self.writer.add(
                        {
                            "results": results,
                            "fallbacks": fallbacks,
                            "plans": plans,
                            "sizing": sizing,
                        }
                    )
                    self.skipped += 1
                    self.on_model(headline(p.outcome), 1)
                continue
            if self.ledger.first_pair(p):
                row = config_row(self.run, p)
                if row is not None:
                    self._configs[p.entry.model_id] = row
            if plan is not None:
                self._plan_rows[p.entry.model_id] = plan
            for dtype in dtypes:
                admitted = self.ledger.admit(p, dtype, self.settings_at(dtype))
                if isinstance(admitted, Task):
                    self.queue.append(admitted)
                elif isinstance(admitted, Finished):  # its group already ran: share the outcome
                    lead = admitted.lead if admitted.lead != p.entry.model_id else None
                    self._write_member(
                        p,
                        dtype,
                        admitted.outcome,
                        admitted.attempt,
                        lead,
                        reused_from=admitted.reused_from,
                    )
                    self.models_run += 1
                    self.reused += admitted.reused_from is not None
                    self.on_model(headline(admitted.outcome), 1)

    # ---- outcomes ------------------------------------------------------------------------

    def _ran(self, done: RunDone) -> None:
        task, outcome = done.task, done.outcome
        for name, value in (("task_s", done.elapsed_s), *outcome.timings.items()):
            self._add_time(name, value)
        lead = task.lead.entry.model_id
        dtype = task.dtype or self.dtypes[0]
        for i, member in enumerate(task.members):
            self._write_member(member, dtype, outcome, done.attempt, lead if i else None)
        self.ledger.finish(task, outcome, done.attempt)
        self.models_run += len(task.members)
        self.on_model(headline(outcome), len(task.members))

    def _add_time(self, name: str, value: float | None) -> None:
        if value is not None:
            self.timings[name] = self.timings.get(name, 0.0) + value

    def _write_member(
        self,
        member: Planned,
        dtype: str,
        outcome: ModelOutcome,
        attempt: int,
        dedup_of: str | None,
        *,
        reused_from: str | None = None,
    ) -> None:
        assert member.spec is not None
        key = self.key_of(member.spec, dtype) if self.key_of else None
        run = self.contexts[dtype]
        results, fallbacks = model_rows(
            run, member, outcome, attempt=attempt, dedup_of=dedup_of, task_key=key,
            reused_from=reused_from,
        )  # fmt: skip
        alternatives = alternative_rows(
            run, member, outcome, attempt=attempt, dedup_of=dedup_of, task_key=key,
            reused_from=reused_from,
        )  # fmt: skip
        pair = self._configs.pop(member.entry.model_id, None)
        plan = self._plan_rows.pop(member.entry.model_id, None)
        self.writer.add(
            {
                "results": results,
                "fallbacks": fallbacks,
                "alternatives": alternatives,
                "configs": [pair] if pair else None,
                "plans": [plan] if plan else None,
                "sizing": self._sizing.pop(member.entry.model_id, None),
            }
        )


def headline(outcome: ModelOutcome) -> str:
    statuses = {s.status for s in outcome.stages}
    if statuses <= {Status.SKIP.value}:
        return "skip"
    if statuses <= {Status.PASS.value, Status.SKIP.value}:
        return "pass"
    return "fail"


def _batched(entries: Iterator[CatalogEntry], n: int) -> Iterator[list[CatalogEntry]]:
    it = iter(entries)
    while batch := list(itertools.islice(it, n)):
        yield batch
