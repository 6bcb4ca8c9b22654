"""The local executor (`--local`): no Ray. Plans in this process, tasks one at a time in child
processes of this one; system faults are retried in place, after the same backoff as on Ray
(`sweep.executors.fault_policy`), then given up."""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from model_configs.spec import CatalogEntry
from sweep.executors.fault_policy import backoff_s, describe_failure
from sweep.executors.protocol import (
    Abandoned,
    Event,
    PlanDone,
    Planner,
    RunDone,
    RunFn,
    finished,
    timed,
)
from sweep.plan import Planned


class LocalExecutor:
    """No Ray: plans in this process, tasks one at a time in child processes of this one.
    System faults are retried in place (after the same backoff), then given up."""

    slots = capacity = 1

    def __init__(self, *, run_fn: RunFn, planner: Planner | None = None):
        self.retries = 0
        self.run_fn = timed(run_fn)
        self.planner = planner
        self._plan = timed(planner.fn) if planner else None
        self._done: deque[Event] = deque()
        self._plans = 0
        self._runs = 0
        self.sleep: Callable[[float], None] = time.sleep

    def submit_plan(self, key: int, entries: Sequence[CatalogEntry]) -> None:
        assert self.planner is not None and self._plan is not None
        self._plans += 1
        try:
            planned, seconds = self._plan(entries, self.planner.stages, self.planner.config_dir)
        except Exception:  # the environment failed under one of them: one by one, retried
            planned, seconds = [], None
            for entry in entries:
                planned += self._plan_one(entry)
        self._done.append(PlanDone(key, entries, planned, seconds))

    def _plan_one(self, entry: CatalogEntry) -> list[Planned]:
        assert self.planner is not None and self._plan is not None
        attempt = 1
        while True:
            try:
                return self._plan([entry], self.planner.stages, self.planner.config_dir)[0]
            except Exception as exc:
                if attempt > self.retries:
                    self._done.append(
                        Abandoned("plan", [entry.model_id], describe_failure(exc), attempt)
                    )
                    return []
                self.sleep(backoff_s(attempt))
                attempt += 1

    def submit_run(self, task: Any, attempt: int = 1) -> None:
        start = time.monotonic()
        self._runs += 1
        while True:
            try:
                outcome, seconds = self.run_fn(task.payload, task.settings)
                break
            except Exception as exc:  # not the model's (a body returns its failures as data)
                if attempt > self.retries:
                    self._done.append(
                        Abandoned("run", task.names(), describe_failure(exc), attempt, task)
                    )
                    return
                self.sleep(backoff_s(attempt))
                attempt += 1
        outcome = finished(outcome, seconds, f"{socket.gethostname()}:{os.getpid()}")
        self._done.append(RunDone(task, outcome, attempt, time.monotonic() - start))

    def running(self) -> int:
        return self._runs

    def planning(self) -> int:
        return self._plans

    def wait(self, timeout_s: float) -> list[Event]:
        events = list(self._done)
        self._done.clear()
        self._plans = self._runs = 0
        return events

    def close(self) -> None:
        return None
