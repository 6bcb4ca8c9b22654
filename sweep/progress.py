"""Progress on stderr: a rich bar with counts and ETA on a terminal, plain periodic lines elsewhere."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any


class SweepProgress:
    """Counts models as they finish, by outcome (pass / fail / skip)."""

    def __init__(self, total: int, *, description: str = "sweep", enabled: bool | None = None):
        self.total = total
        self.done = 0
        self.counts: Counter[str] = Counter()
        self.description = description
        self.interactive = sys.stderr.isatty() if enabled is None else enabled
        self._last_line = 0.0
        self._printed_at = -1
        self._start = time.monotonic()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> SweepProgress:
        if self.interactive:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[counts]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=self.total, counts="")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self.total and self._printed_at != self.done:
            self._print_line(force=True)

    def _counts_text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.counts.items() if v)

    def advance(self, outcome: str, n: int = 1) -> None:
        self.done += n
        self.counts[outcome] += n
        if self._bar is not None:
            self._bar.update(self._task, advance=n, counts=self._counts_text())
        else:
            self._print_line()

    def _print_line(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_line < 10 and self.done < self.total:
            return
        self._last_line = now
        self._printed_at = self.done
        elapsed = now - self._start
        eta = (elapsed / self.done) * (self.total - self.done) if self.done else 0.0
        print(
            f"[{self.description}] {self.done}/{self.total} {self._counts_text()} "
            f"elapsed {elapsed:.0f}s eta {eta:.0f}s",
            file=sys.stderr,
            flush=True,
        )
