"""Progress on stderr: a rich bar with counts and ETA on a terminal, plain periodic lines elsewhere.

Planning (resolving and shrinking each model) shows as it goes, as running does: the line
says `planned P/T` until every model is planned, and a plain line is printed at the start, so
that a run shows it is alive before its first model finishes (on a 1,000-model run, planning
is minutes of work before any model has a result)."""

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
        self.planned = 0  # models planned so far (their tasks built, or decided at planning)
        self._planning = False  # a sweep that plans (the model sweep) has said so
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
        elif self.total:
            self._print_line(force=True)  # alive from the start, before any model is planned
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self.total and self._printed_at != self.done:
            self._print_line(force=True)

    def _counts_text(self) -> str:
        counts = [f"{k}={v}" for k, v in self.counts.items() if v]
        if self._planning and self.planned < self.total:
            counts.insert(0, f"planned {self.planned}/{self.total}")
        return " ".join(counts)

    def plan_done(self, n: int) -> None:
        """`n` more models planned (whatever their outcome)."""
        self._planning = True
        self.planned = min(self.total, self.planned + n)
        if self._bar is not None:
            self._bar.update(self._task, counts=self._counts_text())
        else:
            self._print_line()

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
        eta = (
            f"{(elapsed / self.done) * (self.total - self.done):.0f}s" if self.done else "-"
        )  # no model finished yet: nothing to estimate from
        counts = self._counts_text()
        print(
            f"[{self.description}] {self.done}/{self.total} {counts}{' ' if counts else ''}"
            f"elapsed {elapsed:.0f}s eta {eta}",
            file=sys.stderr,
            flush=True,
        )
