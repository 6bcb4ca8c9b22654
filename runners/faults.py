"""A test-only hook that injects faults into a run, so the fault matrix never edits a model.

Set `HFSWEEP_TEST_FAULTS` to a JSON list of rules; unset (always, outside tests and benches)
`inject` costs one dictionary lookup. A rule::

    {"at": "stage:forward", "match": "gpt2", "fault": "segfault", "times": 1}

- `at`: where it fires: `plan` (planning an entry, in the plan task), `task` (the task on the
  worker, before a child is forked), `setup` (the child, before the device is set up),
  `stage:<name>` (a model's child, inside that stage), `rank<N>:stage:<name>` (rank N of a
  distributed stage's group, inside the stage), `rank<N>:collective:<name>` (rank N, as the
  emulated device's process group starts collective `<name>`, e.g. `allreduce`, once its
  rank says it waits in it), `deadline` (a group's launcher, as it gives its ranks the stage's
  deadline: fault `after:<rule>` holds every rank's deadline back until rule `<rule>` has
  fired, so that a test orders "rank 0 waits in its collective" before any deadline),
  `backend:neuron` (the emulated neuron device's Dynamo backend, as it is handed a graph to
  compile: a backend that fails where another would not), `sample` (an op-sweep child, as a
  sample's op runs on the device), or in the driver's Ray executor `submit` (fault
  `runtime_env`: the task is submitted with a runtime env that cannot be set up) and `get`
  (fault `lose_object`: fetching the task's result raises Ray's ObjectLostError, as when the
  node holding it is gone; Ray has no call that frees one object to do it for real).
- `match`: what the place knows the task by (`*`: any): in `plan` its model id or model type
  hint; for a model the tiny model's model type, architecture or shrunk config hash; for an
  op-sweep task the OpInfo names (`sample`: the OpInfo of the sample).
- `fault`: `segfault` (a real invalid read), `hang`, `alloc` (allocate 64 MiB tensors until
  the memory budget stops it; refused without a budget), `raise` (an ordinary RuntimeError:
  the model's own failure, a `fail` row), `unpicklable` (raise an exception that
  cannot be pickled, whose message cannot be read either), `kill` (SIGKILL itself: what an
  operator's `kill -9` looks like), `kill_parent` (SIGKILL the worker that runs the model),
  `env` (the device fails: a DeviceError), `exit` (exit with status 3), `sleep:<seconds>`,
  `spawn` (start a `sleep` helper process, then hang: what a model's own subprocess leaves),
  `wait` (block until the test releases it with `release`: the point where a test kills a
  driver or a node is then the test's, never a race with the machine's speed).
- `times`: fire at most that many times across every process (counted with files created
  under `HFSWEEP_TEST_FAULTS_STATE`), so a transient fault can be retried into a success.
Each firing leaves `fired-<rule>-<pid>` in that folder (and `spawn` its helper's pid), so a
test can check that no process it involved outlives the run, and knows when a `wait` blocks.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

ENV = "HFSWEEP_TEST_FAULTS"
STATE_ENV = "HFSWEEP_TEST_FAULTS_STATE"


class UnpicklableFault(Exception):
    """Holds a lock (so pickling fails) and refuses to say what it is."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def __reduce__(self) -> Any:
        raise TypeError("UnpicklableFault cannot be pickled")

    def __str__(self) -> str:
        raise RuntimeError("UnpicklableFault has no message")

    def __repr__(self) -> str:
        raise RuntimeError("UnpicklableFault has no repr")


def rules() -> list[dict[str, Any]]:
    text = os.environ.get(ENV)
    if not text:
        return []
    value = json.loads(text)
    return value if isinstance(value, list) else [value]


def take(at: str, *keys: str | None) -> str | None:
    """The fault of the first rule for this place and any of `keys` that has firings left
    (counted and recorded as fired), or None. Places that act themselves (the driver) use it."""
    taken = _take_rule(at, keys)
    return None if taken is None else taken[1]


def _take_rule(at: str, keys: tuple[str | None, ...]) -> tuple[int, str] | None:
    if ENV not in os.environ:
        return None
    for index, rule in enumerate(rules()):
        if rule.get("at") != at:
            continue
        match = rule.get("match", "*")
        if match != "*" and match not in keys:
            continue
        if not _take(index, rule.get("times")):
            continue
        _record(index)
        return index, str(rule["fault"])
    return None


def inject(at: str, *keys: str | None) -> None:
    """Fire the first rule for this place and any of `keys` that has firings left."""
    taken = _take_rule(at, keys)
    if taken is not None:
        index, fault = taken
        _fire(fault, index)


def release(folder: str, index: int | None = None) -> None:
    """Let the processes blocked in a `wait` fault go on: those of rule `index`, or all (None).
    A release stands: a later firing of that rule goes on at once."""
    os.makedirs(folder, exist_ok=True)
    name = "release" if index is None else f"release-{index}"
    with open(os.path.join(folder, name), "w"):
        pass


def spec_keys(spec: Any) -> tuple[str | None, ...]:
    """What a place that knows the tiny model matches on: its model type, architecture, or the
    shrunk config's hash (what a bench that planned first can name one model by)."""
    return (spec.model_type, spec.architecture, spec.hash)


def inject_spec(at: str, spec: Any) -> None:
    if ENV in os.environ:
        inject(at, *spec_keys(spec))


_KEYS: list[str | None] = []  # what this process's task is known by (a rank's model)


def known_as(spec: Any) -> None:
    """From now, places in this process that do not know the model match on `spec`'s keys."""
    _KEYS[:] = spec_keys(spec)


def inject_known(at: str) -> None:
    """`inject` at a place that knows only this process's model (`known_as`)."""
    if ENV in os.environ:
        inject(at, *_KEYS)


def _take(index: int, times: int | None) -> bool:
    if times is None:
        return True
    folder = os.environ.get(STATE_ENV)
    if not folder:
        raise RuntimeError(f"{ENV} rules with 'times' need {STATE_ENV} (a folder)")
    os.makedirs(folder, exist_ok=True)
    for n in range(int(times)):
        try:
            os.close(os.open(os.path.join(folder, f"rule{index}-{n}"), os.O_CREAT | os.O_EXCL))
            return True
        except FileExistsError:
            continue
    return False


def _record(index: int) -> None:
    """Leave `fired-<rule>-<pid>` in the state folder: tests find the process that fired."""
    folder = os.environ.get(STATE_ENV)
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"fired-{index}-{os.getpid()}"), "w") as fh:
            fh.write(str(os.getppid()))


def fired(folder: str, index: int | None = None) -> list[int]:
    """The processes that fired rule `index` (any rule: None), from the state folder."""
    if not os.path.isdir(folder):
        return []
    prefix = "fired-" if index is None else f"fired-{index}-"
    return [int(n.rsplit("-", 1)[1]) for n in os.listdir(folder) if n.startswith(prefix)]


def _fire(fault: str, index: int = -1) -> None:
    if fault == "segfault":
        import ctypes

        ctypes.string_at(0)  # a real invalid read: SIGSEGV
    elif fault == "hang":
        while True:
            time.sleep(3600)
    elif fault.startswith("sleep:"):
        time.sleep(float(fault.split(":", 1)[1]))
    elif fault == "alloc":
        _allocate_past_budget()
    elif fault == "raise":
        raise RuntimeError("injected: the model fails here")
    elif fault == "unpicklable":
        raise UnpicklableFault()
    elif fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "kill_parent":
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(60)  # the kernel kills this child with its parent (no orphan)
    elif fault == "spawn":  # a helper process the model started, then a hang
        import subprocess

        helper = subprocess.Popen(["sleep", "600"])
        folder = os.environ.get(STATE_ENV)
        if folder:
            with open(os.path.join(folder, f"spawned-{helper.pid}"), "w") as fh:
                fh.write(str(os.getpid()))
        while True:
            time.sleep(3600)
    elif fault == "env":
        from ground.errors import DeviceError

        raise DeviceError("injected: the device stopped answering", device="test")
    elif fault == "exit":
        os._exit(3)
    elif fault == "wait":
        _wait_for_release(index)
    else:
        raise ValueError(f"unknown test fault {fault!r}")


def _wait_for_release(index: int) -> None:
    folder = os.environ.get(STATE_ENV)
    if not folder:
        raise RuntimeError(f"the 'wait' fault needs {STATE_ENV} (the folder a test releases in)")
    names = (os.path.join(folder, "release"), os.path.join(folder, f"release-{index}"))
    while not any(os.path.exists(name) for name in names):
        time.sleep(0.05)


def _allocate_past_budget() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    if soft == resource.RLIM_INFINITY:
        raise RuntimeError("the 'alloc' fault needs a memory budget (it would fill the machine)")
    import torch

    held = []
    while True:  # as a model that outgrows its budget: 64 MiB at a time, each touched
        held.append(torch.ones(16 << 20))
