"""Progress of one model through its stages, on stderr, for `hfsweep check`.

On a terminal: a spinner naming what runs now (importing, planning, setting the device up, a
stage) with its seconds so far, and a line per stage as it finishes. Elsewhere (a log, a pipe):
a line per phase as it starts (flushed: a pipe never waits seconds in silence), a line per
finished stage, and a "still ..." line when one phase runs past `heartbeat_s`.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

from ground import fmt


class StageProgress:
    """Phases and stage results of one model, as they happen."""

    def __init__(
        self,
        *,
        stream: TextIO | None = None,
        interactive: bool | None = None,
        heartbeat_s: float = 30.0,
        label: str = "check",
    ):
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.heartbeat_s = heartbeat_s
        self.label = label
        self.phase_text = ""
        self._since = time.monotonic()
        self._lock = threading.Lock()
        self._live: Any = None
        self._spinner: Any = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self.lines: list[str] = []  # what was printed (tests read it)

    def __enter__(self) -> StageProgress:
        if self.interactive:
            from rich.console import Console
            from rich.live import Live
            from rich.spinner import Spinner

            self._spinner = Spinner("dots", text="")
            self._live = Live(
                self,
                console=Console(file=self.stream, force_terminal=True),
                refresh_per_second=4,
                transient=True,
            )
            self._live.start()
        elif self.heartbeat_s > 0:
            self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="heartbeat")
            self._beat.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._live is not None:
            self._live.stop()
        if self._beat is not None:
            self._beat.join(timeout=1)

    def __rich__(self) -> Any:  # the live line, redrawn four times a second
        with self._lock:
            text = f"{self.phase_text} ({time.monotonic() - self._since:.0f} s)"
        self._spinner.update(text=text)
        return self._spinner

    def phase(self, text: str, *, announce: bool = True) -> None:
        """What runs now (replaces the previous phase); off a terminal also a line, unless
        `announce` is False (a stage's own start: its result line follows)."""
        with self._lock:
            self.phase_text = text
            self._since = time.monotonic()
        if announce and self._live is None:
            self._print(f"{text} ...")

    def stage_done(
        self, result: Any, next_stage: str | None = None, *, label: str | None = None
    ) -> None:
        """A stage's result (a StageResult or a row dict) as it arrives; `next_stage` runs next;
        `label` follows the stage's name (`with experts_implementation=batched_mm`)."""
        row = result if isinstance(result, dict) else result.__dict__
        detail = row.get("failing_op") or fmt.clip(fmt.first_line(row.get("error_message")), 90)
        if row["status"] == "pass" and row.get("fallback_op_count"):
            detail = f"{fmt.counted(row['fallback_op_count'], 'op')} fell back to the CPU"
        secs = fmt.seconds(row.get("duration_s")) if row.get("duration_s") is not None else ""
        text = f"{row['stage']:<10} {row['status']:<13} {secs:>8}  {detail}".rstrip()
        self._print(f"{text} ({label})" if label else text)
        if next_stage is not None:
            self.phase(f"running {next_stage}", announce=False)

    def _print(self, text: str) -> None:
        self.lines.append(text)
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(f"[{self.label}] {text}", file=self.stream, flush=True)

    def _heartbeat(self) -> None:
        last = 0.0
        while not self._stop.wait(min(1.0, self.heartbeat_s)):
            with self._lock:
                since, text = self._since, self.phase_text
            now = time.monotonic()
            if text and now - max(since, last) >= self.heartbeat_s:
                print(
                    f"[{self.label}] still {text} ({now - since:.0f} s)",
                    file=self.stream,
                    flush=True,
                )
                last = now
