"""Dedup across a whole run with bounded driver memory.

Plans stream in; each planned model either opens a new task (its tiny config is new), joins the
open task of its group (queued or running), or finds its group already finished and takes the
lead's outcome. Open tasks live in memory (their number is bounded by the run loop's queue);
finished groups (the lead and its outcome) and the (original, shrunk) config pairs already
written go to an SQLite file in a temporary folder, so the driver's memory does not grow with
the catalog.
"""

from __future__ import annotations

import pickle
import shutil
import sqlite3
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reports.store import Store
from runners.outcome import ModelOutcome, StageResult
from sweep.plan import Planned, Task


@dataclass
class Finished:
    """A group that already ran: who ran it, what came out, on which attempt."""

    lead: str
    outcome: ModelOutcome
    attempt: int


class Ledger:
    """What the run loop knows about groups. `dedup=False` makes every model its own group."""

    def __init__(self, *, dedup: bool = True, folder: str | Path | None = None):
        self.dedup = dedup
        self._dir = Path(tempfile.mkdtemp(prefix="hfsweep-ledger-", dir=folder))
        self._db = sqlite3.connect(self._dir / "ledger.sqlite", isolation_level=None)
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute("PRAGMA cache_size = -8192")  # 8 MiB of pages at most
        self._db.execute(
            "CREATE TABLE finished (key TEXT PRIMARY KEY, lead TEXT, attempt INT, outcome BLOB)"
        )
        self._db.execute(
            "CREATE TABLE pairs (original TEXT, shrunk TEXT, PRIMARY KEY (original, shrunk))"
        )
        self.open: dict[str, Task] = {}  # queued or running
        self.unique = 0  # tasks opened so far

    def close(self) -> None:
        self._db.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def admit(self, planned: Planned) -> Task | Finished | None:
        """A new Task to queue, the Finished group the model belongs to (write its rows now), or
        None when it joined an open task (its rows come with the lead's)."""
        assert planned.spec is not None
        key = planned.spec.hash if self.dedup else planned.entry.model_id
        task = self.open.get(key)
        if task is not None:
            task.members.append(planned)
            return None
        row = self._db.execute(
            "SELECT lead, attempt, outcome FROM finished WHERE key = ?", (key,)
        ).fetchone()
        if row is not None:
            return Finished(row[0], pickle.loads(zlib.decompress(row[2])), row[1])
        task = Task(spec=planned.spec, members=[planned], key=key)
        self.open[key] = task
        self.unique += 1
        return task

    def abandon(self, task: Task) -> None:
        """The task was given up (system faults): its group is neither open nor finished, so a
        member that arrives later opens it again."""
        self.open.pop(task.key, None)

    def finish(self, task: Task, outcome: ModelOutcome, attempt: int) -> None:
        """The task ran: members that arrive later take this outcome from here."""
        self.open.pop(task.key, None)
        self._finished(task.key, task.lead.entry.model_id, attempt, outcome)

    def _finished(self, key: str, lead: str, attempt: int, outcome: ModelOutcome) -> None:
        blob = zlib.compress(pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))
        self._db.execute(
            "INSERT OR REPLACE INTO finished VALUES (?, ?, ?, ?)", (key, lead, attempt, blob)
        )

    def resume(self, store: Store, run_id: str) -> int:
        """Remember the groups an earlier attempt of this run already ran, from its rows (one
        part at a time), so a resumed run does not run them again; returns how many."""
        if not self.dedup:
            return 0
        fields = set(StageResult.__dataclass_fields__) - {"fallbacks"}
        seeded = 0
        fallback_parts = {p.rsplit("/", 1)[-1]: p for p in store.part_files("fallbacks", run_id)}
        for part in store.part_files("results", run_id):
            rows = store.dataset("results", [part]).to_table().to_pylist()
            leads: dict[str, list[dict[str, Any]]] = {}
            for r in rows:
                if r["dedup_of"] is None and r["shrunk_config_hash"]:
                    leads.setdefault(r["model_id"], []).append(r)
            if not leads:
                continue
            ops: dict[tuple[str, str], list[dict[str, Any]]] = {}
            fb = fallback_parts.get(part.rsplit("/", 1)[-1])
            if fb:
                for f in store.dataset("fallbacks", [fb]).to_table().to_pylist():
                    ops.setdefault((f["model_id"], f["stage"]), []).append(
                        {k: f[k] for k in ("op", "count", "bytes_h2d", "bytes_d2h", "source")}
                    )
            for model, stage_rows in leads.items():
                stages = [
                    StageResult(
                        **{k: v for k, v in r.items() if k in fields},
                        fallbacks=ops.get((model, r["stage"]), []),
                    )
                    for r in stage_rows
                ]
                first = stage_rows[0]
                outcome = ModelOutcome(stages, first["param_count"], first["worker"])
                self._finished(first["shrunk_config_hash"], model, first["attempt"] or 1, outcome)
                seeded += 1
        return seeded

    def first_pair(self, planned: Planned) -> bool:
        """True the first time this run meets the model's (original, shrunk) config pair."""
        if planned.spec is None:
            return False
        cur = self._db.execute(
            "INSERT OR IGNORE INTO pairs VALUES (?, ?)",
            (planned.config_hash or "", planned.spec.hash),
        )
        return cur.rowcount == 1
