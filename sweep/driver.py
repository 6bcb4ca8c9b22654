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
- a model that hangs gets `timeout`, one that kills its process `crash`, one that runs out of
  its memory budget (or is killed by the OOM killer) `oom`, and the sweep goes on;
- what is not the model's doing (system faults: the environment failing in the child, a lost
  worker, node or object, a SIGKILL from outside) is retried and never recorded: a model it
  keeps hitting has no rows (a rerun runs it) and the run ends with one error (exit 3);
- a device that fails its check before any model runs (`runners.devices.preflight`) stops the
  run with one error (exit 3) before anything is written;
- one driver per run id (`reports.locks`); a resume must match every setting that changes a
  row (`RESULT_SETTINGS`); damaged part files are put aside and their models run again.
"""

from __future__ import annotations

import hashlib
import itertools
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from model_configs.catalog import CatalogStream, open_catalog
from model_configs.spec import CatalogEntry
from reports.errors import SystemFaultError, UsageError
from reports.locks import RunLock
from reports.schema import Stage
from reports.store import Store, check_run_id, new_run_id, utcnow
from runners import containment
from runners.containment import DEFAULT_MEMORY_LIMIT
from sweep.executors import PlanFn, RunFn, TaskSettings, make_executor
from sweep.ledger import Ledger
from sweep.loop import PLAN_BATCH, RunLoop
from sweep.progress import SweepProgress
from sweep.reuse import KeyContext, reusable, source_runs
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
    retries: int = 2  # for system failures only (never a model's own failure)
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT  # bytes per model (None: no cap)
    dedup: bool = True
    flush_s: float = 2.0
    plan_batch: int = PLAN_BATCH  # catalog entries per plan task
    progress: bool | None = None  # None: on when stderr is a terminal
    command: str = ""
    nightly: str | None = None  # the nightly series (`hfsweep nightly`), in the run's row
    reuse: str | None = None  # copy earlier runs' rows by task key: latest, a run id, all


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
    abandoned: list[str] = field(default_factory=list)  # no rows: the environment kept failing
    causes: dict[str, str] = field(default_factory=dict)  # what stopped them -> first model
    damaged_parts: int = 0  # part files found damaged at the start and put aside
    reused: int = 0  # models whose rows were copied from an earlier run (`--reuse`)
    reused_tasks: int = 0  # unique tiny models among them
    reuse_sources: list[str] = field(default_factory=list)  # the runs offered, newest first


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
    """The entries this run is asked for, in rank order (or in `--models` order), streamed;
    each model once, however often the catalog or `--models` names it."""
    return _once(_selected(stream, config))


def _once(entries: Iterator[CatalogEntry]) -> Iterator[CatalogEntry]:
    seen: set[str] = set()  # model ids only: about 100 bytes a model
    for entry in entries:
        if entry.model_id not in seen:
            seen.add(entry.model_id)
            yield entry


def _selected(stream: CatalogStream, config: RunConfig) -> Iterator[CatalogEntry]:
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
    config: RunConfig,
    *,
    plan_fn: PlanFn | None = None,
    run_fn: RunFn | None = None,
    warn: Callable[[str], None] | None = None,
) -> RunSummary:
    """Run (or resume) a sweep; returns what was done. Raises UsageError for bad settings (a
    resume with other settings, a run another driver holds), DeviceCheckError when the device
    fails its check before any model runs, SystemFaultError when the environment keeps failing
    task after task.

    `plan_fn` / `run_fn` replace the bodies of plan and model tasks (benches of the driver);
    `warn` gets one line per problem found in the store (default: stderr)."""
    from runners.devices import get_device

    start = time.monotonic()
    stream = open_catalog(config.catalog)
    device = get_device(config.device, **config.device_options)  # unknown name: UsageError
    # The device checks that must pass before any model runs (one clear error, no rows); a
    # `run_fn` stand-in runs no model on the device, so it has nothing to check.
    if run_fn is None:
        from runners.devices.preflight import check_device

        check_device(config.device, config.device_options)  # broken: DeviceCheckError, exit 3
    store = Store(config.store)
    run_id = check_run_id(config.run_id) if config.run_id else new_run_id()
    with RunLock(store, run_id):  # a second driver on this run is refused here
        return _run_locked(
            config, stream, device, store, run_id, start, plan_fn, run_fn, warn or _stderr
        )


def _run_locked(
    config: RunConfig,
    stream: CatalogStream,
    device: Any,
    store: Store,
    run_id: str,
    start: float,
    plan_fn: PlanFn | None,
    run_fn: RunFn | None,
    warn: Callable[[str], None],
) -> RunSummary:
    damaged = store.damaged_parts(run_id)
    for table, path, why in damaged:  # never read as data: put aside, their models run again
        store.quarantine(path)
        warn(
            f"warning: {table} part {path.rsplit('/', 1)[-1]} of run {run_id} is damaged "
            f"({why}); put aside as .damaged-*, its models run again"
        )
    previous = store.run(run_id)
    settings_row = result_settings(config, device, stream)
    if previous is not None:
        check_same_settings(previous, settings_row)
    sources = source_runs(store, config.reuse, run_id)  # a run id not in the store: refused
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
        "catalog_size": stream.size,
        "models_requested": requested,
        "command": config.command,
        "nightly": config.nightly,
        "reuse": config.reuse or None,
        **software_versions(device),
        **settings_row,
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
        memory_limit=config.memory_limit,
    )
    status = "interrupted"
    loop: RunLoop | None = None
    ready = start
    writer = RowWriter(store, run_id, config.flush_s)
    try:
        with (
            writer,
            Ledger(dedup=config.dedup, key_of=KeyContext.of(settings_row).key) as ledger,
            SweepProgress(
                requested - already, description=f"run {run_id}", enabled=config.progress
            ) as bar,
        ):
            if already:
                ledger.resume(store, run_id)  # groups that ran before the kill stay done
            for earlier in reusable(store, sources):  # newest first: the first per key wins
                ledger.offer(earlier)
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
                containment.sweep_orphans()  # children of workers that died on this node
        status = "incomplete" if loop.abandoned else "finished"
    finally:
        writer.close()
        store.write_run({**run_row, "status": status})
    return RunSummary(
        run_id=run_id,
        requested=requested,
        already_done=already,
        skipped=loop.skipped,
        tasks=ledger.unique,
        models_run=loop.models_run,
        seconds=time.monotonic() - start,
        timings=loop.timings,
        startup_s=ready - start,
        abandoned=loop.abandoned,
        causes=loop.causes,
        damaged_parts=len(damaged),
        reused=loop.reused,
        reused_tasks=ledger.reused,
        reuse_sources=sources,
    )


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def abandoned_error(summary: RunSummary) -> SystemFaultError:
    """The one error for models the environment kept from running (they have no rows)."""
    n = len(summary.abandoned)
    causes = "; ".join(f"{cause} (first: {model})" for cause, model in summary.causes.items())
    return SystemFaultError(
        f"{n} model{'s' if n != 1 else ''} of run {summary.run_id} got no rows: the environment "
        f"kept failing after retries: {causes}",
        hint=f"rerun the same command (--run-id {summary.run_id}): only those models run again",
    )


def _file_hash(path: Path) -> str | None:
    try:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()[:16]


# Columns of the run row that decide what a row says: a resume must match every one of them.
RESULT_SETTINGS = (
    "device",
    "device_emulated",
    "device_profile",
    "device_profile_hash",
    "strict",
    "dtype",
    "stages",
    "catalog",
    "catalog_hash",
    "compile_backend",
    "compile_mode",
    "timeout_s",
    "memory_limit_bytes",
    "torch_version",
    "transformers_version",
    "diffusers_version",
    "device_package_version",
    "project_version",
)


def result_settings(config: RunConfig, device: Any, stream: CatalogStream) -> dict[str, Any]:
    """Every setting of this run that changes what a row says (stored in the run row)."""
    profile, profile_hash = device.profile_info()
    versions = software_versions(device)
    return {
        "device": device.name,
        "device_emulated": bool(device.emulated),
        "device_profile": profile,
        "device_profile_hash": profile_hash,
        "strict": bool(config.device_options.get("strict", False)),
        "dtype": config.dtype,
        "stages": ",".join(s.value for s in config.stages),
        "catalog": stream.name,
        "catalog_hash": _file_hash(stream.path),
        "compile_backend": config.compile_backend or getattr(device, "compile_backend", None),
        "compile_mode": getattr(device, "compile_mode", None),  # None where the device has none
        "timeout_s": float(config.timeout_s),
        "memory_limit_bytes": config.memory_limit or 0,
        **{k: versions.get(k) for k in RESULT_SETTINGS if k.endswith("_version")},
    }


def check_same_settings(previous: dict[str, Any], settings: dict[str, Any]) -> None:
    """A resume must be the same run: refuse one whose settings would change its rows."""
    differ = []
    for key in RESULT_SETTINGS:
        have, want = previous.get(key), settings.get(key)
        if have is None or want is None:  # a run row from before the column existed
            continue
        if have != want:
            differ.append(f"{key}={have} (now {want})")
    if differ:
        raise UsageError(
            f"run {previous['run_id']} was started with other settings: {', '.join(differ)}",
            hint="resume with the same command and software, or start a new run without --run-id",
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
