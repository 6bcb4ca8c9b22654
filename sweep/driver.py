"""The sweep driver: settings, store and run row, then the run loop over the streamed catalog.

The parts, one module each: `sweep.loop` (the run loop: planning that streams, dedup, rows),
`sweep.executors` (Ray or local: where plan and model tasks run, retries of system failures),
`sweep.writer` (buffered rows flushed as atomic parts), `sweep.ledger` (what the run remembers
about every dedup group, on disk), `sweep.plan` and `sweep.rows` (what a task and a row are).

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

import itertools
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from model_configs.catalog import CatalogStream, open_catalog
from model_configs.spec import CatalogEntry
from reports.errors import UsageError
from reports.schema import Stage
from reports.store import Store, check_run_id, new_run_id, utcnow
from sweep.executors import PlanFn, RunFn, TaskSettings, make_executor
from sweep.ledger import Ledger
from sweep.loop import PLAN_BATCH, RunLoop
from sweep.progress import SweepProgress
from sweep.rows import RunContext
from sweep.writer import RowWriter


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
    plan_batch: int = PLAN_BATCH  # catalog entries per plan task
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
    timings: dict[str, float] = field(default_factory=dict)  # summed over model tasks
    startup_s: float = 0.0  # from the start to the executor being ready (Ray started)


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


def select_entries(stream: CatalogStream, config: RunConfig) -> Iterator[CatalogEntry]:
    """The entries this run is asked for, in rank order (or in `--models` order), streamed."""
    if config.models:
        wanted = set(config.models)
        found = {e.model_id: e for e in stream.entries() if e.model_id in wanted}
        missing = [m for m in config.models if m not in found]
        if missing:
            raise UsageError(
                f"not in catalog {stream.name}: {', '.join(missing)}",
                hint="use 'hfsweep check MODEL' for a model outside the catalog",
            )
        return iter([found[m] for m in dict.fromkeys(config.models)])
    entries = stream.entries()
    return entries if config.top is None else itertools.islice(entries, config.top)


def _not_done(entries: Iterator[CatalogEntry], done: pa.Array) -> Iterator[CatalogEntry]:
    """Entries without rows in the run yet (`done`: model ids, as one compact Arrow array)."""
    import pyarrow.compute as pc

    while chunk := list(itertools.islice(entries, 1024)):
        if len(done) == 0:
            yield from chunk
            continue
        have = pc.is_in(pa.array([e.model_id for e in chunk]), value_set=done).to_pylist()
        yield from (e for e, seen in zip(chunk, have, strict=True) if not seen)


def run_sweep(
    config: RunConfig, *, plan_fn: PlanFn | None = None, run_fn: RunFn | None = None
) -> RunSummary:
    """Run (or resume) a sweep; returns what was done. Raises UsageError for bad settings.

    `plan_fn` / `run_fn` replace the bodies of plan and model tasks (benches of the driver)."""
    from runners.devices import get_device

    start = time.monotonic()
    stream = open_catalog(config.catalog)
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
    done = store.read("results", run_id, columns=["model_id"]).column("model_id").unique()
    done = done.combine_chunks() if isinstance(done, pa.ChunkedArray) else done
    # two counting passes over the catalog: nothing is kept
    requested = sum(1 for _ in select_entries(stream, config))
    already = requested - sum(1 for _ in _not_done(select_entries(stream, config), done))
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
        "catalog": stream.name,
        "catalog_size": stream.size,
        "models_requested": requested,
        "command": config.command,
        **software_versions(device),
    }
    store.write_run(run_row)
    settings = TaskSettings(
        device=config.device,
        device_options=config.device_options,
        dtype=config.dtype,
        stages=config.stages,
        timeout_s=config.timeout_s,
        compile_backend=config.compile_backend,
        retries=config.retries,
        config_dir=str(stream.config_dir) if stream.config_dir.is_dir() else None,
    )
    writer = RowWriter(store, run_id, config.flush_s)
    interrupted = True
    loop: RunLoop | None = None
    ready = start
    try:
        with (
            Ledger(dedup=config.dedup) as ledger,
            SweepProgress(
                requested - already, description=f"run {run_id}", enabled=config.progress
            ) as bar,
        ):
            if already:
                ledger.resume(store, run_id)  # groups that ran before the kill stay done
            todo = _not_done(select_entries(stream, config), done)
            executor = make_executor(
                config.executor,
                settings,
                address=config.address,
                num_cpus=config.num_cpus,
                plan_fn=plan_fn,
                run_fn=run_fn,
            )
            ready = time.monotonic()
            try:
                loop = RunLoop(
                    executor,
                    ledger,
                    writer,
                    run_ctx,
                    plan_batch=config.plan_batch,
                    on_model=lambda outcome, n: bar.advance(outcome, n=n),
                )
                loop.run_entries(todo)
            finally:
                executor.close()
            writer.flush()
        interrupted = False
    finally:
        writer.flush()
        store.write_run({**run_row, "status": "interrupted" if interrupted else "finished"})
    return RunSummary(
        run_id=run_id,
        requested=requested,
        already_done=already,
        skipped=loop.skipped if loop else 0,
        tasks=ledger.unique,
        models_run=loop.models_run if loop else 0,
        seconds=time.monotonic() - start,
        timings=loop.timings if loop else {},
        startup_s=ready - start,
    )


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
