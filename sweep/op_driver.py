"""The op-sweep driver: OpInfo groups as Ray tasks (or child processes), rows into the store.

Guarantees, as for the model sweep:
- every OpInfo x dtype asked for gets its rows (skips included), one per sample and phase;
- a group's rows are written in one part file once the group is done, so a killed driver loses
  at most the groups in flight and those finished in the last flush interval, and the same
  command with the same `--run-id` resumes without duplicates;
- a sample that hangs gets `timeout`, one that kills its process `crash`, and the sweep goes on
  (inside each task, `runners/op_sweep/isolation.py`); a lost Ray worker is retried.
At the end the run's per-op summary (`op_summary`) is written from its rows.
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from reports.errors import UsageError
from reports.schema import OpStatus
from reports.store import Store, check_run_id, new_run_id, utcnow
from sweep.progress import SweepProgress


@dataclass
class OpSweepConfig:
    """Everything `hfsweep ops` was asked to do."""

    store: str
    ops: list[str] | None = None  # OpInfo names; None: all of op_db
    dtypes: list[str] = field(default_factory=lambda: ["fp32", "bf16", "fp16"])
    device: str = "cpu"
    device_options: dict[str, Any] = field(default_factory=dict)
    inputs: str = "sample"  # sample | reference
    run_id: str | None = None
    executor: str = "ray"  # ray | local
    address: str | None = None
    num_cpus: int | None = None
    timeout_s: float = 60.0  # per sample
    group_size: int = 4  # OpInfos per task
    retries: int = 1  # lost Ray workers only
    declarations: str | None = None
    seed: int = 0
    flush_s: float = 2.0
    progress: bool | None = None
    command: str = ""


@dataclass
class OpSweepSummary:
    run_id: str
    opinfos: int
    units: int  # OpInfo x dtype asked for
    already_done: int
    rows: int
    statuses: dict[str, int]
    seconds: float


def _versions(device: Any) -> dict[str, Any]:
    from importlib import metadata

    from sweep.driver import software_versions

    versions = software_versions(device)
    try:
        expecttest = metadata.version("expecttest")
    except metadata.PackageNotFoundError:
        expecttest = None
    keep = (
        "torch_version",
        "ray_version",
        "device_package_version",
        "project_version",
        "git_sha",
        "python_version",
        "hostname",
    )
    return {**{k: versions.get(k) for k in keep}, "expecttest_version": expecttest}


def completed_units(store: Store, run_id: str) -> set[tuple[str, str]]:
    """(OpInfo, dtype) pairs that already have their rows in this run."""
    table = store.read("ops", run_id, columns=["opinfo", "dtype"])
    return set(
        zip(table.column("opinfo").to_pylist(), table.column("dtype").to_pylist(), strict=True)
    )


def run_op_sweep(config: OpSweepConfig) -> OpSweepSummary:
    """Run (or resume) an op sweep; returns what was done. Raises UsageError for bad settings."""
    from runners.devices import get_device
    from runners.op_sweep.isolation import SweepOptions, Unit
    from runners.op_sweep.opdb import INPUTS, get_opinfo, select_opinfos

    start = time.monotonic()
    if config.inputs not in INPUTS:
        raise UsageError(f"--inputs must be one of {', '.join(INPUTS)}, not {config.inputs!r}")
    if config.group_size < 1:
        raise UsageError("--group-size must be at least 1")
    keys = select_opinfos(config.ops)
    device = get_device(config.device, **config.device_options)
    if config.declarations:
        from runners.op_sweep.declarations import load_declarations

        load_declarations(device.name, config.declarations)  # a bad file fails now, not per task
    store = Store(config.store)
    run_id = check_run_id(config.run_id) if config.run_id else new_run_id()
    previous = _latest_op_run(store, run_id)
    if previous is not None:
        _check_same_settings(previous, config, device.name)
    profile, profile_hash = device.profile_info()
    run_row = {
        "run_id": run_id,
        "status": "running",
        "started_at": previous["started_at"] if previous else utcnow(),
        "device": device.name,
        "device_emulated": device.emulated,
        "device_profile": profile,
        "device_profile_hash": profile_hash,
        "dtypes": ",".join(config.dtypes),
        "inputs": config.inputs,
        "opinfos_requested": len(keys),
        "opinfo_filter": ",".join(config.ops) if config.ops else None,
        "command": config.command,
        **_versions(device),
    }
    store.write("op_runs", run_id, [{**run_row, "updated_at": utcnow()}])
    done = completed_units(store, run_id)
    units: list[Unit] = []
    for key in keys:
        todo = tuple(d for d in config.dtypes if (key, d) not in done)
        if todo:
            op = get_opinfo(key)
            units.append(Unit(key, op.name, op.variant_test_name or None, todo))
    groups = [units[i : i + config.group_size] for i in range(0, len(units), config.group_size)]
    opts = SweepOptions(
        device=config.device,
        device_options=config.device_options,
        inputs=config.inputs,
        timeout_s=config.timeout_s,
        seed=config.seed,
        declarations=config.declarations,
    )
    context = {
        "device": device.name,
        "device_emulated": device.emulated,
        "device_profile": profile,
        "device_profile_hash": profile_hash,
    }
    statuses: Counter[str] = Counter()
    pending: list[dict[str, Any]] = []
    last_flush = time.monotonic()
    n_rows = 0
    interrupted = True
    try:
        with SweepProgress(len(units), description=f"ops {run_id}", enabled=config.progress) as bar:
            for group, rows, worker in _execute(groups, opts, config):
                finished = utcnow()
                for row in rows:
                    row.update(context, worker=worker, finished_at=finished)
                    statuses[row["status"]] += 1
                pending += rows
                n_rows += len(rows)
                for unit in group:
                    bar.advance(_headline({r["status"] for r in rows if r["opinfo"] == unit.key}))
                if time.monotonic() - last_flush >= config.flush_s or len(pending) >= 20_000:
                    store.write("ops", run_id, pending)
                    pending, last_flush = [], time.monotonic()
            store.write("ops", run_id, pending)
            pending = []
        write_summary(store, run_id)
        interrupted = False
    finally:
        if pending:
            store.write("ops", run_id, pending)
        state = "interrupted" if interrupted else "finished"
        store.write("op_runs", run_id, [{**run_row, "status": state, "updated_at": utcnow()}])
    return OpSweepSummary(
        run_id=run_id,
        opinfos=len(keys),
        units=len(keys) * len(config.dtypes),
        already_done=len(done),
        rows=n_rows,
        statuses=dict(statuses),
        seconds=time.monotonic() - start,
    )


def _headline(statuses: set[str]) -> str:
    """An OpInfo's worst outcome, for the progress counts."""
    for status in ("crash", "timeout", "fail", "wrong", "pass"):
        if status in statuses:
            return status
    return "skip"


def write_summary(store: Store, run_id: str) -> None:
    """The per-op summary of the run, from its rows (replaces earlier summaries of the run)."""
    from reports.op_sweep import summary_rows_from_store

    rows = summary_rows_from_store(store, run_id)
    older = store.part_files("op_summary", run_id)
    if store.write("op_summary", run_id, rows) is not None or not rows:
        for path in older:
            store.fs.delete_file(path)


def _latest_op_run(store: Store, run_id: str) -> dict[str, Any] | None:
    rows = store.read("op_runs", run_id).to_pylist()
    return max(rows, key=lambda r: r["updated_at"]) if rows else None


def _check_same_settings(previous: dict[str, Any], config: OpSweepConfig, device: str) -> None:
    for key, want in (
        ("device", device),
        ("dtypes", ",".join(config.dtypes)),
        ("inputs", config.inputs),
    ):
        have = previous.get(key)
        if have and want and have != want:
            raise UsageError(
                f"op run {previous['run_id']} was started with {key}={have}, not {want}",
                hint="resume with the same settings, or start a new run without --run-id",
            )


# ---- executors ----------------------------------------------------------------------------


def run_op_group(units: list[Any], opts: Any) -> tuple[list[dict[str, Any]], str]:
    """One task: every sample of a few OpInfos, each OpInfo x dtype in isolated children."""
    from runners.op_sweep.isolation import run_units_isolated
    from runners.op_sweep.opdb import op_db

    op_db()  # import once per worker process, before forking children
    rows = list(run_units_isolated(units, opts))
    return rows, f"{socket.gethostname()}:{os.getpid()}"


def _execute(
    groups: list[list[Any]], opts: Any, config: OpSweepConfig
) -> Iterator[tuple[list[Any], list[dict[str, Any]], str]]:
    if not groups:
        return iter(())
    if config.executor == "local":
        return ((g, *run_op_group(g, opts)) for g in groups)
    if config.executor == "ray":
        return _execute_ray(groups, opts, config)
    raise UsageError(f"unknown executor {config.executor!r} (use ray or local)")


def _ray_task(units: list[Any], opts: Any) -> tuple[list[dict[str, Any]], str]:
    import ray

    rows, _ = run_op_group(units, opts)
    node = ray.get_runtime_context().get_node_id()
    return rows, f"ray:{node[:12]}:{os.getpid()}"


def _execute_ray(
    groups: list[list[Any]], opts: Any, config: OpSweepConfig
) -> Iterator[tuple[list[Any], list[dict[str, Any]], str]]:
    from sweep.executors import init_ray

    ray = init_ray(config.address, config.num_cpus)
    from ray.exceptions import NodeDiedError, OutOfMemoryError, RayTaskError, WorkerCrashedError

    remote = ray.remote(num_cpus=1, max_retries=0)(_ray_task)
    slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
    queue = list(reversed(groups))
    inflight: dict[Any, tuple[list[Any], int]] = {}

    def submit(group: list[Any], attempt: int) -> None:
        inflight[remote.remote(group, opts)] = (group, attempt)

    while queue or inflight:
        while queue and len(inflight) < slots:
            submit(queue.pop(), 1)
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
        for ref in ready:
            group, attempt = inflight.pop(ref)
            try:
                rows, worker = ray.get(ref)
            except (WorkerCrashedError, NodeDiedError, OutOfMemoryError, RayTaskError) as exc:
                if attempt <= config.retries and not isinstance(exc, RayTaskError):
                    submit(group, attempt + 1)
                    continue
                rows, worker = _lost_group_rows(group, exc), "ray"
            yield group, rows, worker


def _lost_group_rows(group: list[Any], exc: BaseException) -> list[dict[str, Any]]:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return [
        {
            **unit.meta(dtype),
            "sample_index": None,
            "phase": "forward",
            "status": OpStatus.CRASH.value,
            "error_type": type(exc).__name__,
            "error_message": text[:500],
            "error_signature": f"{type(exc).__name__}: the Ray task was lost",
        }
        for unit in group
        for dtype in unit.dtypes
    ]
