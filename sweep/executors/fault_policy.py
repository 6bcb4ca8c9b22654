"""The fault policy both sweeps share: what stops a task, how often it is retried, and when the
run stops.

Anything that stops a task (the environment failing in the child, a worker or node lost, a
lost object, a runtime env that cannot be set up, a task that shows no sign of life) is a
system fault: the executor retries the task `retries` times, each after `backoff_s`, then gives
it up (`Abandoned`): what it covers gets no rows, so a rerun with the same run id retries it.
`GiveUp` stops the run with one error when task after task of one kind is given up, and
`gave_up_error` is the one error for what a finished run has no rows for. A model's or a
sample's own failure is never a fault: the body returns it as data, and it is never retried.
"""

from __future__ import annotations

from collections import Counter

from ground.errors import SystemFaultError, first_line
from sweep.executors.protocol import Abandoned

RETRY_BACKOFF_S = 1.0  # before the first retry; doubled for each further one (at most 30 s)
GIVE_UP_AFTER = 3  # tasks of one kind given up in a row (each after its retries): stop the run


def backoff_s(attempt: int) -> float:
    """How long to wait before attempt `attempt + 1`."""
    return min(30.0, RETRY_BACKOFF_S * 2 ** (attempt - 1))


def describe_failure(exc: BaseException) -> str:
    """`Type: first line` of what stopped a task (a Ray task error names its cause)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    return f"{type(exc).__name__}: {first_line(exc)}"


class GiveUp:
    """The tasks a run gave up (no rows: a rerun runs them), and the rule that stops the run:
    `GIVE_UP_AFTER` tasks of one kind given up in a row, each after its retries."""

    def __init__(self, noun: str = "model"):
        self.noun = noun  # what a run task is, in the error
        self.names: list[str] = []
        self.causes: dict[str, str] = {}  # what stopped them -> the first name it hit
        self._streak: Counter[str] = Counter()

    def ran(self, kind: str) -> None:
        """A task of `kind` came back: the streak is broken."""
        self._streak[kind] = 0

    def add(self, event: Abandoned) -> None:
        self.names += event.models
        self.causes.setdefault(event.cause, event.models[0] if event.models else "")
        self._streak[event.kind] += 1
        if self._streak[event.kind] >= GIVE_UP_AFTER:
            raise SystemFaultError(
                f"the environment keeps failing: {self._streak[event.kind]} "
                f"{self.noun if event.kind == 'run' else 'plan'} tasks in a row could not run "
                f"after {event.attempts} attempts each (last: {event.cause})",
                hint="fix the machine (device, packages, Ray, store), then rerun the same "
                "command with the same --run-id: what has no rows runs then",
            )


def gave_up_error(
    run_id: str, names: list[str], causes: dict[str, str], what: tuple[str, str]
) -> SystemFaultError:
    """The one error for what the environment kept from running (it has no rows);
    `what`: (one, several) of what the names are."""
    n = len(names)
    listed = "; ".join(f"{cause} (first: {name})" for cause, name in causes.items())
    return SystemFaultError(
        f"{n} {what[0] if n == 1 else what[1]} of run {run_id} got no rows: the environment "
        f"kept failing after retries: {listed}",
        hint=f"rerun the same command (--run-id {run_id}): only those run again",
    )
