"""DuckDB over the store's Parquet files, with a per-run model summary kept up to date.

Every aggregation in `reports/` goes through `StoreQuery`: it lists part files with
`Store.part_files` (so uncommitted fallback parts stay invisible), keys its caches by the files of
each run and their modification times, and summarises each run once into an in-memory table
`model_runs` (one row per run x model x dtype) that the model table, the funnel and the diff query.
Part files are never read by path: a query names `Scan`s, which the store turns into pyarrow
datasets over its filesystem (local or an object store) and DuckDB reads as tables.
Queries are parameterised; identifiers never come from users.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import duckdb

from ground.errors import StoreError
from ground.schema import (
    FAILED_STATUSES,
    STAGE_ORDER,
    UNVERIFIED_EVIDENCE,
    CompileEvidence,
    SkipReason,
    Status,
    run_dtypes,
)
from ground.sizing_columns import SUMMARY_SIZING_COLUMNS, with_sizing
from reports.store import Store

T = TypeVar("T")

FAILED = tuple(sorted(s.value for s in FAILED_STATUSES))
STAGES = tuple(s.value for s in STAGE_ORDER)

# Outcome of one model in one run (closed vocabulary, derived from its stage rows).
OUTCOME_SKIPPED = "skipped"  # every stage skipped: the model was not attempted
OUTCOME_FAILED = "failed"  # some stage failed (fail, fail_accuracy, timeout, crash, oom)
OUTCOME_PASSED = "passed"  # every applicable stage passed
OUTCOME_PARTIAL = "partial"  # nothing failed, but a stage was skipped for a device reason
OUTCOMES = (OUTCOME_PASSED, OUTCOME_PARTIAL, OUTCOME_FAILED, OUTCOME_SKIPPED)

_FAILED_SQL = ", ".join(f"'{s}'" for s in FAILED)
_STAGE_IDX_SQL = "CASE stage " + " ".join(f"WHEN '{s}' THEN {i}" for i, s in enumerate(STAGES))
_STAGE_IDX_SQL += " ELSE 99 END"
_NA = SkipReason.NOT_APPLICABLE.value
# Skips that say the model has nothing to run there, not that the device stopped it: a model
# that passes everything else has passed (the tp stage of a model without a plan).
_NOT_A_STOP = f"('{_NA}', '{SkipReason.NO_TP_PLAN.value}')"
_UNVERIFIED = ", ".join(f"'{e.value}'" for e in UNVERIFIED_EVIDENCE)
_NEWER = CompileEvidence.NEWER_THAN_PROFILE.value

_RESULT_COLUMN_NAMES = (
    "run_id",
    "model_id",
    "rank",
    "downloads",
    "library",
    "pipeline_tag",
    "model_type",
    "architecture",
    "config_source",
    "quantization",
    "config_hash",
    "shrunk_config_hash",
    "device",
    "device_emulated",
    "dtype",
    "stage",
    "status",
    "reason",
    "error_type",
    "error_message",
    "error_signature",
    "failing_op",
    "compile_evidence",
    "sharding_evidence",
    "duration_s",
    "fallback_op_count",
    "fallback_call_count",
    "wall_s",
    "peak_host_memory_bytes",
    "peak_memory_bytes",
    "attempt",
    "finished_at",
    "reused_from",
    "dedup_of",
)
_RESULT_COLUMNS = ", ".join(_RESULT_COLUMN_NAMES)

# Per stage: its status, its ops that fell back, and whether it does not apply to the model
# (`n_`: a `not_applicable` skip, e.g. generate on an encoder: not in that stage's base).
_STAGE_STATUS_SQL = ",\n".join(
    f"  max(status) FILTER (WHERE stage = '{s}') AS s_{s},\n"
    f"  max(fallback_op_count) FILTER (WHERE stage = '{s}') AS f_{s},\n"
    f"  coalesce(bool_or(status = 'skip' AND reason = '{_NA}') FILTER (WHERE stage = '{s}'),"
    f" false) AS n_{s}"
    for s in STAGES
)

# Keeps the latest attempt of each (model, dtype, stage) when a run holds several (a retry).
_DEDUP_SQL = """
  QUALIFY row_number() OVER (
    PARTITION BY model_id, dtype, stage
    ORDER BY attempt DESC NULLS LAST, finished_at DESC NULLS LAST) = 1"""

# One row per (run, model, dtype): a run may sweep each model at several dtypes. `part_no` is the
# part file of the model's rows at that dtype: its 1-based position in $files.
SUMMARY_SQL = f"""
WITH raw AS (
  SELECT {_RESULT_COLUMNS}, {_STAGE_IDX_SQL} AS stage_idx,
    list_position($files, filename) + $offset AS part_no
  FROM results_parts
),
r AS (
  SELECT * FROM raw{{dedup}}
)
SELECT
  any_value(run_id) AS run_id,
  model_id,
  min(rank) AS rank,
  coalesce(max(downloads), 0) AS downloads,
  any_value(library) AS library,
  any_value(pipeline_tag) AS pipeline_tag,
  any_value(model_type) AS model_type,
  any_value(architecture) AS architecture,
  any_value(config_source) AS config_source,
  any_value(quantization) AS quantization,
  any_value(config_hash) AS config_hash,
  any_value(shrunk_config_hash) AS shrunk_config_hash,
  any_value(device) AS device,
  bool_or(device_emulated) AS device_emulated,
  dtype,
{_STAGE_STATUS_SQL},
  CASE
    WHEN bool_and(status = 'skip') THEN '{OUTCOME_SKIPPED}'
    WHEN bool_or(status IN ({_FAILED_SQL})) THEN '{OUTCOME_FAILED}'
    WHEN bool_and(status = 'pass' OR (status = 'skip' AND reason IN {_NOT_A_STOP}))
      THEN '{OUTCOME_PASSED}'
    ELSE '{OUTCOME_PARTIAL}'
  END AS outcome,
  arg_min(reason, stage_idx) FILTER (WHERE status = 'skip' AND coalesce(reason, '') <> '{_NA}')
    AS skip_reason,
  arg_min(stage, stage_idx) FILTER (WHERE status IN ({_FAILED_SQL})) AS failed_stage,
  arg_min(status, stage_idx) FILTER (WHERE status IN ({_FAILED_SQL})) AS failed_status,
  arg_min(error_type, stage_idx) FILTER (WHERE status IN ({_FAILED_SQL})) AS error_type,
  arg_min(error_signature, stage_idx) FILTER (WHERE status IN ({_FAILED_SQL})) AS error_signature,
  arg_min(failing_op, stage_idx) FILTER (WHERE status IN ({_FAILED_SQL})) AS failing_op,
  arg_min(compile_evidence, stage_idx) FILTER (WHERE status IN ({_FAILED_SQL}))
    AS failed_evidence,
  arg_min(error_message, stage_idx) FILTER (WHERE status IN ({_FAILED_SQL})) AS error_message,
  -- (a skip's message repeats on every model skipped for the same reason: kept short)
  left(arg_min(error_message, stage_idx)
    FILTER (WHERE status = 'skip' AND coalesce(reason, '') <> '{_NA}'), 300) AS skip_message,
  -- a stage passed on a verdict no evidence decides (a compiler's, or a collective newer than
  -- the device's profile): counted in a band's upper bound
  coalesce(bool_or(status = 'pass' AND (compile_evidence IN ({_UNVERIFIED})
    OR sharding_evidence = '{_NEWER}')), false) AS unverified,
  bool_or(compile_evidence IS NOT NULL) AS evidence_recorded,
  count(*) FILTER (WHERE status = 'pass') AS stages_passed,
  coalesce(max(fallback_op_count), 0) AS fallback_ops,
  coalesce(sum(fallback_call_count), 0) AS fallback_calls,
  sum(duration_s) AS duration_s,
  max(wall_s) AS wall_s,
  max(peak_host_memory_bytes) AS peak_host_memory_bytes,
  max(peak_memory_bytes) AS peak_device_memory_bytes,
  max(finished_at) AS finished_at,
  max(part_no) AS part_no,  -- parts sort by time: the latest part that has the model
  any_value(reused_from) AS reused_from,  -- the earlier run its rows were copied from
  any_value(dedup_of) AS dedup_of  -- the model whose tiny model's rows these are, if shared
FROM r
GROUP BY model_id, dtype
"""

# The same, with the number of distinct ops that fell back (any stage) from the fallbacks table.
# A fallback row's dtype is null in parts written when a run had one dtype: it is that one's.
SUMMARY_WITH_FALLBACKS_SQL = f"""
WITH s AS ({SUMMARY_SQL}),
fb AS (
  SELECT model_id, dtype, count(DISTINCT op) AS n_ops
  FROM fallback_parts GROUP BY model_id, dtype
),
per AS (
  SELECT s.model_id, s.dtype, max(fb.n_ops) AS n_ops
  FROM s JOIN fb ON fb.model_id = s.model_id AND s.dtype = coalesce(fb.dtype, s.dtype)
  GROUP BY ALL
)
SELECT s.* REPLACE (greatest(coalesce(per.n_ops, 0), s.fallback_ops) AS fallback_ops)
FROM s LEFT JOIN per USING (model_id, dtype)
"""

# A query's dtype scope (`$dtype` null: every dtype of the run), and a fallback row's match to
# its model's summary row (the fallback's dtype is null in parts from single-dtype runs).
IN_DTYPE = "($dtype IS NULL OR dtype = $dtype)"


def in_dtype(alias: str) -> str:
    """`IN_DTYPE` for a table alias (`s` -> `($dtype IS NULL OR s.dtype = $dtype)`)."""
    return f"($dtype IS NULL OR {alias}.dtype = $dtype)"


def same_dtype(fallback: str, summary: str) -> str:
    """A fallback row (alias `fallback`) belongs to the summary row (alias `summary`)."""
    return f"{summary}.dtype = coalesce({fallback}.dtype, {summary}.dtype)"


_MODEL_RUNS_DDL = f"""
CREATE TABLE IF NOT EXISTS model_runs (
  run_id VARCHAR, model_id VARCHAR, rank INTEGER, downloads BIGINT, library VARCHAR,
  pipeline_tag VARCHAR, model_type VARCHAR, architecture VARCHAR, config_source VARCHAR,
  quantization VARCHAR, config_hash VARCHAR, shrunk_config_hash VARCHAR, device VARCHAR,
  device_emulated BOOLEAN,
  dtype VARCHAR,
  {", ".join(f"s_{s} VARCHAR, f_{s} INTEGER, n_{s} BOOLEAN" for s in STAGES)},
  outcome VARCHAR, skip_reason VARCHAR, failed_stage VARCHAR, failed_status VARCHAR,
  error_type VARCHAR, error_signature VARCHAR, failing_op VARCHAR, failed_evidence VARCHAR,
  error_message VARCHAR,
  skip_message VARCHAR, unverified BOOLEAN, evidence_recorded BOOLEAN, stages_passed INTEGER,
  fallback_ops BIGINT, fallback_calls BIGINT, duration_s DOUBLE, wall_s DOUBLE,
  peak_host_memory_bytes BIGINT, peak_device_memory_bytes BIGINT,
  finished_at TIMESTAMPTZ, part_no INTEGER, reused_from VARCHAR, dedup_of VARCHAR,
  {SUMMARY_SIZING_COLUMNS}
)
"""


@dataclass(frozen=True)
class Scan:
    """Part files of one table, queried as a table named in the SQL (`filename`: with each
    row's part path in a `filename` column; `columns`: only those, which `filename` needs)."""

    table: str
    files: Sequence[str]
    columns: Sequence[str] | None = None
    filename: bool = False


@dataclass(frozen=True)
class RunFiles:
    """The committed part files of one run, with a fingerprint that changes when they do."""

    results: tuple[str, ...]
    fallbacks: tuple[str, ...]
    fingerprint: tuple[tuple[str, int, int], ...]
    configs: tuple[str, ...] = ()
    alternatives: tuple[str, ...] = ()  # a failing model run again with its own switches


class RunsQuery:
    """What the model store's query and the op store's share: a run's row from `runs()`, and a
    memo of built answers that holds while the run's files are the same (`memo_fingerprint`:
    what says so, and reads the run in where the query keeps it loaded)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._memo: dict[tuple[Any, ...], tuple[Any, Any]] = {}

    def runs(self) -> list[dict[str, Any]]:
        """One dict per run, newest first."""
        raise NotImplementedError

    def memo_fingerprint(self, run_id: str | None) -> Any:
        """What changes when the run's files do (`None`: any run's)."""
        raise NotImplementedError

    def run_info(self, run_id: str) -> dict[str, Any] | None:
        return next((r for r in self.runs() if r["run_id"] == run_id), None)

    def memo(self, name: str, run_id: str | None, build: Callable[[], T], *extra: Any) -> T:
        """Cache `build()` under (name, run, extra) until that run's files (or, for run None,
        any run's files) change."""
        fp = self.memo_fingerprint(run_id)
        key = (name, run_id, *extra)
        hit = self._memo.get(key)
        if hit is not None and hit[0] == fp:
            return hit[1]  # type: ignore[no-any-return]
        value = build()
        with self._lock:
            self._memo[key] = (fp, value)
        return value


class StoreQuery(RunsQuery):
    """Cached, thread-safe read access to one store.

    `refresh_s` is how long a listing of the part files is trusted before the store is listed
    again (0: on every call). Caches are per run: a sweep writing into tonight's run leaves the
    summaries of earlier runs in place.
    """

    def __init__(self, store: Store | str, *, refresh_s: float = 0.0, threads: int | None = None):
        super().__init__()  # its lock guards listing, memo and bookkeeping
        self.store = store if isinstance(store, Store) else Store(store)
        self.refresh_s = refresh_s
        self._con = duckdb.connect(":memory:")
        if threads:
            self._con.execute(f"SET threads = {int(threads)}")
        self._con.execute("SET enable_object_cache = true")
        self._con.execute(_MODEL_RUNS_DDL)
        self._run_locks: dict[str, threading.Lock] = {}  # one per run: summaries run in parallel
        self._listed_at = -1.0
        self._files: dict[str, RunFiles] = {}
        self._runs_fp: tuple[tuple[str, int, int], ...] = ()
        self._runs: list[dict[str, Any]] = []
        self._summarised: dict[str, tuple[tuple[str, int, int], ...]] = {}
        self._summary_parts: dict[str, tuple[str, ...]] = {}
        self.warming = False  # True while `warm` summarises every run

    # ---- listing -------------------------------------------------------------------------

    def refresh(self, *, force: bool = False) -> None:
        """List the store's part files again if the listing is older than `refresh_s`."""
        with self._lock:
            now = time.monotonic()
            if not force and self._listed_at >= 0 and now - self._listed_at < self.refresh_s:
                return
            tables = ("results", "fallbacks", "configs", "alternatives", "runs")
            listed = {t: self.store.part_infos(t) for t in tables}
            stats = {p: (mtime, size) for infos in listed.values() for p, mtime, size in infos}
            results, fallbacks, configs, alternatives, runs = (
                [p for p, _, _ in listed[t]] for t in tables
            )
            by_run: dict[str, tuple[list[str], list[str], list[str], list[str]]] = {}
            for i, paths in enumerate((results, fallbacks, configs, alternatives)):
                for path in paths:
                    by_run.setdefault(_run_of(path), ([], [], [], []))[i].append(path)
            # configs and alternatives parts are written with their results part: results
            # fingerprint them
            self._files = {
                run: RunFiles(
                    tuple(res),
                    tuple(fb),
                    tuple((p, *stats[p]) for p in (*res, *fb)),
                    tuple(cf),
                    tuple(alt),
                )
                for run, (res, fb, cf, alt) in by_run.items()
                if res
            }
            runs_fp = tuple((p, *stats[p]) for p in runs)
            if runs_fp != self._runs_fp:
                self._runs = self.store.runs()
                self._runs_fp = runs_fp
            self._listed_at = now

    def files(self, run_id: str) -> RunFiles:
        self.refresh()
        return self._files.get(run_id) or RunFiles((), (), ())

    def runs(self) -> list[dict[str, Any]]:
        """One dict per run, newest first: the runs table, plus runs that only have results."""
        self.refresh()
        known = {r["run_id"] for r in self._runs}
        extra = [
            {"run_id": run, "status": "unknown", "started_at": None, "updated_at": None}
            for run in sorted(self._files, reverse=True)
            if run not in known
        ]
        return [*self._runs, *extra]

    def run_ids(self) -> list[str]:
        """Runs that have results, newest first."""
        self.refresh()
        return [r["run_id"] for r in self.runs() if r["run_id"] in self._files]

    def latest_run_id(self) -> str | None:
        ids = self.run_ids()
        return ids[0] if ids else None

    def resolve_run(self, run_id: str | None) -> str:
        """`run_id` if it has results, else the latest run; raises StoreError when none."""
        if run_id is None:
            latest = self.latest_run_id()
            if latest is None:
                raise StoreError(
                    f"the store {self.store.uri!r} has no results yet",
                    hint="run `hfsweep run` first, or pass --store DIR",
                )
            return latest
        if run_id not in self.run_ids():
            known = ", ".join(self.run_ids()[:5]) or "none"
            raise StoreError(
                f"no results for run {run_id!r} in {self.store.uri!r}",
                run_id=run_id,
                hint=f"known runs (newest first): {known}",
            )
        return run_id

    def fingerprint(self, run_id: str) -> tuple[tuple[str, int, int], ...]:
        return self.files(run_id).fingerprint

    # ---- summaries -----------------------------------------------------------------------

    def ensure_summaries(self, run_ids: Sequence[str]) -> None:
        """Bring `model_runs` up to date for these runs.

        A run whose only change is new part files (a sweep in progress) gets just those parts
        summarised: the driver writes every stage of a model in one part, so a model in a new
        part replaces its earlier summary (a retried model). Any other change rebuilds the run.
        """
        for run_id in run_ids:
            files = self.files(run_id)
            if self._summarised.get(run_id) == files.fingerprint:  # fast path, no lock
                continue
            with self._lock:
                run_lock = self._run_locks.setdefault(run_id, threading.Lock())
            # a lock per run: a request for tonight's run never queues behind a warm-up
            # summarising last month's runs
            with run_lock:
                files = self.files(run_id)
                old_fp = self._summarised.get(run_id)
                if old_fp == files.fingerprint:
                    continue
                old_parts = self._summary_parts.get(run_id, ())
                appended = old_fp is not None and set(old_fp) <= set(files.fingerprint)
                if appended:
                    known = set(old_parts)
                    parts = [p for p in files.results if p not in known]
                else:
                    parts = list(files.results)
                names = {p.rsplit("/", 1)[-1] for p in parts}
                fallbacks = [p for p in files.fallbacks if p.rsplit("/", 1)[-1] in names]
                offset = len(old_parts) if appended else 0
                self._summarise(run_id, parts, fallbacks, replace_run=not appended, offset=offset)
                self._summarised[run_id] = files.fingerprint
                self._summary_parts[run_id] = (
                    (*old_parts, *parts) if appended else tuple(files.results)
                )

    def _summarise(
        self,
        run_id: str,
        parts: list[str],
        fallbacks: list[str],
        *,
        replace_run: bool,
        offset: int,
    ) -> None:
        cur = self._con.cursor()
        try:
            params: dict[str, Any] = {"files": parts, "offset": offset}
            scans = {"results_parts": Scan("results", parts, _RESULT_COLUMN_NAMES, filename=True)}
            sql = SUMMARY_SQL
            if fallbacks:
                sql = SUMMARY_WITH_FALLBACKS_SQL
                scans["fallback_parts"] = Scan("fallbacks", fallbacks)
            # The window that keeps the latest attempt costs more than the rest of the summary:
            # use it only when some (model, stage) has several rows.
            dedup = False
            if parts:
                self._register(cur, {"results_all": Scan("results", parts)})
                dedup = bool(
                    cur.execute(
                        "SELECT count(*) > count(DISTINCT (model_id, dtype, stage)) "
                        "FROM results_all"
                    ).fetchall()[0][0]
                )
            sql = sql.replace("{dedup}", _DEDUP_SQL if dedup else "")
            sizing = self.store.part_files("sizing", run_id)
            if sizing:  # each model's full size, by its config (any part of the run has it)
                sql = with_sizing(sql)
                scans["sizing_parts"] = Scan("sizing", sizing)
            cur.execute("BEGIN TRANSACTION")  # readers see the old rows or the new, never none
            try:
                if replace_run:
                    cur.execute("DELETE FROM model_runs WHERE run_id = $run", {"run": run_id})
                if parts:
                    self._register(cur, scans)
                    cur.execute(f"CREATE OR REPLACE TEMP TABLE fresh AS {sql}", params)
                    if not replace_run:
                        cur.execute(
                            "DELETE FROM model_runs WHERE run_id = $run "
                            "AND (model_id, dtype) IN (SELECT model_id, dtype FROM fresh)",
                            {"run": run_id},
                        )
                    cur.execute("INSERT INTO model_runs BY NAME SELECT * FROM fresh")
                    cur.execute("DROP TABLE fresh")
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        finally:
            cur.close()

    def warm(self) -> list[str]:
        """Summarise every run, newest first. While this runs, views over all runs
        (`available_runs`) use the runs summarised so far instead of waiting."""
        self.warming = True
        try:
            return self.ensure_all_summaries()
        finally:
            self.warming = False

    def available_runs(self) -> tuple[list[str], bool]:
        """Runs (newest first) whose summaries views over all runs may use, and whether that is
        every run. Outside a warm-up this summarises whatever is missing."""
        if not self.warming:
            return self.ensure_all_summaries(), True
        ids = self.run_ids()
        ready = [r for r in ids if self._summarised.get(r) == self.files(r).fingerprint]
        return ready, len(ready) == len(ids)

    def summary_part_names(self, run_id: str) -> list[str]:
        """Base names of the results parts behind a run's summary, in `part_no` order."""
        return [p.rsplit("/", 1)[-1] for p in self._summary_parts.get(run_id, ())]

    def summary_part(self, run_id: str, part_no: int | None) -> str | None:
        """The results part file a summary row points at (None if unknown)."""
        parts = self._summary_parts.get(run_id, ())
        if part_no is None or not 1 <= part_no <= len(parts):
            return None
        return parts[part_no - 1]

    def ensure_all_summaries(self) -> list[str]:
        """Summaries of every run with results (and none of runs whose files are gone)."""
        ids = self.run_ids()
        with self._lock:
            for gone in set(self._summarised) - set(ids):
                self.scalar("DELETE FROM model_runs WHERE run_id = $run", {"run": gone})
                del self._summarised[gone]
                self._summary_parts.pop(gone, None)
        self.ensure_summaries(ids)
        return ids

    # ---- queries -------------------------------------------------------------------------

    def _register(self, cur: Any, scans: dict[str, Scan] | None) -> None:
        """Make each scan a table of this cursor (its own connection: others never see it)."""
        for name, scan in (scans or {}).items():
            self.store.register(
                cur,
                name,
                scan.table,
                list(scan.files),
                list(scan.columns) if scan.columns else None,
                filename=scan.filename,
            )

    def fetch(
        self,
        sql: str,
        params: dict[str, Any] | Sequence[Any] | None = None,
        scans: dict[str, Scan] | None = None,
    ) -> list[dict]:
        """Run one parameterised query over `model_runs` and the named scans; rows as dicts."""
        cur = self._con.cursor()
        try:
            self._register(cur, scans)
            cur.execute(sql, params or {})
            names = [d[0] for d in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        finally:
            cur.close()

    def scalar(self, sql: str, params: dict[str, Any] | Sequence[Any] | None = None) -> Any:
        cur = self._con.cursor()
        try:
            row = cur.execute(sql, params or {}).fetchone()
            return row[0] if row else None
        finally:
            cur.close()

    def run_downloads(self, run_id: str, dtype: str | None = None) -> int:
        """The downloads of every model of a run (at `dtype`, when given): the base of its
        download shares."""
        return int(
            self.scalar(
                f"SELECT coalesce(sum(downloads), 0) FROM model_runs WHERE run_id = $run "
                f"AND {IN_DTYPE}",
                {"run": run_id, "dtype": dtype},
            )
        )

    def run_dtypes(self, run_id: str) -> list[str]:
        """The dtypes a run has rows of: in the order its run row lists them (the order asked),
        then any other. One for every run made before a run could sweep several."""

        def build() -> list[str]:
            self.ensure_summaries([run_id])
            seen = [
                r["dtype"]
                for r in self.fetch(
                    "SELECT DISTINCT dtype FROM model_runs WHERE run_id = $run "
                    "AND dtype IS NOT NULL ORDER BY dtype",
                    {"run": run_id},
                )
            ]
            asked = run_dtypes((self.run_info(run_id) or {}).get("dtype"))
            return [d for d in asked if d in seen] + [d for d in seen if d not in asked]

        return list(self.memo("run_dtypes", run_id, build))

    def memo_fingerprint(self, run_id: str | None) -> Any:
        return self.fingerprint(run_id) if run_id else self._all_fingerprint()

    def _all_fingerprint(self) -> tuple[Any, ...]:
        self.refresh()
        return (self._runs_fp, tuple((r, f.fingerprint) for r, f in sorted(self._files.items())))


def _run_of(path: str) -> str:
    return path.rsplit("/", 2)[-2].removeprefix("run_id=")


def placeholders(values: Sequence[Any], prefix: str, params: dict[str, Any]) -> str:
    """`$p0, $p1, ...` for an IN list, adding the values to `params`."""
    names = []
    for i, value in enumerate(values):
        params[f"{prefix}{i}"] = value
        names.append(f"${prefix}{i}")
    return ", ".join(names) or "NULL"


__all__ = [
    "FAILED",
    "IN_DTYPE",
    "OUTCOMES",
    "STAGES",
    "RunFiles",
    "Scan",
    "Status",
    "StoreQuery",
    "in_dtype",
    "placeholders",
    "same_dtype",
]
