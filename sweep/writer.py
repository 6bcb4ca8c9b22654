"""The writer: buffers finished models' rows and flushes them as one part per table.

A flush writes every buffered model at once (fallbacks and configs parts first, then the results
part of the same name that makes them count), so a model's stages are always in one part file.
The run loop calls `add` for each finished model and `tick` at least once a second, so rows reach
the store within `flush_s` of finishing even while nothing else finishes.
"""

from __future__ import annotations

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
        self.last = time.monotonic()
        self.parts = 0

    def add(
        self,
        results: list[dict[str, Any]],
        fallbacks: list[dict[str, Any]],
        configs: list[dict[str, Any]] | None = None,
    ) -> None:
        self.results += results
        self.fallbacks += fallbacks
        if configs:
            self.configs += configs
        if len(self.results) >= MAX_BUFFERED_ROWS:
            self.flush()
        else:
            self.tick()

    def tick(self) -> None:
        """Flush when the oldest buffered row has waited `flush_s`."""
        if time.monotonic() - self.last >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        if self.results:
            self.store.write_model_rows(self.run_id, self.results, self.fallbacks, self.configs)
            self.parts += 1
        self.results, self.fallbacks, self.configs = [], [], []
        self.last = time.monotonic()
