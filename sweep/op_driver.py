"""The op sweep's driver: OpInfo groups as tasks on the model sweep's core, rows into the store.

An op-sweep task (`OpGroup`: `--group-size` OpInfos, each with the dtypes it still lacks) is a
task like a model: the same run lifecycle (`sweep.session`: the device check, run lock,
damaged-part quarantine, resume check, run row, writer and progress line), the same executors
(Ray or local) and fault policy (`sweep.executors`); each group runs in supervised child
processes (`runners.op_sweep.isolation`, on `runners.supervisor`). Guarantees, as for the model
sweep:
- a device that fails its check before any sample runs (`runners.preflight`) stops the
  run with one error (exit 3) before anything is written;
- every OpInfo x dtype asked for gets its rows (skips included), one per sample and phase;
- a group's rows are written in one part file once the group is done, flushed by the writer's
  timer, so a killed driver loses at most the groups in flight and those finished in the last
  flush interval, and the same command with the same `--run-id` resumes without duplicates;
- a sample that hangs gets `timeout`, one that kills its process `crash`, one that allocates
  past its memory budget `oom`, and the sweep goes on;
- what is not the sample's doing (the device failing in the child, a SIGKILL from outside, a
  lost worker, node or object) is retried, then given up without rows: never written as
  `crash`, so a rerun runs the group; the run then ends with one error (exit 3);
- one driver per run id; a resume must match every setting that changes an op row
  (`OpRun.row_settings`); damaged part files are put aside and their groups run again.
At the end the run's per-op summary (`op_summary`) is written from its rows.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ground.errors import SystemFaultError, UsageError
from reports.store import Store, utcnow
from runners import faults
from runners.op_sweep.units import Unit
from runners.settings import OpSettings
from sweep.executors.fault_policy import GiveUp
from sweep.executors.protocol import Abandoned, Executor, RunDone, RunFn
from sweep.session import OP_SWEEP, RunSession, Warn
from sweep.settings import OpRun
from sweep.writer import RowWriter

WAIT_S = 1.0  # the longest the loop sleeps between turns


@dataclass(frozen=True)
class OpGroup:
    """One op-sweep task: a few OpInfos, each with the dtypes still to run, and the settings
    its body runs with."""

    units: tuple[Unit, ...]
    key: str
    settings: OpSettings

    @property
    def payload(self) -> list[Unit]:
        return list(self.units)

    def names(self) -> list[str]:
        return [name for unit in self.units for name in unit.names()]

    def fault_keys(self) -> tuple[str | None, ...]:
        return tuple(unit.key for unit in self.units)


@dataclass
class OpOutcome:
    """What an op-sweep task produced (picklable: it crosses Ray)."""

    rows: list[dict[str, Any]]
    worker: str | None = None
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class OpSweepSummary:
    run_id: str
    opinfos: int
    units: int  # OpInfo x dtype asked for
    already_done: int
    rows: int
    statuses: dict[str, int]
    seconds: float
    abandoned: list[str] = field(default_factory=list)  # OpInfo x dtype without rows
    causes: dict[str, str] = field(default_factory=dict)
    damaged_parts: int = 0


def op_group_task(units: list[Unit], settings: OpSettings) -> OpOutcome:
    """The body of one op-sweep task: every sample of a few OpInfos, in isolated children."""
    from runners.op_sweep.isolation import run_units_isolated

    faults.inject("task", *(unit.key for unit in units))
    return OpOutcome(list(run_units_isolated(units, settings)))


def completed_units(store: Store, run_id: str) -> set[tuple[str, str]]:
    """(OpInfo, dtype) pairs that already have their rows in this run."""
    table = store.read("ops", run_id, columns=["opinfo", "dtype"])
    return set(
        zip(table.column("opinfo").to_pylist(), table.column("dtype").to_pylist(), strict=True)
    )


def run_op_sweep(
    run: OpRun, *, run_fn: RunFn | None = None, warn: Warn | None = None
) -> OpSweepSummary:
    """Run (or resume) an op sweep; returns what was done. Raises UsageError for bad settings
    (a resume with other settings, a run another driver holds), DeviceCheckError when the
    device fails its check before any sample runs, SystemFaultError when the environment keeps
    failing task after task.

    `run_fn` replaces the body of the op tasks (tests and benches of the driver; a stand-in runs
    nothing on the device, so the device is not checked); `warn` gets one line per problem
    found in the store (default: stderr)."""
    from runners.op_sweep.opdb import INPUTS, get_opinfo, select_opinfos

    start = time.monotonic()
    if run.task.inputs not in INPUTS:
        raise UsageError(f"--inputs must be one of {', '.join(INPUTS)}, not {run.task.inputs!r}")
    keys = select_opinfos(list(run.ops) if run.ops else None)
    device = run.task.device.build()
    if run.task.declarations:
        from runners.op_sweep.declarations import load_declarations

        load_declarations(device.name, run.task.declarations)  # a bad file fails now
    with RunSession(
        OP_SWEEP,
        run.job,
        run.task.device,
        settings=run.row_settings(device),
        run_fn=run_fn or op_group_task,
        check_device=run_fn is None,
        warn=warn,
    ) as session:
        store, run_id = session.store, session.run_id
        done = completed_units(store, run_id)
        units: list[Unit] = []
        for key in keys:
            todo = tuple(d for d in run.task.dtypes if (key, d) not in done)
            if todo:
                op = get_opinfo(key)
                units.append(Unit(key, op.name, op.variant_test_name or None, todo))
        size = run.group_size
        groups = [
            OpGroup(tuple(units[i : i + size]), units[i].key, run.task)
            for i in range(0, len(units), size)
        ]
        session.start(
            {
                "opinfos_requested": len(keys),
                "opinfo_filter": ",".join(run.ops) if run.ops else None,
            },
            total=sum(len(u.dtypes) for u in units),
            on_written=lambda: write_summary(store, run_id),
        )
        loop = OpLoop(device.identity())
        loop.run(session.executor, groups, session.writer, session.progress.advance)
        session.end(incomplete=bool(loop.gave_up.names))
    return OpSweepSummary(
        run_id=run_id,
        opinfos=len(keys),
        units=len(keys) * len(run.task.dtypes),
        already_done=len(done),
        rows=loop.rows,
        statuses=dict(loop.statuses),
        seconds=time.monotonic() - start,
        abandoned=loop.gave_up.names,
        causes=loop.gave_up.causes,
        damaged_parts=session.opened.damaged,
    )


class OpLoop:
    """Keeps the executor's capacity of groups submitted; finished groups' rows go to the
    writer, groups the environment kept failing to `gave_up` (no rows)."""

    def __init__(self, context: dict[str, Any]):
        self.context = context
        self.gave_up = GiveUp("op-sweep")
        self.statuses: Counter[str] = Counter()
        self.rows = 0

    def run(
        self,
        executor: Executor,
        groups: list[OpGroup],
        writer: RowWriter,
        advance: Callable[..., None],
    ) -> None:
        queue = deque(groups)
        while queue or executor.running():
            while queue and executor.running() < executor.capacity:
                executor.submit_run(queue.popleft())
            for event in executor.wait(WAIT_S):
                if isinstance(event, Abandoned):
                    advance("system_fault", n=len(event.models))
                    self.gave_up.add(event)
                elif isinstance(event, RunDone):
                    self.gave_up.ran("run")
                    self._ran(event, writer, advance)
            writer.tick()

    def _ran(self, done: RunDone, writer: RowWriter, advance: Callable[..., None]) -> None:
        rows: list[dict[str, Any]] = done.outcome.rows
        finished = utcnow()
        for row in rows:
            row.update(self.context, worker=done.outcome.worker, finished_at=finished)
            self.statuses[row["status"]] += 1
        writer.add({"ops": rows})
        self.rows += len(rows)
        for unit in done.task.units:
            for dtype in unit.dtypes:
                mine = {
                    r["status"] for r in rows if r["opinfo"] == unit.key and r["dtype"] == dtype
                }
                advance(_headline(mine))


def _headline(statuses: set[str]) -> str:
    """An OpInfo x dtype's worst outcome, for the progress counts."""
    for status in ("crash", "oom", "timeout", "fail", "wrong", "pass"):
        if status in statuses:
            return status
    return "skip"


def write_summary(store: Store, run_id: str) -> None:
    """The per-op summary of the run, from its rows (replaces earlier summaries of the run)."""
    from reports.op_sweep import summary_rows_from_store

    rows = summary_rows_from_store(store, run_id)
    older = store.part_files("op_summary", run_id)
    if store.write("op_summary", run_id, rows) is not None or not rows:
        for path in older:
            store.fs.delete_file(path)


def abandoned_error(summary: OpSweepSummary) -> SystemFaultError:
    from sweep.executors.fault_policy import gave_up_error

    return gave_up_error(
        summary.run_id, summary.abandoned, summary.causes, ("OpInfo x dtype", "OpInfo x dtypes")
    )
