"""What a rank's collectives did during one distributed stage: op, calls and bytes.

A device's process group reports each collective here (`in_collective`): the logs recording
now count it, and the watchers (the rank's status, which its launcher reads when the group
fails) learn that the rank is inside it until it returns. Torch's own process groups (gloo,
nccl) report through the c10d hooks every `ProcessGroup` calls (`Device.record_collectives`).
No torch import: the registry and the group launcher read it without one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

PREFIX = "c10d::"  # a collective's name in rows: `c10d::allreduce`


@dataclass
class CollectiveCalls:
    calls: int = 0
    bytes: int = 0  # the input bytes this rank handed to the collective


@dataclass
class CollectiveLog:
    """Collectives by name (`c10d::allreduce`): calls and bytes."""

    ops: dict[str, CollectiveCalls] = field(default_factory=dict)

    def record(self, op: str, nbytes: int) -> None:
        entry = self.ops.setdefault(op, CollectiveCalls())
        entry.calls += 1
        entry.bytes += nbytes

    def rows(self) -> list[dict[str, int | str]]:
        return [
            {"op": op, "calls": e.calls, "bytes": e.bytes} for op, e in sorted(self.ops.items())
        ]


_ACTIVE: list[CollectiveLog] = []
# Callbacks told the collective a rank is in (its name), then None once it returned.
Watcher = Callable[[str | None], None]
_WATCHERS: list[Watcher] = []


@contextlib.contextmanager
def collecting(log: CollectiveLog) -> Iterator[CollectiveLog]:
    """Make `log` count every collective while the block runs."""
    _ACTIVE.append(log)
    try:
        yield log
    finally:
        _ACTIVE.remove(log)


def watch(watcher: Watcher) -> None:
    """Tell `watcher` of every collective this process enters and leaves, from now on."""
    _WATCHERS.append(watcher)


def record(op: str, nbytes: int) -> None:
    """Count one collective `op` (`c10d::name`) handing `nbytes` input bytes."""
    for log in _ACTIVE:
        log.record(op, nbytes)


@contextlib.contextmanager
def in_collective(op: str, nbytes: int) -> Iterator[None]:
    """Around one collective of a device's process group (`op`: `c10d::name`): counted, and
    the watchers know the rank is inside it until it returns."""
    record(op, nbytes)
    for watcher in _WATCHERS:
        watcher(op)
    try:
        yield
    finally:
        for watcher in _WATCHERS:
            watcher(None)
