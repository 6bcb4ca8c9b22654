"""The op sweep's reading side: denominators, per-op summaries, one op's page, and the join to
the model sweep (the missing-ops ranking gains each op's own pass rate on the device).

An op-sweep run's `ops` rows are read once through `Store.read` (any filesystem the store
supports) into an in-memory DuckDB, and read again only when its part files change. Ops are
joined to the model sweep by base name (`aten::add` for `aten::add.Tensor`, `aten::add_.Tensor`
and `aten::add.out`): a model's fallback names the overload that reached the CPU fallback, the
op sweep the overload a sample dispatched. Queries are parameterised.
"""

from __future__ import annotations

import shlex
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import duckdb

from ground.schema import (
    OP_FAILED_STATUSES,
    OP_SKIP_DEVICE,
    OP_SKIP_PYTORCH,
    OPS_SCHEMA,
    OpSkipReason,
    OpStatus,
)
from reports.coverage import device_label, share
from reports.models import reproduce_command
from reports.ops import NEWER_THAN_PROFILE, missing_ops, unverified_models_by_op
from reports.query import RunsQuery, Scan, StoreQuery, same_dtype
from reports.store import Store

_PYTORCH = ", ".join(f"'{r.value}'" for r in sorted(OP_SKIP_PYTORCH, key=lambda r: r.value))
_DEVICE = ", ".join(f"'{r.value}'" for r in sorted(OP_SKIP_DEVICE, key=lambda r: r.value))
_FAILED = ", ".join(f"'{s.value}'" for s in sorted(OP_FAILED_STATUSES, key=lambda s: s.value))

# Base name of an ATen op, as `runners.devices.aten_names.base_name`: drop the overload and one
# trailing in-place underscore (never a dunder's).
_MACROS = r"""
CREATE MACRO IF NOT EXISTS op_base(o) AS regexp_replace(split_part(o, '.', 1), '([^_])_$', '\1');
"""

_OP_USE_SQL = """
WITH u AS (
  SELECT run_id, opinfo, dtype, sample_index, phase, status, reason, unnest(dispatched) AS d
  FROM ops WHERE run_id = $run AND len(dispatched) > 0
)
SELECT run_id, op_base(d.op) AS op, dtype, opinfo, sample_index, phase,
  any_value(status) AS status, any_value(reason) AS reason,
  bool_or(d.execution = 'failed') AS failed_here,
  bool_or(d.execution = 'fallback') AS fell_back,
  bool_and(d.native_lowering) AS native_lowering,
  list_distinct(list(d.op)) AS overloads,
  list_distinct(flatten(list(d.fallbacks))) AS fallback_overloads,
  sum(d.calls) AS calls
FROM u GROUP BY run_id, op, dtype, opinfo, sample_index, phase
"""

# What an op's samples did, counted (the op sweep's summary and one op's page alike).
_OP_COUNTS_SQL = """count(*) FILTER (WHERE status = 'pass') AS passed,
  count(*) FILTER (WHERE status = 'pass' AND NOT fell_back) AS native,
  count(*) FILTER (WHERE fell_back) AS fallback,
  count(*) FILTER (WHERE failed_here) AS failed,
  count(*) FILTER (WHERE status = 'wrong') AS wrong,
  count(*) FILTER (WHERE status = 'skip') AS skipped"""

SUMMARY_SQL = f"""
SELECT run_id, op, dtype, count(*) AS samples,
  {_OP_COUNTS_SQL},
  count(*) FILTER (WHERE status = 'pass') / nullif(count(*) FILTER (WHERE status = 'pass'
    OR status = 'wrong' OR failed_here), 0) AS pass_rate,
  bool_and(native_lowering) AS native_lowering,
  list_sort(list_distinct(flatten(list(overloads)))) AS overloads,
  list_sort(list_distinct(flatten(list(fallback_overloads)))) AS fallback_overloads,
  list_sort(list_distinct(list(opinfo))) AS opinfos
FROM op_use
WHERE run_id = $run AND NOT (status = 'skip' AND reason IN ({_PYTORCH}))
GROUP BY run_id, op, dtype
"""

_DENOMINATORS_SQL = f"""
SELECT dtype, count(*) AS total,
  count(*) FILTER (WHERE status = 'skip' AND reason IN ({_PYTORCH})) AS skipped_pytorch,
  count(*) FILTER (WHERE status = 'skip' AND reason IN ({_DEVICE})) AS skipped_device,
  count(*) FILTER (WHERE status = 'skip' AND reason IN ({_DEVICE}) AND no_native_lowering)
    AS skipped_device_no_lowering,
  count(*) FILTER (WHERE status <> 'skip') AS run_on_device,
  count(*) FILTER (WHERE status = 'pass') AS passed,
  count(*) FILTER (WHERE status = 'pass' AND coalesce(fallback_op_count, 0) = 0) AS passed_native,
  count(*) FILTER (WHERE status = 'pass' AND fallback_op_count > 0) AS passed_fallback,
  count(*) FILTER (WHERE status IN ({_FAILED})) AS failed,
  count(*) FILTER (WHERE status = 'fail') AS failed_error,
  count(*) FILTER (WHERE status = 'timeout') AS failed_timeout,
  count(*) FILTER (WHERE status = 'crash') AS failed_crash,
  count(*) FILTER (WHERE status = 'oom') AS failed_oom,
  count(*) FILTER (WHERE status = 'not_run') AS not_run,
  count(*) FILTER (WHERE status = 'wrong') AS wrong,
  count(DISTINCT opinfo) AS opinfos,
  count(*) FILTER (WHERE sample_index IS NOT NULL) AS sample_rows,
  sum(duration_s) AS seconds
FROM ops WHERE run_id = $run
GROUP BY GROUPING SETS ((dtype), ())
"""

_REASONS_SQL = """
SELECT reason, dtype, count(*) AS n,
  count(*) FILTER (WHERE no_native_lowering) AS no_native_lowering
FROM ops WHERE run_id = $run AND status = 'skip'
GROUP BY GROUPING SETS ((reason, dtype), (reason)) ORDER BY reason
"""


class OpSweepQuery(RunsQuery):
    """Cached, thread-safe reads of a store's op-sweep runs."""

    def __init__(self, store: Store):
        super().__init__()
        self.store = store
        self._con = duckdb.connect(":memory:")
        self._con.execute(_MACROS)
        self._loaded: dict[str, tuple[Any, ...]] = {}
        self._tables = False
        self._runs_cache: tuple[tuple[Any, ...], list[dict[str, Any]]] | None = None

    # ---- runs ----------------------------------------------------------------------------

    def runs(self) -> list[dict[str, Any]]:
        """One dict per op-sweep run (its latest state), newest first."""
        fp = tuple(self.store.part_infos("op_runs"))  # one listing, no request per part
        if self._runs_cache is not None and self._runs_cache[0] == fp:
            return [dict(r) for r in self._runs_cache[1]]
        rows = self.store.read("op_runs").to_pylist()
        latest: dict[str, dict[str, Any]] = {}
        for row in rows:
            seen = latest.get(row["run_id"])
            if seen is None or row["updated_at"] >= seen["updated_at"]:
                latest[row["run_id"]] = row
        for row in latest.values():
            row["device_label"] = device_label(row.get("device"), row.get("device_emulated"))
        ordered = sorted(
            latest.values(), key=lambda r: r["started_at"] or r["updated_at"], reverse=True
        )
        self._runs_cache = (fp, ordered)
        return [dict(r) for r in ordered]

    def resolve(
        self,
        run_id: str | None = None,
        *,
        device: str | None = None,
        emulated: bool | None = None,
    ) -> str | None:
        """`run_id` if it is an op-sweep run, else the newest run on `device` (with the same
        emulated flag), else None."""
        runs = self.runs()
        if run_id is not None:
            return run_id if any(r["run_id"] == run_id for r in runs) else None
        for r in runs:
            if device is not None and r.get("device") != device:
                continue
            if emulated is not None and bool(r.get("device_emulated")) != bool(emulated):
                continue
            return str(r["run_id"])
        return None

    # ---- loading -------------------------------------------------------------------------

    def fingerprint(self, run_id: str) -> tuple[Any, ...]:
        return tuple(self.store.part_infos("ops", run_id))

    def _ensure(self, run_id: str) -> tuple[Any, ...]:
        fp = self.fingerprint(run_id)
        if self._loaded.get(run_id) == fp:
            return fp
        with self._lock:
            if self._loaded.get(run_id) == fp:
                return fp
            table = self.store.read("ops", run_id)
            cur = self._con.cursor()
            try:
                if not self._tables:
                    cur.register("ops_empty", OPS_SCHEMA.empty_table())
                    cur.execute("CREATE TABLE ops AS SELECT * FROM ops_empty")
                    cur.execute(f"CREATE TABLE op_use AS {_OP_USE_SQL}", {"run": ""})
                    cur.unregister("ops_empty")
                    self._tables = True
                cur.execute("BEGIN TRANSACTION")
                cur.execute("DELETE FROM ops WHERE run_id = $run", {"run": run_id})
                cur.execute("DELETE FROM op_use WHERE run_id = $run", {"run": run_id})
                if table.num_rows:
                    cur.register("fresh", table)
                    cur.execute("INSERT INTO ops BY NAME SELECT * FROM fresh")
                    cur.unregister("fresh")
                    cur.execute(f"INSERT INTO op_use {_OP_USE_SQL}", {"run": run_id})
                cur.execute("COMMIT")
            finally:
                cur.close()
            self._loaded[run_id] = fp
        return fp

    def fetch(self, run_id: str, sql: str, params: dict[str, Any] | None = None) -> list[dict]:
        self._ensure(run_id)
        cur = self._con.cursor()
        try:
            cur.execute(sql, {"run": run_id, **(params or {})})
            names = [d[0] for d in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        finally:
            cur.close()

    def memo_fingerprint(self, run_id: str | None) -> Any:
        assert run_id is not None  # every op-sweep answer is of one run
        return self._ensure(run_id)

    # ---- aggregations --------------------------------------------------------------------

    def summary(self, run_id: str) -> list[dict[str, Any]]:
        """One row per ATen op (base name) x dtype, as written to `op_summary`."""
        return self.memo(
            "summary",
            run_id,
            lambda: self.fetch(run_id, SUMMARY_SQL + " ORDER BY op, dtype"),
        )

    def summary_by_op(self, run_id: str, dtype: str | None = None) -> dict[str, dict[str, Any]]:
        """Summaries keyed by base op for one dtype (None: every dtype added up)."""

        def build() -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            for row in self.summary(run_id):
                if dtype is not None and row["dtype"] != dtype:
                    continue
                agg = out.setdefault(
                    row["op"],
                    {
                        "op": row["op"],
                        "dtypes": [],
                        **{k: 0 for k in _COUNTS},
                        "native_lowering": row["native_lowering"],
                        "overloads": [],
                        "fallback_overloads": [],
                        "opinfos": [],
                    },
                )
                agg["dtypes"].append(row["dtype"])
                for k in _COUNTS:
                    agg[k] += row[k] or 0
                if row["native_lowering"] is False:
                    agg["native_lowering"] = False
                for k in ("overloads", "fallback_overloads", "opinfos"):
                    agg[k] = sorted(set(agg[k]) | set(row[k] or []))
            for agg in out.values():
                graded = agg["passed"] + agg["wrong"] + agg["failed"]
                agg["pass_rate"] = agg["passed"] / graded if graded else None
                agg["verdict"] = verdict(agg)
            return out

        return self.memo("summary_by_op", run_id, build, dtype)  # type: ignore[no-any-return]

    def denominators(self, run_id: str) -> dict[str, Any]:
        """The run's results counted as a device team reports an upstream test run: total,
        skipped by PyTorch's applicability, skipped by the device (and how many of those for ops
        with no native lowering), passed, failed, wrong; per dtype and in total."""

        def build() -> dict[str, Any]:
            rows = self.fetch(run_id, _DENOMINATORS_SQL)
            by_dtype = {r["dtype"]: r for r in rows if r["dtype"] is not None}
            total = next((r for r in rows if r["dtype"] is None), None) or _empty_counts()
            reasons: dict[str, dict[str, Any]] = {}
            for r in self.fetch(run_id, _REASONS_SQL):
                item = reasons.setdefault(
                    r["reason"], {"reason": r["reason"], "by_dtype": {}, "total": 0}
                )
                if r["dtype"] is None:
                    item["total"] = r["n"]
                    item["no_native_lowering"] = r["no_native_lowering"]
                else:
                    item["by_dtype"][r["dtype"]] = r["n"]
            info = self.run_info(run_id) or {"run_id": run_id}
            dtypes = [d for d in (info.get("dtypes") or "").split(",") if d in by_dtype]
            dtypes += sorted(d for d in by_dtype if d not in dtypes)
            ops = self.summary_by_op(run_id)
            return {
                "run_id": run_id,
                "run": info,
                "device": info.get("device"),
                "device_emulated": info.get("device_emulated"),
                "device_label": device_label(info.get("device"), info.get("device_emulated")),
                "device_profile_torch": info.get("device_profile_torch"),
                "device_torch": info.get("device_torch"),
                "dtypes": dtypes,
                "by_dtype": by_dtype,
                "total": total,
                "skip_reasons": [
                    {**reasons[r.value], "group": _skip_group(r.value)}
                    for r in OpSkipReason
                    if r.value in reasons
                ],
                "aten_ops": len(ops),
                "aten_ops_all_native": sum(1 for o in ops.values() if o["verdict"] == "native"),
                "seconds_per_sample": _per_sample(total),
            }

        return self.memo("denominators", run_id, build)  # type: ignore[no-any-return]

    def op_samples(self, run_id: str, op: str, *, limit: int = 200) -> dict[str, Any]:
        """One ATen op (any overload name: its base is used): counts by dtype and status, and
        its samples, problems first."""
        base = base_name(op)
        by_dtype = self.fetch(
            run_id,
            f"""
            SELECT dtype, count(*) AS samples, {_OP_COUNTS_SQL},
              list_sort(list_distinct(list(opinfo))) AS opinfos
            FROM op_use WHERE run_id = $run AND op = $op GROUP BY dtype ORDER BY dtype
            """,
            {"op": base},
        )
        samples = self.fetch(
            run_id,
            """
            SELECT o.opinfo, o.dtype, o.sample_index, o.phase, o.sample, o.status, o.reason,
              o.detail, o.error_type, o.error_message, o.failing_op, o.max_abs_error, o.atol,
              o.rtol, u.fell_back, u.failed_here, u.overloads, u.fallback_overloads, u.calls
            FROM op_use u JOIN ops o ON o.run_id = u.run_id AND o.opinfo = u.opinfo
              AND o.dtype = u.dtype AND o.sample_index = u.sample_index AND o.phase = u.phase
            WHERE u.run_id = $run AND u.op = $op
            ORDER BY CASE o.status WHEN 'fail' THEN 0 WHEN 'wrong' THEN 1 WHEN 'crash' THEN 2
              WHEN 'oom' THEN 2
              WHEN 'timeout' THEN 3 WHEN 'skip' THEN 5 ELSE 4 END, u.fell_back DESC,
              o.dtype, o.opinfo, o.sample_index, o.phase
            LIMIT $limit
            """,
            {"op": base, "limit": int(limit)},
        )
        summary = self.summary_by_op(run_id).get(base)
        return {"op": base, "by_dtype": by_dtype, "samples": samples, "summary": summary}


_COUNTS = ("samples", "passed", "native", "fallback", "failed", "wrong", "skipped")

VERDICTS = {
    "native": "correct and native in every sample",
    "correct_not_native": "correct, but falls back to the CPU",
    "fails": "fails on the device in some sample",
    "wrong": "wrong results in some sample",
    "skipped": "every sample was skipped by the device",
}


VERDICT_ORDER = ("fails", "wrong", "correct_not_native", "skipped", "native")


def verdict(s: dict[str, Any]) -> str:
    """One word for an op's op-sweep result (keys of `VERDICTS`)."""
    if s["failed"]:
        return "fails"
    if s["wrong"]:
        return "wrong"
    if not s["passed"]:
        return "skipped"
    if s["fallback"]:  # what ran, not what is declared: a decomposition into native ops is native
        return "correct_not_native"
    return "native"


def _skip_group(reason: str) -> str:
    return "pytorch" if OpSkipReason(reason) in OP_SKIP_PYTORCH else "device"


def _empty_counts() -> dict[str, Any]:
    keys = [
        "total",
        "skipped_pytorch",
        "skipped_device",
        "skipped_device_no_lowering",
        "run_on_device",
        "passed",
        "passed_native",
        "passed_fallback",
        "failed",
        "failed_error",
        "failed_timeout",
        "failed_crash",
        "failed_oom",
        "not_run",
        "wrong",
        "opinfos",
        "sample_rows",
    ]
    return {**dict.fromkeys(keys, 0), "seconds": None}


def _per_sample(total: dict[str, Any]) -> float | None:
    rows = total.get("sample_rows") or 0
    return (total["seconds"] / rows) if rows and total.get("seconds") else None


def base_name(op: str) -> str:
    name = op.split(".", 1)[0]
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name


# ---- one query object per store query (the dashboard's and the report's) ----------------------

_BY_QUERY: weakref.WeakKeyDictionary[StoreQuery, OpSweepQuery] = weakref.WeakKeyDictionary()
_BY_QUERY_LOCK = threading.Lock()


def op_query(q: StoreQuery) -> OpSweepQuery:
    with _BY_QUERY_LOCK:
        found = _BY_QUERY.get(q)
        if found is None:
            found = _BY_QUERY[q] = OpSweepQuery(q.store)
        return found


def summary_rows_from_store(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The `op_summary` rows of a run (the driver writes them at the end of the run)."""
    oq = OpSweepQuery(store)
    info = oq.run_info(run_id) or {}
    rows = []
    for row in oq.summary(run_id):
        rows.append(
            {
                **row,
                "device": info.get("device") or "unknown",
                "device_emulated": bool(info.get("device_emulated")),
            }
        )
    return rows


# ---- joined to the model sweep -----------------------------------------------------------------


def op_run_for_model_run(
    q: StoreQuery, model_run_id: str, op_run_id: str | None = None
) -> str | None:
    """The op-sweep run to join with a model run: the one asked for, else the newest op run on
    the model run's device (emulated or not alike)."""
    oq = op_query(q)
    if op_run_id is not None:
        return oq.resolve(op_run_id)
    info = q.run_info(model_run_id) or {}
    device = info.get("device")
    if device is None:
        q.ensure_summaries([model_run_id])
        rows = q.fetch(
            "SELECT any_value(device) AS device, bool_or(device_emulated) AS emulated "
            "FROM model_runs WHERE run_id = $run",
            {"run": model_run_id},
        )
        if rows:
            device = rows[0]["device"]
            info = {**info, "device_emulated": rows[0]["emulated"]}
    return oq.resolve(device=device, emulated=info.get("device_emulated"))


def with_op_sweep(
    q: StoreQuery,
    model_run_id: str,
    rows: Sequence[dict[str, Any]],
    op_run_id: str | None,
    dtype: str | None = None,
) -> list[dict[str, Any]]:
    """Missing-ops rows with the op's own results in the op sweep (`op_sweep`: None when the op
    was not swept or there is no op run), at `dtype` (default: the model run's, when it has
    one); every swept dtype added up when the op run did not sweep that dtype."""
    out = [dict(r) for r in rows]
    if op_run_id is None:
        for r in out:
            r["op_sweep"] = None
        return out
    if dtype is None:
        dtypes = q.run_dtypes(model_run_id)
        dtype = dtypes[0] if len(dtypes) == 1 else None
    oq = op_query(q)
    by_op = oq.summary_by_op(op_run_id, dtype if dtype in _swept_dtypes(oq, op_run_id) else None)
    for r in out:
        found = by_op.get(base_name(r["op"]))
        r["op_sweep"] = (
            {
                k: found[k]
                for k in (
                    "op",
                    "samples",
                    "passed",
                    "native",
                    "fallback",
                    "failed",
                    "wrong",
                    "skipped",
                    "pass_rate",
                    "verdict",
                    "opinfos",
                    "dtypes",
                )
            }
            if found
            else None
        )
    return out


def _swept_dtypes(oq: OpSweepQuery, run_id: str) -> set[str]:
    return {row["dtype"] for row in oq.summary(run_id)}


def joined_ops(
    q: StoreQuery, model_run_id: str, op_run_id: str, dtype: str | None = None
) -> dict[str, Any]:
    """How the ops the model sweep's fallbacks name fare in the op sweep: counts per verdict,
    and the ops the op sweep finds correct but not native (the cheapest lowering wins), ranked
    by the downloads of the models whose fallbacks include them. `dtype`: the model rows and
    op samples of that dtype (None: the model run's one dtype)."""
    from reports.ops import missing_ops

    rows = with_op_sweep(
        q, model_run_id, missing_ops(q, model_run_id, dtype=dtype), op_run_id, dtype
    )
    named: dict[str, dict[str, Any]] = {}
    for r in rows:
        if not r["models"]:  # named only by a failure, not by a fallback
            continue
        base = base_name(r["op"])
        item = named.setdefault(
            base,
            {
                "op": base,
                "overloads": [],
                "models": 0,
                "downloads": 0,
                "op_sweep": r["op_sweep"],
            },
        )
        item["overloads"].append(r["op"])
        item["models"] = max(item["models"], r["models"])
        item["downloads"] = max(item["downloads"], r["downloads"])
    counts = {k: 0 for k in (*VERDICTS, "not_swept")}
    for item in named.values():
        counts[item["op_sweep"]["verdict"] if item["op_sweep"] else "not_swept"] += 1
    cheapest = sorted(
        (
            i
            for i in named.values()
            if i["op_sweep"] and i["op_sweep"]["verdict"] == "correct_not_native"
        ),
        key=lambda i: (-i["downloads"], -i["models"], i["op"]),
    )
    total = q.run_downloads(model_run_id, dtype)
    for i in cheapest:
        i["downloads_share"] = share(i["downloads"], total)
    return {
        "model_run_id": model_run_id,
        "op_run_id": op_run_id,
        "dtype": dtype,
        "named_ops": len(named),
        "by_verdict": counts,
        "correct_not_native": cheapest,
    }


def op_models(q: StoreQuery, model_run_id: str, op: str, *, limit: int = 500) -> dict[str, Any]:
    """The models of a run whose CPU fallbacks include `op` (any overload), with downloads."""
    return models_by_op(q, model_run_id, [base_name(op)], limit=limit)[base_name(op)]


def models_by_op(
    q: StoreQuery, model_run_id: str, ops: Sequence[str] | None = None, *, limit: int = 500
) -> dict[str, dict[str, Any]]:
    """For each base op (all of them when `ops` is None), the models of the run whose CPU
    fallbacks include it, most downloaded first: one row per model and dtype, and per dtype
    (`by_dtype`) how many models and downloads (shares of that dtype's models)."""
    q.ensure_summaries([model_run_id])
    files = q.files(model_run_id)
    dtypes = q.run_dtypes(model_run_id)
    total = q.run_downloads(model_run_id, dtypes[0] if len(dtypes) == 1 else None)
    per_dtype_total = {d: q.run_downloads(model_run_id, d) for d in dtypes}
    rows: list[dict[str, Any]] = []
    if files.fallbacks:
        params: dict[str, Any] = {
            "run": model_run_id,
            "parts": q.summary_part_names(model_run_id),
        }
        where = ""
        if ops is not None:
            params["ops"] = list(ops)
            where = "WHERE list_contains($ops, op)"
        rows = q.fetch(
            f"""
            WITH f AS (
              SELECT regexp_replace(split_part(f.op, '.', 1), '([^_])_$', '\\1') AS base,
                f.model_id, s.dtype, f.stage, f.op, f.count
              FROM fallback_parts f
              JOIN model_runs s ON s.run_id = $run AND s.model_id = f.model_id
                AND {same_dtype("f", "s")}
                AND s.part_no = list_position($parts, parse_filename(f.filename))
            ),
            g AS (
              SELECT base AS op, f.model_id, f.dtype, any_value(m.downloads) AS downloads,
                any_value(m.outcome) AS outcome, any_value(m.architecture) AS architecture,
                sum(f.count) AS calls, list_sort(list_distinct(list(f.op))) AS overloads,
                list_sort(list_distinct(list(f.stage))) AS stages
              FROM f JOIN model_runs m ON m.run_id = $run AND m.model_id = f.model_id
                AND m.dtype = f.dtype
              GROUP BY base, f.model_id, f.dtype
            )
            SELECT * FROM g {where} ORDER BY op, downloads DESC, model_id, dtype
            """,
            params,
            scans={
                "fallback_parts": Scan(
                    "fallbacks",
                    files.fallbacks,
                    ("model_id", "dtype", "stage", "op", "count"),
                    filename=True,
                )
            },
        )
    order = {d: i for i, d in enumerate(dtypes)}
    rows.sort(
        key=lambda r: (
            r["op"],
            -(r["downloads"] or 0),
            r["model_id"],
            order.get(r["dtype"], len(order)),
        )
    )
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        item = out.setdefault(r["op"], _no_models(model_run_id, dtypes))
        item["models"].append(r)
        if r["model_id"] not in item["_seen"]:
            item["_seen"].add(r["model_id"])
            item["downloads"] += r["downloads"] or 0
        per = item["by_dtype"].get(r["dtype"])
        if per is not None:
            per["models"] += 1
            per["downloads"] += r["downloads"] or 0
    for name in ops or []:
        out.setdefault(name, _no_models(model_run_id, dtypes))
    for item in out.values():
        item["total"] = len(item.pop("_seen"))
        item["models"] = item["models"][:limit]
        item["downloads_share"] = share(item["downloads"], total)
        for d, per in item["by_dtype"].items():
            per["downloads_share"] = share(per["downloads"], per_dtype_total[d])
    return out


def _no_models(model_run_id: str, dtypes: Sequence[str]) -> dict[str, Any]:
    return {
        "run_id": model_run_id,
        "models": [],
        "downloads": 0,
        "_seen": set(),
        "dtypes": list(dtypes),
        "by_dtype": {d: {"models": 0, "downloads": 0} for d in dtypes},
    }


def failing_models_by_op(q: StoreQuery, model_run_id: str) -> dict[str, list[dict[str, Any]]]:
    """For each base op a failure names (its `failing_op`), the failed models of the run whose
    first failure names it, most downloaded first."""

    def build() -> dict[str, list[dict[str, Any]]]:
        q.ensure_summaries([model_run_id])
        rows = q.fetch(
            """
            SELECT model_id, downloads, failed_stage, failed_status, failing_op, error_type,
              error_message, architecture
            FROM model_runs WHERE run_id = $run AND outcome = 'failed'
              AND failing_op IS NOT NULL
            ORDER BY downloads DESC NULLS LAST, model_id
            """,
            {"run": model_run_id},
        )
        out: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            out.setdefault(base_name(r["failing_op"]), []).append(r)
        return out

    return q.memo("failing_models_by_op", model_run_id, build)  # type: ignore[no-any-return]


def op_sweep_report(
    q: StoreQuery | None,
    oq: OpSweepQuery,
    op_run_id: str,
    *,
    model_run_id: str | None = None,
    top: int = 20,
) -> dict[str, Any]:
    """Everything the report and the dashboard show of one op-sweep run."""
    ops = sorted(
        oq.summary_by_op(op_run_id).values(),
        key=lambda o: (
            VERDICT_ORDER.index(o["verdict"]),
            -(o["failed"] + o["wrong"]),
            -o["fallback"],
            o["op"],
        ),
    )
    problems = [o for o in ops if o["verdict"] in ("fails", "wrong")]
    report: dict[str, Any] = {
        "op_run_id": op_run_id,
        "denominators": oq.denominators(op_run_id),
        "problem_ops": problems[:top],
        "problem_ops_total": len(problems),
        "verdicts": {k: sum(1 for o in ops if o["verdict"] == k) for k in VERDICTS},
        "joined": None,
    }
    if q is not None and model_run_id is not None:
        dtypes = q.run_dtypes(model_run_id)
        by_dtype = {}
        # a run of several dtypes is joined dtype by dtype: its models' rows at each, with the
        # op samples of the same dtype; `joined` is the first dtype's
        for dtype in dtypes if len(dtypes) > 1 else [None]:
            joined = joined_ops(q, model_run_id, op_run_id, dtype)
            joined["correct_not_native"] = joined["correct_not_native"][:top]
            by_dtype[dtype] = joined
        report["joined"] = next(iter(by_dtype.values()))
        if len(dtypes) > 1:
            report["joined_by_dtype"] = by_dtype
    return report


__all__ = [
    "OpSweepQuery",
    "OpStatus",
    "VERDICTS",
    "base_name",
    "joined_ops",
    "op_models",
    "op_query",
    "op_run_for_model_run",
    "op_sweep_report",
    "summary_rows_from_store",
    "verdict",
    "with_op_sweep",
]


def op_sweep_section_data(
    q: StoreQuery, model_run_id: str | None, *, op_run_id: str | None = None, top: int = 20
) -> dict[str, Any] | None:
    """The op-sweep part of a report: for a model run, the op run on its device (newest, or
    `op_run_id`); without one, `op_run_id` (or the newest op run) joined to the newest model
    run on the same device, if any. None when there is no op run to show."""
    oq = op_query(q)
    if model_run_id is not None:
        op_run = op_run_for_model_run(q, model_run_id, op_run_id)
    else:
        op_run = oq.resolve(op_run_id)
        if op_run is not None:
            info = oq.run_info(op_run) or {}
            for run in q.run_ids():
                if op_run_for_model_run(q, run) == op_run or (
                    (q.run_info(run) or {}).get("device") == info.get("device")
                ):
                    model_run_id = run
                    break
    if op_run is None:
        return None
    return op_sweep_report(q, oq, op_run, model_run_id=model_run_id, top=top)


OP_NAME_MAX = 200


def valid_op_name(op: str) -> bool:
    """ATen op names as the store spells them (`aten::add.out`, `kernel:histogram_cpu`)."""
    return 0 < len(op) <= OP_NAME_MAX and all(c.isalnum() or c in "_:." for c in op)


def op_page(
    q: StoreQuery,
    op: str,
    *,
    model_run_id: str | None = None,
    op_run_id: str | None = None,
    limit: int = 200,
    models_of: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One ATen op: its OpInfo samples' results by dtype (op sweep) and the models whose CPU
    fallbacks include it, whose failure names it, or whose compile took it to lower with no
    evidence either way (`unverified`), with their downloads (model sweep)."""
    base = base_name(op)
    oq = op_query(q)
    model_run = model_run_id or q.latest_run_id()
    if model_run is not None:
        op_run = op_run_for_model_run(q, model_run, op_run_id)
    else:
        op_run = oq.resolve(op_run_id)
    info = (oq.run_info(op_run) if op_run else None) or {}
    sweep = oq.op_samples(op_run, base, limit=limit) if op_run else None
    if models_of is not None:
        models: dict[str, Any] | None = models_of.get(base) or {
            "run_id": model_run,
            "models": [],
            "downloads": 0,
            "total": 0,
            "downloads_share": None,
            "dtypes": q.run_dtypes(model_run) if model_run else [],
            "by_dtype": {},
        }
    else:
        models = op_models(q, model_run, base) if model_run else None
    model_info = (q.run_info(model_run) if model_run else None) or {}
    emulated = bool(info.get("device_emulated")) or bool(model_info.get("device_emulated"))
    failing = failing_models_by_op(q, model_run).get(base, []) if model_run else []
    unverified = unverified_models_by_op(q, model_run).get(base, []) if model_run else []
    newer = sorted(
        r["op"]
        for r in (missing_ops(q, model_run) if model_run else [])
        if r["evidence"] == NEWER_THAN_PROFILE and base_name(r["op"]) == base
    )
    device = info.get("device") or model_info.get("device")
    reproduce = []  # the most downloaded model that meets it, and its OpInfo samples
    examples = failing or (models or {}).get("models") or unverified
    if examples:
        reproduce.append(reproduce_command(examples[0]["model_id"], device))
    opinfos = sorted({o for r in (sweep or {}).get("by_dtype") or () for o in r["opinfos"]})
    if opinfos:
        reproduce.append(
            f"hfsweep ops --ops {shlex.quote(','.join(opinfos))} --device {device or 'cpu'}"
        )
    return {
        "op": base,
        "asked": op,
        "model_run_id": model_run,
        "op_run_id": op_run,
        "op_run": info,
        "device": info.get("device") or model_info.get("device"),
        "device_emulated": emulated,
        "device_profile_torch": info.get("device_profile_torch")
        or model_info.get("device_profile_torch"),
        "device_torch": info.get("device_torch") or model_info.get("device_torch"),
        "device_label": info.get("device_label")
        or device_label(model_info.get("device"), model_info.get("device_emulated")),
        "sweep": sweep,
        "models": models,
        "failing": failing[:limit],
        "reproduce": reproduce,
        "failing_total": len(failing),
        "unverified": unverified[:limit],
        "unverified_total": len({r["model_id"] for r in unverified}),
        # overloads the device's profile could not know (its torch did not register them)
        "newer_than_profile": newer,
        "found": bool(
            (sweep and sweep["by_dtype"]) or (models and models["total"]) or failing or unverified
        ),
    }


def op_table(q: StoreQuery, op_run_id: str) -> list[dict[str, Any]]:
    """Every ATen op the op run dispatched, problems first, with its pass rate per dtype."""
    oq = op_query(q)
    per_dtype: dict[str, dict[str, Any]] = {}
    for row in oq.summary(op_run_id):
        per_dtype.setdefault(row["op"], {})[row["dtype"]] = row["pass_rate"]
    ops = sorted(
        oq.summary_by_op(op_run_id).values(),
        key=lambda o: (VERDICT_ORDER.index(o["verdict"]), -o["samples"], o["op"]),
    )
    return [{**o, "pass_rate_by_dtype": per_dtype.get(o["op"], {})} for o in ops]
