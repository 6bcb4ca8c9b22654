"""What each rank of a group is doing, where its launcher can read it when the group fails.

One slot per rank in a shared-memory board the launcher creates before it starts the ranks.
A rank writes its phase (`phase("the DDP step")`), and, where its device's process group says
so (`runners.devices.collective_log`), the collective it is inside until that returns; the
launcher reads the slots of the ranks it stops, so that a row says "rank 0 was waiting in
c10d::allreduce" rather than only "rank 0 was stopped". Whether a rank's slot can say it waits
(`exact`) is its device's: torch's own groups are not followed into their collectives.
No torch import.
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass

SLOT_BYTES = 120
SETUP, RUNNING, WAITING = "setup", "running", "waiting"
IDLE = "idle"  # a rank of the warm group between stages


@dataclass(frozen=True)
class RankState:
    exact: bool  # the slot follows the rank into its collectives
    state: str  # setup | running | waiting | idle
    text: str  # the phase, or the collective it waits in

    def describe(self) -> str:
        if self.state == WAITING:
            return f"waiting in {self.text}"
        if self.state == IDLE:
            return self.text or "between stages"
        if self.state == SETUP:
            return f"still setting up ({self.text})" if self.text else "still setting up"
        return f"running {self.text}" if self.text else "running"


class Board:
    """The slots of one group (created in the launcher, inherited by its ranks)."""

    def __init__(self, ranks: int):
        self.ranks = ranks
        self._cells = mp.RawArray("c", ranks * SLOT_BYTES)

    def write(self, rank: int, exact: bool, state: str, text: str) -> None:
        data = f"{int(exact)}|{state}|{text}".encode()[: SLOT_BYTES - 1]
        start = rank * SLOT_BYTES
        self._cells[start : start + SLOT_BYTES] = data.ljust(SLOT_BYTES, b"\0")

    def read(self, rank: int) -> RankState:
        start = rank * SLOT_BYTES
        raw = (
            bytes(self._cells[start : start + SLOT_BYTES])
            .split(b"\0", 1)[0]
            .decode(errors="replace")
        )
        exact, _, rest = raw.partition("|")
        state, _, text = rest.partition("|")
        return RankState(exact == "1", state or SETUP, text)


class RankStatus:
    """This rank's slot (in the rank's process): its phase, and its collectives when exact."""

    def __init__(self, board: Board, rank: int):
        self.board, self.rank = board, rank
        self.exact = False
        self._phase = ""

    def phase(self, text: str, state: str = RUNNING) -> None:
        self._phase = text
        self.board.write(self.rank, self.exact, state, text)

    def collective(self, op: str | None) -> None:
        """A `collective_log` watcher: inside `op` until it returns (None)."""
        if op is None:
            self.board.write(self.rank, self.exact, RUNNING, self._phase)
        else:
            self.board.write(self.rank, self.exact, WAITING, op)


_CURRENT: list[RankStatus] = []


def attach(status: RankStatus) -> None:
    """Make `status` this process's (a rank's)."""
    _CURRENT[:] = [status]


def phase(text: str, state: str = RUNNING) -> None:
    """Say what this rank is doing (a no-op outside a rank)."""
    for status in _CURRENT:
        status.phase(text, state)
