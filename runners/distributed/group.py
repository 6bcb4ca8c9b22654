"""The warm group: `--world-size` supervised rank processes that run every distributed stage of
every model their process takes, started once and ended as one.

- **Start.** Each rank is a `runners.supervisor.Child` (forked from a process that never set up
  a device, else spawned), with its memory budget, leading its own process group. The ranks
  rendezvous on loopback through a TCP store this launcher serves on a port the kernel picks
  for it (held until the group ends), so concurrent groups never share a store or a port. A
  rank sets its device up, imports the stages and joins the process group once (`rank.py`).
  The group starts with its first stage, when its first request is already in each rank's pipe.
- **Each stage.** The launcher sends every rank the request (the model, the run's settings, the
  stage) through a pipe of its own, gives every rank the model's deadline on its own time
  again, and reads every rank's messages as they come (its result, or its failure) and watches
  for deaths and deadlines. Once a rank fails, each other rank runs on until it ends or is seen
  waiting for a peer (in a collective, or joining the group), where its device says so
  (`status.py`; elsewhere at once); then the whole group is killed: no rank outlives it.
- **Kept or ended.** The group stays warm for the next stage (of this model or the next) only
  when every rank passed or skipped the stage and left the group as it found it (`rank.py`'s
  `left_behind`); any other end (a failure, a timeout, a death, an environment fault) ends the
  whole group, and the next stage gets a fresh one.
- **One result.** The stage's status is its cause's (`fail`, `fail_accuracy`, `oom`, `timeout`,
  `crash`): a rank that died before one that failed (its peers' connections closed), one that
  failed before one that ran out of time, a rank out of time while waiting for a peer last;
  with that rank (`failed_rank`) and, in the message, what every other rank did. A rank killed
  from outside (SIGKILL that was not the OOM killer), or one whose set-up failed, is the
  environment's: its supervisor raises `EnvironmentFault` as soon as it sees it, and the group
  is ended (the task is retried, nothing recorded). Otherwise the ranks' results are merged:
  fallbacks summed per op, collectives per op (calls per rank, bytes over ranks), each rank's
  peak device memory, the largest error.
- **Held per process.** The process that runs models (a Ray worker, the local driver) holds one
  warm group (`warm_group`) for the settings it runs with; other settings end it and start
  another; it ends with the process (at exit, or with the process's death: each rank dies
  with its parent).
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from ground.schema import Stage, Status
from model_configs.spec import TinySpec
from runners import faults
from runners import stages as stage_registry
from runners.distributed.verdict import weakest
from runners.outcome import StageResult
from runners.settings import ModelSettings
from runners.signature import error_signature, op_in_message, short_message
from runners.stages.distributed.status import SETUP, WAITING, Board, RankState
from runners.supervisor import JOIN_S, POLL_S, Child, Ending, Kind, context_of

HOST = "127.0.0.1"
# how long a failed group's other ranks are watched for an exit already under way
EXIT_GRACE_S = 1.0


@dataclass
class RankEnd:
    """How one rank of the group ended."""

    rank: int
    result: StageResult | None = None  # what the rank reported for the stage
    error: tuple[str, str] | None = None  # an exception that escaped it after set-up
    ending: Ending | None = None  # it ended without a word: past its deadline, or dead
    stopped: str | None = None  # killed with the group: what it was doing then
    order: int = 0  # when its end was seen (failures are told in this order)
    state: RankState | None = None  # its status when it ended
    left: list[str] | None = None  # what its stage left in the group (empty: nothing)

    @property
    def cause_rank(self) -> int:
        """How likely its end caused the others' (lowest first): a death (its peers then see
        their connections close), a failure of its own, running out of time, running out of
        time while waiting for another rank in a collective."""
        if self.ending is None:
            return 1
        if not self.ending.timed_out:
            return 0
        return 3 if self.victim else 2

    @property
    def victim(self) -> bool:
        """Past its deadline while waiting in a collective: it waited for another rank."""
        return bool(
            self.ending is not None
            and self.ending.timed_out
            and self.state is not None
            and self.state.state == WAITING
        )

    @property
    def over(self) -> bool:
        return bool(self.result is not None or self.error or self.ending is not None)

    @property
    def failed(self) -> bool:
        if self.result is not None:
            return self.result.status not in (Status.PASS.value, Status.SKIP.value)
        return bool(self.error or self.ending is not None)


@contextlib.contextmanager
def rendezvous_store() -> Iterator[int]:
    """A TCP store on loopback for one group, on a port the kernel picks; yields the port."""
    import torch.distributed as dist

    store = dist.TCPStore(HOST, 0, is_master=True, wait_for_workers=False)
    try:
        yield int(store.port)
    finally:
        del store


def group_key(settings: ModelSettings, spawn: bool) -> tuple[Any, ...]:
    """What a warm group's ranks were started with: a stage asking for other settings gets
    another group."""
    return (
        repr(settings.device),
        settings.world_size,
        settings.threads,
        settings.memory_limit,
        settings.timeout_s,
        settings.compile_backend,
        spawn,
    )


class WarmGroup:
    """The ranks of one group, kept between stages while they pass (see the module)."""

    def __init__(self, settings: ModelSettings, *, spawn: bool):
        self.settings, self.spawn = settings, spawn
        self.key = group_key(settings, spawn)
        self.world = int(settings.world_size or 1)
        self.board = Board(self.world)
        self.children: list[Child] = []
        self.pipes: list[Any] = []
        self.starts = 0  # how many times its ranks were started
        self._held: contextlib.ExitStack | None = None

    @property
    def warm(self) -> bool:
        return bool(self.children)

    def run(self, spec: TinySpec, settings: ModelSettings, stage: Stage) -> StageResult:
        """`stage` of `spec` on the group (started if it is not warm); one result. Raises
        `EnvironmentFault` when what ended the group was not the model."""
        if group_key(settings, self.spawn) != self.key:
            raise ValueError("a warm group runs the settings it was started with")
        started = time.monotonic()
        try:
            if not self.warm:
                self._start()
            arm = _deadlines(spec, settings, self.children)
            for child, pipe in zip(self.children, self.pipes, strict=True):
                child.doing = child.stage = stage.value  # what its faults and death say
                child.watch_oom()
                with contextlib.suppress(OSError):  # a rank that died: its death is read next
                    pipe.send((spec, settings, stage.value))
            ends = _supervise(self.children, self.board, arm)
        except BaseException:
            self.close()
            raise
        if stage_registry.declarations()[stage].ends_group or not all(
            e.result is not None and not e.failed and e.left == [] for e in ends
        ):
            # a failure ends the group; so does a stage of Hugging Face's trainers, which
            # leaves library state in its ranks (the device presented to transformers and
            # accelerate, accelerate's process-wide state) that no later stage may inherit
            self.close()
        return merge(stage, settings, ends, time.monotonic() - started)

    def _start(self) -> None:
        from runners.distributed.rank import rank_main

        held = contextlib.ExitStack()
        self._held = held
        port = held.enter_context(rendezvous_store())
        pipes = context_of(self.spawn)
        self.board = Board(self.world)
        self.starts += 1
        for rank in range(self.world):
            requests, pipe = pipes.Pipe(duplex=False)
            child = Child(
                rank_main,
                (self.settings, rank, self.world, port, self.board, requests),
                spawn=self.spawn,
                memory_limit=self.settings.memory_limit,
                process=f"rank {rank} of {self.world}",
            )
            held.callback(pipe.close)  # after the rank is killed (an exit stack unwinds last first)
            held.enter_context(child)  # leaving kills it and its process group
            requests.close()  # the rank's end, now the rank's alone
            self.children.append(child)
            self.pipes.append(pipe)

    def close(self) -> None:
        """End the group: every rank killed with its process group, the store closed."""
        held, self._held = self._held, None
        self.children, self.pipes = [], []
        if held is not None:
            held.close()

    def __enter__(self) -> WarmGroup:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def run_group(spec: TinySpec, settings: ModelSettings, stage: Stage, *, spawn: bool) -> StageResult:
    """Run `stage` on a group of its own, ended with it; one result for the group. Raises
    `EnvironmentFault` when what ended the group was not the model."""
    with WarmGroup(settings, spawn=spawn) as group:
        return group.run(spec, settings, stage)


_WARM: list[WarmGroup] = []  # this process's warm group


def warm_group(settings: ModelSettings, *, spawn: bool) -> WarmGroup:
    """This process's warm group for `settings` (another group's ranks are ended first)."""
    if _WARM and _WARM[0].key != group_key(settings, spawn):
        close_warm_group()
    if not _WARM:
        if not _WARM_CLOSES_AT_EXIT:
            atexit.register(close_warm_group)
            _WARM_CLOSES_AT_EXIT.append(True)
        _WARM.append(WarmGroup(settings, spawn=spawn))
    return _WARM[0]


_WARM_CLOSES_AT_EXIT: list[bool] = []


def close_warm_group() -> None:
    """End this process's warm group, if it holds one."""
    while _WARM:
        _WARM.pop().close()


def _deadlines(
    spec: TinySpec, settings: ModelSettings, children: list[Child]
) -> Callable[[], None]:
    """Give every rank the model's deadline on its own time, now; with the test-only fault rule
    `deadline` (fault `after:<rule>`), once rule `<rule>` has fired. Returns what the
    supervisor calls as it goes (arming the deadlines once their time came)."""

    def arm() -> None:
        for child in children:
            child.deadline(settings.timeout_s)

    held = faults.take("deadline", *faults.spec_keys(spec))
    if held is None or not held.startswith("after:"):
        arm()
        return lambda: None
    index, folder = int(held.split(":", 1)[1]), os.environ.get(faults.STATE_ENV, "")
    for child in children:
        child.deadline(math.inf)
    armed: list[bool] = []

    def arm_once_fired() -> None:
        if not armed and faults.fired(folder, index):
            armed.append(True)
            arm()

    return arm_once_fired


def _supervise(
    children: list[Child], board: Board, arm: Callable[[], None] = lambda: None
) -> list[RankEnd]:
    ends = [RankEnd(rank) for rank in range(len(children))]
    seen = 0
    while True:
        arm()
        for end, child in zip(ends, children, strict=True):
            while not end.over and (message := child.poll()) is not None:
                kind, payload = message
                if kind == Kind.STAGE:
                    end.result = payload
                elif kind == Kind.ERROR:
                    end.error = payload
                elif kind == Kind.DONE:
                    end.left = payload
            if not end.over and child.ending is not None:
                end.ending = child.ending
            if end.over and not end.order:
                seen += 1
                end.order, end.state = seen, board.read(end.rank)
        live = [i for i, end in enumerate(ends) if not end.over]
        if not live:
            break
        # Once a rank failed, the others run on until each has ended or waits for a peer
        # (in a collective, or joining the group), where its device says so; then they stop.
        if any(end.failed for end in ends) and all(
            board.read(i).state in (WAITING, SETUP) or not board.read(i).exact for i in live
        ):
            # A rank's death closes its sockets before the kernel lets it be reaped: its
            # peer may report the closed connection while it still looks alive. A rank whose
            # exit has begun (its sentinel closed) is waited for and its death read first.
            exiting = wait([children[i].proc.sentinel for i in live], timeout=EXIT_GRACE_S)
            if exiting:
                for i in live:
                    if children[i].proc.sentinel in exiting:
                        children[i].proc.join(JOIN_S)
                continue
            for i in live:
                ends[i].stopped = board.read(i).describe()
            break
        wait([w for i in live for w in children[i].waitables], timeout=POLL_S)
    return ends


# ---- one result for the group -----------------------------------------------------------------


def merge(
    stage: Stage, settings: ModelSettings, ends: list[RankEnd], duration_s: float
) -> StageResult:
    world = len(ends)
    results = [e.result for e in ends if e.result is not None]
    merged = StageResult(stage=stage.value, status=Status.PASS.value, world_size=world)
    merged.duration_s = duration_s
    _merge_measures(merged, results, ends)
    failures = sorted((e for e in ends if e.failed), key=lambda e: (e.cause_rank, e.order))
    if failures:
        _failure(merged, stage, settings, failures[0], ends)
        return merged
    skipped = next((r for r in results if r.status == Status.SKIP.value), None)
    if skipped is not None:  # the stage does not apply: nothing of the group is a measure
        return StageResult(
            stage=stage.value,
            status=skipped.status,
            reason=skipped.reason,
            error_message=skipped.error_message,
            duration_s=duration_s,
            world_size=world,
        )
    merged.sharding_evidence = weakest(c.get("evidence") for c in merged.collectives or [])
    return merged


def _merge_measures(merged: StageResult, results: list[StageResult], ends: list[RankEnd]) -> None:
    fallbacks: dict[tuple[str, str], dict[str, Any]] = {}
    for r in results:
        for fb in r.fallbacks:
            key = (fb["op"], fb["source"])
            entry = fallbacks.setdefault(key, {**fb, "count": 0, "bytes_h2d": 0, "bytes_d2h": 0})
            for column in ("count", "bytes_h2d", "bytes_d2h"):
                entry[column] += fb.get(column) or 0
    merged.fallbacks = [fallbacks[k] for k in sorted(fallbacks)]
    merged.fallback_op_count = len({op for op, _ in fallbacks})
    merged.fallback_call_count = sum(r.fallback_call_count for r in results)
    merged.bytes_h2d = sum(r.bytes_h2d for r in results)
    merged.bytes_d2h = sum(r.bytes_d2h for r in results)
    collectives: dict[str, dict[str, Any]] = {}
    for r in results:
        for c in r.collectives or []:
            entry = collectives.setdefault(c["op"], {**c, "calls": 0, "bytes": 0})
            entry["calls"] = max(entry["calls"], c["calls"])
            entry["bytes"] += c["bytes"]
    merged.collectives = [collectives[op] for op in sorted(collectives)] if results else None
    by_rank = {e.rank: e.result.peak_memory_bytes for e in ends if e.result is not None}
    merged.rank_peak_memory_bytes = [by_rank.get(e.rank) for e in ends] if by_rank else None
    known = [m for m in by_rank.values() if m is not None]
    merged.peak_memory_bytes = max(known) if known else None
    unsharded = [r.unsharded_peak_memory_bytes for r in results if r.unsharded_peak_memory_bytes]
    merged.unsharded_peak_memory_bytes = max(unsharded) if unsharded else None
    errors = [r.max_abs_error for r in results if r.max_abs_error is not None]
    merged.max_abs_error = max(errors) if errors else None
    for column in ("trained_on", "hf_settings", "library_frame"):  # the hf_training stages'
        values = [getattr(r, column) for r in results if getattr(r, column)]
        setattr(merged, column, values[0] if values else None)


def _failure(
    merged: StageResult, stage: Stage, settings: ModelSettings, first: RankEnd, ends: list[RankEnd]
) -> None:
    world = len(ends)
    where = f"rank {first.rank} of {world}"
    others = "; ".join(
        f"rank {e.rank} {_what_it_did(e)}"
        for e in sorted(ends, key=lambda e: e.rank)
        if e is not first
    )
    tail = f" ({others})" if others else ""
    merged.failed_rank = first.rank
    if first.result is not None:  # the rank's own verdict: fail, fail_accuracy or oom
        r = first.result
        merged.status, merged.error_type, merged.failing_op = r.status, r.error_type, r.failing_op
        merged.error_message = short_message(f"{where}: {r.error_message}{tail}")
        merged.error_signature = r.error_signature
        merged.sharding_evidence = r.sharding_evidence
        merged.library_frame = r.library_frame or merged.library_frame
        return
    if first.error is not None:
        status, error_type, text = Status.FAIL, first.error[0], first.error[1]
    else:
        assert first.ending is not None
        if first.ending.timed_out:
            status, error_type = Status.TIMEOUT, "Timeout"
            text = f"{stage.value} did not finish within {settings.timeout_s:g} s (model timeout)"
            if first.state is not None:
                text += f", {first.state.describe()}"
        else:
            death = first.ending.death  # a death from outside raised EnvironmentFault
            assert death is not None and death.status is not None
            status, error_type, text = death.status, "WorkerCrashed", death.message
    message = f"{where}: {text}{tail}"
    merged.status, merged.error_type = status.value, error_type
    merged.error_message = short_message(message)
    merged.error_signature = error_signature(error_type, text)
    merged.failing_op = op_in_message(text)


def _what_it_did(end: RankEnd) -> str:
    if end.stopped is not None:
        return f"was stopped with the group, {end.stopped}"
    if end.result is not None:
        if end.result.status == Status.PASS.value:
            return "finished"
        return f"{end.result.status}: {end.result.error_type}"
    if end.error is not None:
        return f"raised {end.error[0]}"
    if end.ending is not None and end.ending.timed_out:
        waiting = f", {end.state.describe()}" if end.state is not None else ""
        return f"ran past its deadline{waiting}"
    if end.ending is not None:
        return "died"
    return "ended"


# ---- the distributed stages of a model, after its own process ran the others --------------------


def group_stage_results(
    spec: TinySpec,
    settings: ModelSettings,
    prior: list[StageResult],
    *,
    spawn: bool = False,
    on_stage: Callable[[StageResult], None] | None = None,
) -> list[StageResult]:
    """The distributed stages `settings` asks for, after the model's other stages (`prior`):
    each `not_run` when a stage it builds on did not pass, a skip when the model was skipped,
    else its result on this process's warm group (`warm_group`)."""
    status = {r.stage: r for r in prior}
    skipped = next(
        (r for r in prior if r.status == Status.SKIP.value and r.stage == Stage.LOAD.value), None
    )
    out: list[StageResult] = []
    for stage in (s for s in settings.stages if s in stage_registry.rank_stages()):
        blocked = next(
            (
                s.value
                for s in stage_registry.stage_needs()[stage]
                if s.value in status and status[s.value].status != Status.PASS.value
            ),
            None,
        )
        if skipped is not None:
            result = StageResult(
                stage=stage.value,
                status=Status.SKIP.value,
                reason=skipped.reason,
                error_message=skipped.error_message,
            )
        elif blocked is not None:
            result = StageResult(
                stage=stage.value,
                status=Status.NOT_RUN.value,
                error_message=f"{blocked} did not pass",
            )
        else:
            result = warm_group(settings, spawn=spawn).run(spec, settings, stage)
        out.append(result)
        if on_stage is not None:
            on_stage(result)
    return out
