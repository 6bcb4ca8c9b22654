"""The sweep driver: plan, run one task per unique tiny model (Ray or local), write rows.

Guarantees:
- every model asked for gets one row per requested stage (skips included);
- results are written as they arrive, in part files that are complete or absent; a killed
  driver loses at most the models in flight and those finished in the last flush interval
  (`flush_s`, 2 s by default), and the same command with the same `--run-id` resumes without
  duplicates;
- a model that hangs gets `timeout`, one that kills its process `crash` / `oom`, and the sweep
  goes on; system failures of Ray (a lost worker or node) are retried, a model's failures never.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model_configs.catalog import Catalog, load_catalog
from model_configs.spec import CatalogEntry
from reports.errors import UsageError
from reports.schema import Stage, Status
from reports.store import Store, check_run_id, new_run_id, utcnow
from runners.outcome import ModelOutcome, failed_before
from sweep.plan import Planned, Task, group_tasks, plan_entries
from sweep.progress import SweepProgress
from sweep.rows import RunContext, model_rows


@dataclass
class RunConfig:
    """Everything `hfsweep run` was asked to do."""

    store: str
    catalog: str = "bundled"
    top: int | None = 50
    models: list[str] | None = None  # explicit model ids from the catalog (overrides top)
    device: str = "cpu"
    device_options: dict[str, Any] = field(default_factory=dict)
    dtype: str = "fp32"
    stages: list[Stage] = field(default_factory=lambda: list(Stage))
    run_id: str | None = None
    executor: str = "ray"  # "ray" | "local"
    address: str | None = None  # an existing Ray cluster
    num_cpus: int | None = None  # local Ray size (default: the machine's cores)
    timeout_s: float = 300.0
    compile_backend: str | None = None  # default: the device's own backend
    retries: int = 1  # for system failures only
    dedup: bool = True
    flush_s: float = 2.0
    progress: bool | None = None  # None: on when stderr is a terminal
    command: str = ""


@dataclass
class RunSummary:
    run_id: str
    requested: int
    already_done: int
    skipped: int
    tasks: int
    models_run: int
    seconds: float


class _Writer:
    """Buffers finished models' rows and flushes them as one part per table."""

    def __init__(self, store: Store, run_id: str, flush_s: float):
        self.store, self.run_id, self.flush_s = store, run_id, flush_s
        self.results: list[dict[str, Any]] = []
        self.fallbacks: list[dict[str, Any]] = []
        self.last = time.monotonic()

    def add(self, results: list[dict[str, Any]], fallbacks: list[dict[str, Any]]) -> None:
        self.results += results
        self.fallbacks += fallbacks
        if time.monotonic() - self.last >= self.flush_s or len(self.results) >= 2000:
            self.flush()

    def flush(self) -> None:
        if self.results:
            self.store.write_model_rows(self.run_id, self.results, self.fallbacks)
        self.results, self.fallbacks = [], []
        self.last = time.monotonic()


def software_versions(device: Any = None) -> dict[str, str | None]:
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    versions = {
        "torch_version": version("torch"),
        "transformers_version": version("transformers"),
        "diffusers_version": version("diffusers"),
        "ray_version": version("ray"),
        "project_version": version("hfsweep"),
        "git_sha": _git_sha(),
        "python_version": platform.python_version(),
        "hostname": socket.gethostname(),
    }
    if device is not None:
        device_versions = device.versions()
        versions["device_package_version"] = (
            next(iter(device_versions.values()), None) if (device_versions) else None
        )
    return versions


def _git_sha() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def select_entries(catalog: Catalog, config: RunConfig) -> list[CatalogEntry]:
    if config.models:
        missing = [m for m in config.models if catalog.get(m) is None]
        if missing:
            raise UsageError(
                f"not in catalog {catalog.name}: {', '.join(missing)}",
                hint="use 'hfsweep check MODEL' for a model outside the catalog",
            )
        return [e for m in config.models if (e := catalog.get(m)) is not None]
    return catalog.top(config.top)


def run_sweep(config: RunConfig) -> RunSummary:
    """Run (or resume) a sweep; returns what was done. Raises UsageError for bad settings."""
    from runners.devices import get_device

    start = time.monotonic()
    catalog = load_catalog(config.catalog)
    entries = select_entries(catalog, config)
    device = get_device(config.device, **config.device_options)  # unknown name: UsageError
    from runners.devices.preflight import check_device

    check_device(config.device, config.device_options)  # a broken device: one DeviceError
    store = Store(config.store)
    run_id = check_run_id(config.run_id) if config.run_id else new_run_id()
    previous = store.run(run_id)
    if previous is not None:
        _check_same_settings(previous, config)
    profile, profile_hash = device.profile_info()
    run_ctx = RunContext(
        run_id=run_id,
        device=device.name,
        device_emulated=device.emulated,
        device_profile=profile,
        device_profile_hash=profile_hash,
        dtype=config.dtype,
    )
    run_row = {
        "run_id": run_id,
        "status": "running",
        "started_at": previous["started_at"] if previous else utcnow(),
        "device": device.name,
        "device_emulated": device.emulated,
        "device_profile": profile,
        "device_profile_hash": profile_hash,
        "dtype": config.dtype,
        "stages": ",".join(s.value for s in config.stages),
        "catalog": catalog.name,
        "catalog_size": len(catalog.entries),
        "models_requested": len(entries),
        "command": config.command,
        **software_versions(device),
    }
    store.write_run(run_row)
    done = store.completed_models(run_id)
    todo = [e for e in entries if e.model_id not in done]
    writer = _Writer(store, run_id, config.flush_s)
    tasks: list[Task] = []
    skipped = 0
    interrupted = True
    try:
        with SweepProgress(len(todo), description="plan", enabled=config.progress) as bar:

            def planned_one(p: Planned) -> None:
                bar.advance("skip" if p.outcome else "ready")

            planned = plan_entries(
                todo, config.stages, config_dir=catalog.config_dir, on_planned=planned_one
            )
        with SweepProgress(len(todo), description=f"run {run_id}", enabled=config.progress) as bar:
            for p in planned:
                if p.outcome is not None:
                    writer.add(*model_rows(run_ctx, p, p.outcome))
                    skipped += 1
                    bar.advance(_headline(p.outcome))
            writer.flush()
            if config.dedup:
                tasks = group_tasks(planned)
            else:
                tasks = [Task(spec=p.spec, members=[p]) for p in planned if p.spec is not None]
            for task, outcome, attempt in _execute(tasks, config, device):
                for i, member in enumerate(task.members):
                    dedup_of = task.lead.entry.model_id if i else None
                    writer.add(
                        *model_rows(run_ctx, member, outcome, attempt=attempt, dedup_of=dedup_of)
                    )
                bar.advance(_headline(outcome), n=len(task.members))
            writer.flush()
        interrupted = False
    finally:
        writer.flush()
        store.write_run({**run_row, "status": "interrupted" if interrupted else "finished"})
    return RunSummary(
        run_id=run_id,
        requested=len(entries),
        already_done=len(entries) - len(todo),
        skipped=skipped,
        tasks=len(tasks),
        models_run=sum(len(t.members) for t in tasks),
        seconds=time.monotonic() - start,
    )


def _headline(outcome: ModelOutcome) -> str:
    statuses = {s.status for s in outcome.stages}
    if statuses <= {Status.SKIP.value}:
        return "skip"
    if statuses <= {Status.PASS.value, Status.SKIP.value}:
        return "pass"
    return "fail"


def _check_same_settings(previous: dict[str, Any], config: RunConfig) -> None:
    stages = ",".join(s.value for s in config.stages)
    for key, want in (
        ("device", config.device.split(":")[0]),
        ("dtype", config.dtype),
        ("stages", stages),
    ):
        have = previous.get(key)
        if have and want and have != want and not (key == "device" and have.startswith(want)):
            raise UsageError(
                f"run {previous['run_id']} was started with {key}={have}, not {want}",
                hint="resume with the same settings, or start a new run without --run-id",
            )


# ---- executors ----------------------------------------------------------------------------


def _execute(
    tasks: list[Task], config: RunConfig, device: Any
) -> Iterator[tuple[Task, ModelOutcome, int]]:
    if not tasks:
        return iter(())
    if config.executor == "local":
        return _execute_local(tasks, config)
    if config.executor == "ray":
        return _execute_ray(tasks, config)
    raise UsageError(f"unknown executor {config.executor!r} (use ray or local)")


def _task_kwargs(config: RunConfig) -> dict[str, Any]:
    return {
        "device": config.device,
        "device_options": config.device_options,
        "dtype": config.dtype,
        "stages": [s.value for s in config.stages],
        "timeout_s": config.timeout_s,
        "compile_backend": config.compile_backend,
    }


def _execute_local(
    tasks: list[Task], config: RunConfig
) -> Iterator[tuple[Task, ModelOutcome, int]]:
    from runners.isolation import run_isolated

    for task in tasks:
        outcome = run_isolated(task.spec, **_task_kwargs(config))
        outcome.worker = f"{socket.gethostname()}:{os.getpid()}"
        yield task, outcome, 1


def run_task(spec: Any, kwargs: dict[str, Any]) -> ModelOutcome:
    """The body of one Ray task: import the heavy libraries once per worker, then fork."""
    import ray

    import runners.stages  # noqa: F401  (torch + model libraries, before the fork)
    from runners.isolation import run_isolated

    outcome = run_isolated(spec, **kwargs)
    node = ray.get_runtime_context().get_node_id()
    outcome.worker = f"ray:{node[:12]}:{os.getpid()}"
    return outcome


def init_ray(config: RunConfig) -> Any:
    import logging

    import ray

    if ray.is_initialized():
        return ray
    if config.address:
        ray.init(address=config.address, logging_level=logging.WARNING, log_to_driver=False)
    else:
        ray.init(
            num_cpus=config.num_cpus or os.cpu_count() or 1,
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
    return ray


def _execute_ray(tasks: list[Task], config: RunConfig) -> Iterator[tuple[Task, ModelOutcome, int]]:
    ray = init_ray(config)
    from ray.exceptions import (
        GetTimeoutError,
        NodeDiedError,
        OutOfMemoryError,
        RayTaskError,
        TaskCancelledError,
        WorkerCrashedError,
    )

    remote = ray.remote(num_cpus=1, max_retries=0, max_calls=25)(run_task)
    slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
    kwargs = _task_kwargs(config)
    # A task normally returns within its model timeout (the worker enforces it); this guard
    # catches a worker that never returns at all (a lost node, a wedged process).
    guard_s = config.timeout_s * 1.5 + 120
    queue = list(reversed(tasks))
    inflight: dict[Any, tuple[Task, int, float]] = {}

    def submit(task: Task, attempt: int) -> None:
        ref = remote.remote(task.spec, kwargs)
        inflight[ref] = (task, attempt, time.monotonic())

    stages = config.stages
    while queue or inflight:
        while queue and len(inflight) < slots:
            submit(queue.pop(), 1)
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
        now = time.monotonic()
        for ref in list(inflight):
            task, attempt, started = inflight[ref]
            if ref not in ready and now - started > guard_s:
                ray.cancel(ref, force=True)
                del inflight[ref]
                yield (
                    task,
                    failed_before(
                        stages,
                        Status.TIMEOUT,
                        "Timeout",
                        f"the Ray task did not return within {guard_s:g} s",
                    ),
                    attempt,
                )
        for ref in ready:
            if ref not in inflight:
                continue
            task, attempt, started = inflight.pop(ref)
            try:
                outcome = ray.get(ref, timeout=60)
            except (WorkerCrashedError, NodeDiedError) as exc:
                if attempt <= config.retries:
                    submit(task, attempt + 1)
                    continue
                outcome = failed_before(stages, Status.CRASH, type(exc).__name__, _first_line(exc))
            except OutOfMemoryError as exc:
                if attempt <= config.retries:
                    submit(task, attempt + 1)
                    continue
                outcome = failed_before(stages, Status.OOM, type(exc).__name__, _first_line(exc))
            except (RayTaskError, TaskCancelledError, GetTimeoutError) as exc:
                outcome = failed_before(stages, Status.CRASH, type(exc).__name__, _first_line(exc))
            yield task, outcome, attempt


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def stage_list(text: str | None) -> list[Stage]:
    if not text:
        return list(Stage)
    out = []
    for name in text.split(","):
        name = name.strip()
        try:
            out.append(Stage(name))
        except ValueError:
            raise UsageError(
                f"unknown stage {name!r}; stages: {', '.join(s.value for s in Stage)}"
            ) from None
    return out


def command_line() -> str:
    return " ".join(["hfsweep", *sys.argv[1:]])
