"""One run lifecycle, which both drivers (`sweep.driver`, `sweep.op_driver`) enter:

    device check -> store -> run id -> the run held (`locked_run`) -> the run's row (`RunRow`)
    -> the writer (`RowWriter`) and the progress line (`SweepProgress`) -> the executor
    -> ... the driver's loop ...
    -> the executor closed and orphans swept -> the rows flushed -> the run row's last word

`RunSession` does it all; between holding the run and starting it, the driver reads what the
run already has (a resume) to say what the run row and the progress line count. Its parts:

- `locked_run`: holds the run (`reports.locks.RunLock`: a second driver is refused with who
  holds it), then finds the parts of the sweep's tables, and the run's parts of no rows in
  every table, that do not read whole (truncated, corrupted) and puts them aside as
  `.damaged-*` (never read as data: what they held runs again; a part of no rows is written
  again when the run starts), then compares the settings of a resume with those of the run's last row
  (`sweep.settings.check_same_settings`: every setting that changes a row).
- `RunRow`: the run's row in its runs table, written `running` at the start and, however the
  driver leaves, `finished`, `incomplete` (tasks the environment kept from running have no
  rows yet) or `interrupted`. Before its first row, every other table of the store that the run
  has no part of yet gets a part of no rows (`Store.create_tables`): whatever a run wrote,
  every table of the store is a dataset a reader can open, rows or none.
- The device check (`runners.preflight`): a device that fails it stops the run with one
  error (exit 3) before anything is written. A driver given a stand-in task body (tests and
  benches of the driver) runs no task on the device and skips it. Where this process runs the
  tasks itself (`--local`), it is warmed first (`warm`: what the first task would import), so
  that the check, like every task after it, is a child forked from it.
- The executor (`sweep.executors`) starts with the first task: a run with nothing left to run
  starts no Ray.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ground.schema import TABLES
from reports.locks import RunLock
from reports.store import (
    EMPTY_PREFIX,
    MODEL_ROW_TABLES,
    MODEL_SWEEP_TABLES,
    OP_ROW_TABLES,
    OP_SWEEP_TABLES,
    Store,
    check_run_id,
    new_run_id,
    utcnow,
)
from runners import containment
from runners.settings import DeviceChoice
from sweep.executors import Deferred, make_executor
from sweep.executors.protocol import OomFn, Planner, RunFn
from sweep.progress import SweepProgress
from sweep.settings import JobSettings, check_same_settings, software_versions
from sweep.stop_signals import resume_hint
from sweep.writer import RowWriter

Warn = Callable[[str], None]


@dataclass(frozen=True)
class Sweep:
    """What a sweep keeps in the store: the tables its runs write (where damaged parts are
    looked for), its runs table, the tables its writer fills (the committing one last), and
    the word its progress line starts with."""

    tables: tuple[str, ...]
    runs_table: str
    row_tables: tuple[str, ...]
    noun: str


MODEL_SWEEP = Sweep(MODEL_SWEEP_TABLES, "runs", MODEL_ROW_TABLES, "run")
OP_SWEEP = Sweep(OP_SWEEP_TABLES, "op_runs", OP_ROW_TABLES, "ops")


@dataclass
class Opened:
    """A run this driver now holds."""

    previous: dict[str, Any] | None  # the run's last row (None: a new run)
    damaged: int  # parts found damaged and put aside


@contextmanager
def locked_run(
    store: Store,
    run_id: str,
    *,
    tables: tuple[str, ...],
    runs_table: str,
    settings: dict[str, Any],
    warn: Warn,
) -> Iterator[Opened]:
    with RunLock(store, run_id):  # a second driver on this run is refused here
        damaged = store.damaged_parts(run_id, tables)
        for table, path, why in damaged:
            store.quarantine(path)
            name = path.rsplit("/", 1)[-1]
            then = (
                "it held no rows (the run's start writes a new one if the table has no other part)"
                if name.startswith(EMPTY_PREFIX)
                else "the tasks whose rows it held run again"
            )
            warn(
                f"warning: {table} part {name} of run {run_id} is damaged "
                f"({why}); put aside as .damaged-*, {then}"
            )
        previous = store.run(run_id, runs_table)
        if previous is not None:
            check_same_settings(previous, settings)
        yield Opened(previous=previous, damaged=len(damaged))


class RunRow:
    """`with RunRow(store, table, row) as run:` the run's row, `running` while the block runs;
    set `run.status` (`finished` / `incomplete`) before leaving, else it is `interrupted`."""

    def __init__(self, store: Store, table: str, row: dict[str, Any], previous: Any = None):
        self.store, self.table = store, table
        names = TABLES[table].names
        started = previous["started_at"] if previous else utcnow()
        self.row = {k: v for k, v in {**row, "started_at": started}.items() if k in names}
        self.status = "interrupted"

    def __enter__(self) -> RunRow:
        self.store.create_tables(self.row["run_id"], tuple(t for t in TABLES if t != self.table))
        self.store.write_run({**self.row, "status": "running"}, self.table)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.store.write_run({**self.row, "status": self.status}, self.table)


class RunSession:
    """`with RunSession(MODEL_SWEEP, job, device, ...) as session:` one run of a sweep.

    Entering checks the device (unless `check_device` is False), opens the store, names the run
    and holds it (`session.opened`: its last row on a resume, the damaged parts put aside).
    `start(row, total=...)` then writes the run row `running` and opens the writer, the progress
    line and the executor (`session.writer`, `session.progress`, `session.executor`: tasks run
    with `run_fn`, plan batches with `planner`). The driver's loop runs on those and calls
    `end(incomplete=...)`. Leaving closes the executor (and kills what dead workers' children
    left on this node), the progress line and the writer (its rows flushed), runs `on_written`
    once every row is in the store, then gives the run row its last word: what `end` said, or
    `interrupted` when the block or any of that raised."""

    def __init__(
        self,
        sweep: Sweep,
        job: JobSettings,
        device: DeviceChoice,
        *,
        settings: dict[str, Any],
        run_fn: RunFn,
        planner: Planner | None = None,
        on_oom: OomFn | None = None,
        check_device: bool = True,
        warm: Callable[[], None] | None = None,
        warn: Warn | None = None,
    ):
        self.sweep, self.job, self.device = sweep, job, device
        self.settings = settings  # every setting that changes a row (the resume check's)
        self.run_fn, self.planner, self.on_oom = run_fn, planner, on_oom
        self.check_device = check_device
        self.warm = warm  # what this process imports before it forks its first task's child
        self.warn = warn or _stderr
        self._stack = contextlib.ExitStack()
        self._ended: str | None = None
        self._on_written: Callable[[], None] | None = None

    def __enter__(self) -> RunSession:
        self.run_id = check_run_id(self.job.run_id) if self.job.run_id else new_run_id()
        if self.check_device:
            from runners.preflight import check_device
            from runners.supervisor import fresh_interpreter

            name, options = self.device.name, self.device.options()
            # the first line a run prints, before the check's seconds of imports in a fresh
            # interpreter (a minute on a loaded machine)
            _stderr(f"[{self.sweep.noun} {self.run_id}] checking the device {name} ...")
            if (
                self.warm is not None
                and self.job.executor == "local"
                and not fresh_interpreter(name, options)
            ):
                self.warm()  # as the first task would: the check then forks from it
            check_device(name, options)  # DeviceCheckError
        self.store = Store(self.job.store)
        self.opened = self._stack.enter_context(
            locked_run(
                self.store,
                self.run_id,
                tables=self.sweep.tables,
                runs_table=self.sweep.runs_table,
                settings=self.settings,
                warn=self.warn,
            )
        )  # a resume with other settings raises here, and the lock is let go
        return self

    def start(
        self,
        row: dict[str, Any],
        *,
        total: int,
        on_written: Callable[[], None] | None = None,
    ) -> None:
        """Write the run row (`row`: what this sweep's runs table says beyond the run id, the
        command, the software versions and the settings) and open the writer, the progress
        line (`total` tasks' worth of units to do) and the executor."""
        stack = self._stack
        run_row = stack.enter_context(
            RunRow(
                self.store,
                self.sweep.runs_table,
                {
                    "run_id": self.run_id,
                    "command": self.job.command,
                    **software_versions(self.device.build()),
                    **self.settings,
                    **row,
                },
                self.opened.previous,
            )
        )
        self._on_written = on_written

        def last_word(kind: Any, exc: Any, tb: Any) -> None:
            if kind is None and self._ended is not None:
                if self._on_written is not None:
                    self._on_written()
                run_row.status = self._ended

        stack.push(last_word)  # after the writer closes, before the run row's exit
        self.writer = stack.enter_context(
            RowWriter(self.store, self.run_id, self.job.flush_s, self.sweep.row_tables)
        )
        self.progress = stack.enter_context(
            SweepProgress(
                total, description=f"{self.sweep.noun} {self.run_id}", enabled=self.job.progress
            )
        )
        job = self.job
        slots = (job.num_cpus or os.cpu_count() or 1) if job.executor == "ray" else 1
        self.executor = Deferred(
            lambda: make_executor(
                job, run_fn=self.run_fn, planner=self.planner, on_oom=self.on_oom
            ),
            slots=slots,
        )
        stack.callback(self._close_executor)

    def _close_executor(self) -> None:
        try:
            self.executor.close()
        finally:
            containment.sweep_orphans()  # children of workers that died on this node

    def end(self, *, incomplete: bool) -> None:
        """The loop is done: the run row says `incomplete` (tasks the environment kept from
        running have no rows) or `finished` once the rows are in the store."""
        self._ended = "incomplete" if incomplete else "finished"

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool | None:
        if isinstance(exc, KeyboardInterrupt) and hasattr(self, "run_id"):
            # Ctrl-C or SIGTERM (`sweep.stop_signals`): the CLI's one line says how to go on
            setattr(exc, "resume", resume_hint(self.job.command, self.run_id, self.job.store))  # noqa: B010
        return self._stack.__exit__(kind, exc, tb)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
