"""The model sweep's driver: settings and the run's lifecycle, then the run loop over the
streamed catalog.

The parts, one module each: `sweep.session` (the one run lifecycle both sweeps enter: the
device check, the run lock, damaged parts, the resume check, the run's row, the writer, the
progress line and the executor), `sweep.loop` (the run loop: planning that streams, dedup,
rows), `sweep.executors` (Ray or local: where plan and model tasks run, the fault policy),
`sweep.writer` (buffered rows flushed as atomic parts), `sweep.ledger` (what the run remembers
about every dedup group, on disk), `sweep.plan` and `sweep.rows` (what a task and a row are).
The op sweep (`sweep.op_driver`) runs on the same session, executors and writer.

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
- a device that fails its check before any model runs (`runners.preflight`) stops the
  run with one error (exit 3) before anything is written;
- one driver per run id (`reports.locks`); a resume must match every setting that changes a
  row (`ModelRun.row_settings`); damaged part files are put aside and their models run again.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa

from ground.errors import SystemFaultError, UsageError
from ground.schema import Stage, Status
from model_configs.catalog import CatalogStream, open_catalog
from model_configs.spec import CatalogEntry, TinySpec
from reports.store import Store
from runners import faults
from runners.distributed import check_world_size
from runners.isolation import warm_for
from runners.outcome import ModelOutcome, failed_before
from runners.settings import ModelSettings
from sweep.executors.fault_policy import gave_up_error
from sweep.executors.protocol import OomFn, PlanFn, Planner, RunFn
from sweep.ledger import Ledger
from sweep.loop import RunLoop
from sweep.plan import Planned
from sweep.plans import PlanCache, PlanKeys
from sweep.reuse import KeyContext, reusable, source_runs
from sweep.rows import RunContext
from sweep.session import MODEL_SWEEP, RunSession, Warn
from sweep.settings import ModelRun


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
    plans_reused: int = 0  # entries whose plan was taken from an earlier run (`sweep.plans`)
    started_executor: bool = True  # False: nothing to plan or run, no Ray was started
    reuse_sources: list[str] = field(default_factory=list)  # the runs offered, newest first
    # the run's dtypes; with several, every count above is of (model, dtype) pairs
    dtypes: list[str] = field(default_factory=lambda: ["fp32"])


# ---- task bodies (what runs on a worker) -----------------------------------------------------


def model_task(spec: TinySpec, settings: ModelSettings) -> ModelOutcome:
    """The body of one model task: its stages in an isolated child process, then, if they
    failed, the switches of the model's own code worth a run (`runners.alternatives`)."""
    from runners.alternatives import try_alternatives
    from runners.isolation import run_isolated

    faults.inject_spec("task", spec)
    outcome = run_isolated(spec, settings)
    outcome.alternatives = try_alternatives(spec, settings, outcome)
    return outcome


def plan_task(
    entries: Sequence[CatalogEntry], stages: list[str], config_dir: str | None
) -> list[Planned]:
    from sweep.plan import plan_batch

    return plan_batch(entries, stages, config_dir)


def model_oom(stages: Sequence[Stage]) -> OomFn:
    """What a model task says when Ray's memory monitor killed its worker: the node ran out of
    memory while that model ran (its `oom`, never retried)."""

    def outcome(task: Any, cause: str) -> ModelOutcome:
        return failed_before(
            list(stages),
            Status.OOM,
            "OutOfMemoryError",
            "Ray's memory monitor killed the worker running this model "
            f"(the node ran short of memory): {cause}",
        )

    return outcome


def plan_oom(stages: Sequence[Stage]) -> Callable[[str], ModelOutcome]:
    """What a model says when planning it alone ran the node out of memory."""

    def outcome(cause: str) -> ModelOutcome:
        message = f"planning ran out of memory: {cause}"
        return failed_before(list(stages), Status.OOM, "OutOfMemoryError", message)

    return outcome


def select_entries(stream: CatalogStream, run: ModelRun) -> Iterator[CatalogEntry]:
    """The entries this run is asked for, in rank order (or in `--models` order), streamed;
    each model once, however often the catalog or `--models` names it."""
    return _once(_selected(stream, run))


def _once(entries: Iterator[CatalogEntry]) -> Iterator[CatalogEntry]:
    seen: set[str] = set()  # model ids only: about 100 bytes a model
    for entry in entries:
        if entry.model_id not in seen:
            seen.add(entry.model_id)
            yield entry


def _selected(stream: CatalogStream, run: ModelRun) -> Iterator[CatalogEntry]:
    if run.models:
        wanted = set(run.models)
        found = {e.model_id: e for e in stream.entries() if e.model_id in wanted}
        missing = [m for m in run.models if m not in found]
        if missing:
            raise UsageError(
                f"not in catalog {stream.name}: {', '.join(missing)}",
                hint="use 'hfsweep check MODEL' for a model outside the catalog",
            )
        return iter([found[m] for m in dict.fromkeys(run.models)])
    entries = stream.entries()
    return entries if run.top is None else itertools.islice(entries, run.top)


@dataclass
class Progress:
    """What a run already has: per dtype, the model ids with rows at it (one compact Arrow array
    each); and, filled as the entries still to run stream past, the dtypes a model still needs
    where that is not every dtype of the run (a model a kill left half done: a few)."""

    done: dict[str, pa.Array]
    requested: int = 0  # (model, dtype) pairs the run asks for
    already: int = 0  # of those, pairs with rows
    pending: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _progress(store: Store, run_id: str, stream: CatalogStream, run: ModelRun) -> Progress:
    """Which (model, dtype) pairs already have rows in the run, how many pairs the run asks for
    and how many of those are done: two counting passes over the catalog, nothing kept."""
    import pyarrow.compute as pc

    table = store.read("results", run_id, columns=["model_id", "dtype"])
    done = {}
    for dtype in run.dtypes:
        ids = table.filter(pc.equal(table["dtype"], dtype)) if table.num_rows else table
        unique = ids.column("model_id").unique()
        done[dtype] = unique.combine_chunks() if isinstance(unique, pa.ChunkedArray) else unique
    progress = Progress(done)
    models = sum(1 for _ in select_entries(stream, run))
    progress.requested = models * len(run.dtypes)
    left = sum(len(d) for _, d in _not_done(select_entries(stream, run), progress))
    progress.pending.clear()
    progress.already = progress.requested - left
    return progress


def _not_done(
    entries: Iterator[CatalogEntry], progress: Progress
) -> Iterator[tuple[CatalogEntry, tuple[str, ...]]]:
    """Entries with a dtype that has no rows in the run yet, with those dtypes (a model that
    needs only some is also noted in `progress.pending`)."""
    import pyarrow.compute as pc

    dtypes = tuple(progress.done)
    while chunk := list(itertools.islice(entries, 1024)):
        ids = pa.array([e.model_id for e in chunk])
        seen = {
            d: (pc.is_in(ids, value_set=done).to_pylist() if len(done) else [False] * len(chunk))
            for d, done in progress.done.items()
        }
        for i, entry in enumerate(chunk):
            left = tuple(d for d in dtypes if not seen[d][i])
            if not left:
                continue
            if len(left) < len(dtypes):
                progress.pending[entry.model_id] = left
            yield entry, left


def _entries(pairs: Iterator[tuple[CatalogEntry, tuple[str, ...]]]) -> Iterator[CatalogEntry]:
    return (entry for entry, _ in pairs)


def run_sweep(
    run: ModelRun,
    *,
    plan_fn: PlanFn | None = None,
    run_fn: RunFn | None = None,
    warn: Warn | None = None,
) -> RunSummary:
    """Run (or resume) a sweep; returns what was done. Raises UsageError for bad settings (a
    resume with other settings, a run another driver holds), DeviceCheckError when the device
    fails its check before any model runs, SystemFaultError when the environment keeps failing
    task after task.

    `plan_fn` / `run_fn` replace the bodies of plan and model tasks (benches of the driver; a
    `run_fn` stand-in runs no model on the device, so the device is not checked); `warn` gets
    one line per problem found in the store (default: stderr)."""
    start = time.monotonic()
    stream = open_catalog(run.catalog)
    offline_unless_the_hub_answers(warn or _stderr)
    device = run.task.device.build()  # unknown name: UsageError
    check_world_size(run.task)  # more ranks than the machine holds: UsageError
    settings = run.row_settings(device, stream)
    stages = [s.value for s in run.task.stages]
    planner = Planner(
        fn=plan_fn or plan_task,
        stages=stages,
        config_dir=str(stream.config_dir) if stream.config_dir.is_dir() else None,
        on_oom=plan_oom(run.task.stages),
    )
    with RunSession(
        MODEL_SWEEP,
        run.job,
        run.task.device,
        settings=settings,
        run_fn=run_fn or model_task,
        planner=planner,
        on_oom=model_oom(run.task.stages),
        check_device=run_fn is None,
        # a `--local` driver forks its tasks' children: warmed as a task would warm it
        warm=partial(warm_for, run.task) if run_fn is None else None,
        warn=warn,
    ) as session:
        store, run_id = session.store, session.run_id
        sources = source_runs(store, run.reuse, run_id)  # a run id not in the store: refused
        context = RunContext.of(run_id, device, run.task.dtype)
        progress = _progress(store, run_id, stream, run)
        requested, already = progress.requested, progress.already
        session.start(
            {
                "catalog_size": stream.size,
                "models_requested": requested,
                "nightly": run.nightly,
                "reuse": run.reuse or None,
            },
            total=requested - already,
        )
        with Ledger(dedup=run.dedup, key_of=KeyContext.of(settings).key) as ledger:
            if already:
                ledger.resume(store, run_id)  # groups that ran before the kill stay done
            for earlier in reusable(store, sources):  # newest first: the first per key wins
                ledger.offer(earlier)
            todo = _entries(_not_done(select_entries(stream, run), progress))
            plans = PlanCache.load(store, sources, PlanKeys.of(stages, planner.config_dir))
            # Ray starts with the first task: a night whose every plan and outcome is reused
            # starts none (nor does the resume of a finished run)
            ready = time.monotonic()
            loop = RunLoop(
                session.executor,
                ledger,
                session.writer,
                context,
                settings_at=run.at,
                plan_batch=run.plan_batch,
                on_model=lambda outcome, n: session.progress.advance(outcome, n=n),
                on_planned=session.progress.plan_done,
                dtypes=run.dtypes,
                pending=progress.pending,
                plans=plans,
            )
            loop.run_entries(todo)
        session.end(incomplete=bool(loop.abandoned))
    executor = session.executor
    return RunSummary(
        run_id=run_id,
        requested=requested,
        already_done=already,
        skipped=loop.skipped,
        tasks=ledger.unique,
        models_run=loop.models_run,
        seconds=time.monotonic() - start,
        timings=loop.timings,
        startup_s=ready - start + executor.start_s,
        abandoned=loop.abandoned,
        causes=loop.causes,
        damaged_parts=session.opened.damaged,
        reused=loop.reused,
        reused_tasks=ledger.reused,
        plans_reused=plans.hits,
        started_executor=executor.started,
        reuse_sources=sources,
        dtypes=list(run.dtypes),
    )


def offline_unless_the_hub_answers(warn: Warn) -> None:
    """Online (no `HF_HUB_OFFLINE`), ask the Hub once, before planning, whether it answers.
    If it does not, say so in one line and plan as offline: each model from its cached configs
    or its library's defaults, labelled so in `config_source`, as `HF_HUB_OFFLINE=1` would
    (set in this process's environment, which the run's local workers and children inherit,
    and forwarded to the workers of a cluster given by `--address`). Without this, a machine
    without the Hub waits out every model's timeout and retries in turn."""
    import os

    from ground import settings
    from model_configs.hub import PROBE_S, unreachable

    if settings.hub_offline():
        return
    why = unreachable()
    if why is None:
        return
    os.environ["HF_HUB_OFFLINE"] = "1"
    warn(
        f"the Hub does not answer ({why}; one try of {PROBE_S:.0f} s): planning offline, each "
        "model from its cached configs or its library's defaults (set HF_HUB_OFFLINE=1 to skip "
        "this check)"
    )


def _stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def abandoned_error(summary: RunSummary) -> SystemFaultError:
    """The one error for models the environment kept from running (they have no rows)."""
    return gave_up_error(summary.run_id, summary.abandoned, summary.causes, ("model", "models"))
