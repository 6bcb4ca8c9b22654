"""The writer: buffers finished models' rows and flushes them as one part per table.

A flush writes every buffered model at once (fallbacks and configs parts first, then the results
part of the same name that makes them count), so a model's stages are always in one part file.
Flushes happen on a timer: a thread of the writer's own wakes up several times per `flush_s`
and writes what has waited `flush_s`, whatever the run loop is doing (blocked on a model run by
`--local`, waiting on a slow task at the tail of a sweep). So a finished model's rows reach the
store within `flush_s` (plus the time of one write) of being handed to the writer.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from reports.store import Store

MAX_BUFFERED_ROWS = 2000


class RowWriter:
    def __init__(self, store: Store, run_id: str, flush_s: float):
        self.store, self.run_id, self.flush_s = store, run_id, flush_s
        self.results: list[dict[str, Any]] = []
        self.fallbacks: list[dict[str, Any]] = []
        self.configs: list[dict[str, Any]] = []
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

    def add(
        self,
        results: list[dict[str, Any]],
        fallbacks: list[dict[str, Any]],
        configs: list[dict[str, Any]] | None = None,
    ) -> None:
        with self._lock:
            if self.oldest is None:
                self.oldest = time.monotonic()
            self.results += results
            self.fallbacks += fallbacks
            if configs:
                self.configs += configs
            full = len(self.results) >= MAX_BUFFERED_ROWS
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
            if self.results:
                self.store.write_model_rows(self.run_id, self.results, self.fallbacks, self.configs)
                self.parts += 1
            self.results, self.fallbacks, self.configs = [], [], []
            self.oldest = None
