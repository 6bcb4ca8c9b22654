"""Dedup across a whole run with bounded driver memory.

Plans stream in; each planned model either opens a new task (its tiny config is new), joins the
open task of its group (queued or running), finds its group already finished and takes the
lead's outcome, or finds its task's content key among the outcomes earlier runs offered
(`sweep.reuse`) and takes that one (its rows then say `reused_from`). Open tasks live in memory
(their number is bounded by the run loop's queue); finished groups (the lead and its outcome),
the outcomes offered for reuse and the (original, shrunk) config pairs already written go to an
SQLite file in a temporary folder, so the driver's memory does not grow with the catalog.
"""

from __future__ import annotations

import pickle
import shutil
import sqlite3
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_configs.spec import TinySpec
from reports.store import Store
from runners.outcome import ModelOutcome
from runners.settings import ModelSettings
from sweep.plan import Planned, Task
from sweep.reuse import Reusable


@dataclass
class Finished:
    """A group that already ran: who ran it, what came out, on which attempt, and the earlier
    run it was copied from (None: it ran in this run)."""

    lead: str
    outcome: ModelOutcome
    attempt: int
    reused_from: str | None = None


def group_key(key: str, dtype: str) -> str:
    """A dedup group: a shrunk config's hash (or a model id) at one dtype."""
    return f"{key}@{dtype}"


class Ledger:
    """What the run loop knows about groups. `dedup=False` makes every model its own group."""

    def __init__(
        self,
        *,
        dedup: bool = True,
        folder: str | Path | None = None,
        key_of: Callable[[TinySpec, str], str] | None = None,
    ):
        self.dedup = dedup
        self.key_of = key_of  # a task's content key (sweep.reuse; its spec and dtype)
        self._dir = Path(tempfile.mkdtemp(prefix="hfsweep-ledger-", dir=folder))
        self._db = sqlite3.connect(self._dir / "ledger.sqlite", isolation_level=None)
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute("PRAGMA cache_size = -8192")  # 8 MiB of pages at most
        self._db.execute(
            "CREATE TABLE finished (key TEXT PRIMARY KEY, lead TEXT, attempt INT, outcome BLOB, "
            "reused_from TEXT)"
        )
        # earlier runs' outcomes by task content key, offered before the run (sweep.reuse)
        self._db.execute(
            "CREATE TABLE reusable (key TEXT PRIMARY KEY, origin TEXT, attempt INT, outcome BLOB)"
        )
        self._db.execute(
            "CREATE TABLE pairs (original TEXT, shrunk TEXT, PRIMARY KEY (original, shrunk))"
        )
        self.open: dict[str, Task] = {}  # queued or running
        self.unique = 0  # tasks opened so far
        self.offered = 0  # earlier outcomes offered for reuse
        self.reused = 0  # groups whose outcome was copied from an earlier run

    def close(self) -> None:
        self._db.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def admit(
        self, planned: Planned, dtype: str, settings: ModelSettings
    ) -> Task | Finished | None:
        """A new Task to queue (at `dtype`, with its `settings`), the Finished group the model
        belongs to (write its rows now), or None when it joined an open task (its rows come
        with the lead's). A group is a shrunk config at one dtype."""
        assert planned.spec is not None
        key = group_key(planned.spec.hash if self.dedup else planned.entry.model_id, dtype)
        task = self.open.get(key)
        if task is not None:
            task.members.append(planned)
            return None
        row = self._db.execute(
            "SELECT lead, attempt, outcome, reused_from FROM finished WHERE key = ?", (key,)
        ).fetchone()
        if row is not None:
            return Finished(row[0], pickle.loads(zlib.decompress(row[2])), row[1], row[3])
        copied = self._reuse(planned, key, dtype)
        if copied is not None:
            return copied
        task = Task(spec=planned.spec, members=[planned], key=key, dtype=dtype, settings=settings)
        self.open[key] = task
        self.unique += 1
        return task

    def _reuse(self, planned: Planned, key: str, dtype: str) -> Finished | None:
        """The group's outcome copied from an earlier run, with this model as its lead here."""
        if self.key_of is None or not self.offered:
            return None
        assert planned.spec is not None
        row = self._db.execute(
            "SELECT origin, attempt, outcome FROM reusable WHERE key = ?",
            (self.key_of(planned.spec, dtype),),
        ).fetchone()
        if row is None:
            return None
        lead = planned.entry.model_id
        outcome = pickle.loads(zlib.decompress(row[2]))
        self._finished(key, lead, row[1], outcome, reused_from=row[0])
        self.reused += 1
        return Finished(lead, outcome, row[1], row[0])

    def abandon(self, task: Task) -> None:
        """The task was given up (system faults): its group is neither open nor finished, so a
        member that arrives later opens it again."""
        self.open.pop(task.key, None)

    def finish(self, task: Task, outcome: ModelOutcome, attempt: int) -> None:
        """The task ran: members that arrive later take this outcome from here."""
        self.open.pop(task.key, None)
        self._finished(task.key, task.lead.entry.model_id, attempt, outcome)

    def _finished(
        self,
        key: str,
        lead: str,
        attempt: int,
        outcome: ModelOutcome,
        *,
        reused_from: str | None = None,
    ) -> None:
        blob = zlib.compress(pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))
        self._db.execute(
            "INSERT OR REPLACE INTO finished VALUES (?, ?, ?, ?, ?)",
            (key, lead, attempt, blob, reused_from),
        )

    def resume(self, store: Store, run_id: str) -> int:
        """Remember the groups an earlier attempt of this run already ran (or reused), from its
        rows (one part at a time), so a resumed run does not run them again; returns how many."""
        from sweep.reuse import lead_outcomes

        if not self.dedup:
            return 0
        seeded = 0
        for model, rows, outcome in lead_outcomes(store, run_id):
            first = rows[0]
            self._finished(
                group_key(first["shrunk_config_hash"], first["dtype"]),
                model,
                first["attempt"] or 1,
                outcome,
                reused_from=first.get("reused_from"),
            )
            seeded += 1
        return seeded

    def offer(self, reusable: Reusable) -> bool:
        """An earlier run's task outcome this run may copy (the first offered per key wins:
        offer newest first); True when it was new."""
        blob = zlib.compress(pickle.dumps(reusable.outcome, protocol=pickle.HIGHEST_PROTOCOL))
        cur = self._db.execute(
            "INSERT OR IGNORE INTO reusable VALUES (?, ?, ?, ?)",
            (reusable.key, reusable.origin, reusable.attempt, blob),
        )
        self.offered += cur.rowcount
        return cur.rowcount == 1

    def first_pair(self, planned: Planned) -> bool:
        """True the first time this run meets the model's (original, shrunk) config pair."""
        if planned.spec is None:
            return False
        cur = self._db.execute(
            "INSERT OR IGNORE INTO pairs VALUES (?, ?)",
            (planned.config_hash or "", planned.spec.hash),
        )
        return cur.rowcount == 1
