"""What both drivers do around their loop: one driver per run, damaged parts put aside, a resume
checked against the settings the run started with, and the run's row kept up to date.

- `locked_run`: holds the run (`reports.locks.RunLock`: a second driver is refused with who
  holds it), then finds the parts of the sweep's tables that do not read whole (truncated,
  corrupted) and puts them aside as `.damaged-*` (never read as data: what they held runs
  again), then compares the settings of a resume with those of the run's last row
  (`sweep.settings.check_same_settings`: every setting that changes a row).
- `RunRow`: the run's row in its runs table, written `running` at the start and, however the
  driver leaves, `finished`, `incomplete` (tasks the environment kept from running have no
  rows yet) or `interrupted`. Before its first row, every other table of the store that the run
  has no part of yet gets a part of no rows (`Store.create_tables`): whatever a run wrote,
  every table of the store is a dataset a reader can open, rows or none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from reports.locks import RunLock
from reports.schema import TABLES
from reports.store import Store, utcnow
from sweep.settings import check_same_settings

Warn = Callable[[str], None]


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
            warn(
                f"warning: {table} part {path.rsplit('/', 1)[-1]} of run {run_id} is damaged "
                f"({why}); put aside as .damaged-*, the tasks whose rows it held run again"
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
