"""The writer: buffers finished tasks' rows and flushes them as one part per table.

Both sweeps write through it: the model sweep's `results` (with its `fallbacks` and `configs`),
the op sweep's `ops`. A flush writes every buffered row at once, one part per table under one
name, the committing table (the last of `tables`) last: the other parts count only once it
exists (`reports.store`), so what one task produced is always in one part of each table.
Flushes happen on a timer: a thread of the writer's own wakes up several times per `flush_s`
and writes what has waited `flush_s`, whatever the run loop is doing (blocked on a task run by
`--local`, waiting on a slow task at the tail of a sweep). So a finished task's rows reach the
store within `flush_s` (plus the time of one write) of being handed to the writer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from reports.store import MODEL_ROW_TABLES, Store

MAX_BUFFERED_ROWS = 2000  # rows of the committing table: past them, a flush at once


class RowWriter:
    def __init__(
        self, store: Store, run_id: str, flush_s: float, tables: tuple[str, ...] = MODEL_ROW_TABLES
    ):
        self.store, self.run_id, self.flush_s = store, run_id, flush_s
        self.tables = tables
        self.rows: dict[str, list[dict[str, Any]]] = {t: [] for t in tables}
        self.oldest: float | None = None  # when the oldest buffered row arrived
        self.parts = 0
        self.error: BaseException | None = None  # a failed timed flush, raised to the loop
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None

    def __enter__(self) -> RowWriter:
        self._timer = threading.Thread(target=self._run_timer, daemon=True, name="row-flush")
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.join()
            self._timer = None
        self.flush()

    def _run_timer(self) -> None:
        step = max(0.05, self.flush_s / 4)
        while not self._stop.wait(step):
            try:
                self.tick()
            except BaseException as exc:  # the store failed: the loop raises it next turn
                self.error = exc
                return

    def add(self, rows: Mapping[str, list[dict[str, Any]] | None]) -> None:
        """One finished task's rows, by table (all of them reach the store in one flush)."""
        with self._lock:
            if self.oldest is None:
                self.oldest = time.monotonic()
            for table, some in rows.items():
                if some:
                    self.rows[table] += some
            full = len(self.rows[self.tables[-1]]) >= MAX_BUFFERED_ROWS
        if full:
            self.flush()
        else:
            self.tick()

    def tick(self) -> None:
        """Flush when the oldest buffered row has waited `flush_s`; raise a timed flush's error."""
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        oldest = self.oldest
        if oldest is not None and time.monotonic() - oldest >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            if self.rows[self.tables[-1]]:
                self.store.write_parts(self.run_id, {t: self.rows[t] for t in self.tables})
                self.parts += 1
            self.rows = {t: [] for t in self.tables}
            self.oldest = None
