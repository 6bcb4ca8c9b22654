"""One model at a time: the filterable, sortable, paginated models table of a run, and the
detail of one model (every stage's row, its fallback ops, configs, versions, history)."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ground import fmt, next_steps
from ground.errors import UsageError
from ground.schema import (
    DEFAULT_WORLD_SIZE,
    RESULTS_SCHEMA,
    VERSION_FIELDS,
    FallbackSource,
    Status,
    run_dtypes,
)
from reports.coverage import DEFAULT_CONFIG_SOURCES, device_label
from reports.dtypes import DIFFERING_MODELS_SQL, difference_cause, difference_kind
from reports.hf_stack import model_hf_stack
from reports.model_search import CatalogModel, Found, find_model
from reports.query import OUTCOMES, STAGES, RunFiles, Scan, StoreQuery
from reports.shapes import shape_detail
from reports.sharding import SHARDING, model_sharding
from reports.sizing import FITS, PARAMS, model_sizing
from runners import stages as stage_registry

SORT_COLUMNS = {
    "downloads": "downloads",
    "rank": "rank",
    "model_id": "model_id",
    "outcome": "outcome",
    "stages_passed": "stages_passed",
    "fallback_ops": "fallback_ops",
    "wall_s": "wall_s",
    "library": "library",
    "pipeline_tag": "pipeline_tag",
    "model_type": "model_type",
    "architecture": "architecture",
    "parameters": "parameters",
    "serve_cores": "serve_cores",
    "finetune_cores": "finetune_cores",
}
OUTCOME_FILTERS = (*OUTCOMES, "on_device", "with_fallback")
STATUS_VALUES = tuple(s.value for s in Status)
MAX_PER_PAGE = 500
DEFAULT_DTYPE = "fp32"  # `hfsweep run` and `check` without --dtype
TABLE_COLUMNS = (
    "model_id, dtype, rank, downloads, library, pipeline_tag, model_type, architecture, device, "
    "device_emulated, outcome, skip_reason, failed_stage, failed_status, error_signature, "
    "failing_op, error_type, error_message, skip_message, stages_passed, fallback_ops, "
    "fallback_calls, wall_s, dedup_of, peak_host_memory_bytes, sizing_status, parameters, sizing_hardware, "
    "serve_cores, finetune_cores, lora_cores, cores_per_chip, cores_per_instance, "
    + ", ".join(f"s_{s}, n_{s}" for s in STAGES)
)


class QueryError(UsageError):
    """A bad filter, sort or page parameter (HTTP 400 / exit 2)."""


@dataclass
class ModelFilter:
    """Filters of the models table. Empty strings / None mean "any"."""

    search: str | None = None  # substring of the model id, case-insensitive
    outcome: str | None = None  # passed | partial | failed | skipped | on_device | with_fallback
    stage: str | None = None  # with `status`: that stage's status; alone: failed at that stage
    status: str | None = None  # a Status value; without `stage`: any stage has it
    library: str | None = None
    pipeline_tag: str | None = None
    model_type: str | None = None
    architecture: str | None = None
    error_signature: str | None = None  # the signature of the model's first failure, exactly
    dtype: str | None = None  # a run of several dtypes: the rows of that dtype only
    differs: bool = False  # only models whose outcome differs between the run's dtypes
    fit: str | None = None  # at full size: serve_one_core, finetune_one_chip, ... (FITS)
    params: str | None = None  # at full size: under_1b, 1b_10b, 10b_100b, over_100b (PARAMS)
    sort: str = "downloads"
    order: str = "desc"
    page: int = 1
    per_page: int = 50

    def validate(self, max_per_page: int = MAX_PER_PAGE) -> ModelFilter:
        if self.outcome and self.outcome not in OUTCOME_FILTERS:
            raise QueryError(f"unknown outcome {self.outcome!r}; use {', '.join(OUTCOME_FILTERS)}")
        if self.stage and self.stage not in STAGES:
            raise QueryError(f"unknown stage {self.stage!r}; use {', '.join(STAGES)}")
        if self.status and self.status not in STATUS_VALUES:
            raise QueryError(f"unknown status {self.status!r}; use {', '.join(STATUS_VALUES)}")
        if self.sort not in SORT_COLUMNS:
            raise QueryError(f"unknown sort {self.sort!r}; use {', '.join(SORT_COLUMNS)}")
        if self.order not in ("asc", "desc"):
            raise QueryError(f"unknown order {self.order!r}; use asc or desc")
        if self.page < 1:
            raise QueryError(f"page must be 1 or more, not {self.page}")
        if not 1 <= self.per_page <= max_per_page:
            raise QueryError(f"per_page must be between 1 and {max_per_page}, not {self.per_page}")
        if self.search is not None and len(self.search) > 200:
            raise QueryError("search is longer than 200 characters")
        if self.dtype is not None and len(self.dtype) > 32:
            raise QueryError("dtype is longer than 32 characters")
        if self.fit and self.fit not in FITS:
            raise QueryError(f"unknown fit {self.fit!r}; use {', '.join(FITS)}")
        if self.params and self.params not in PARAMS:
            raise QueryError(f"unknown params {self.params!r}; use {', '.join(PARAMS)}")
        return self


def model_table(
    q: StoreQuery, run_id: str, flt: ModelFilter, *, max_per_page: int = MAX_PER_PAGE
) -> dict[str, Any]:
    """One page of the run's models matching `flt`, and how many match in all. A run of several
    dtypes has one row per model and dtype (the dtypes of one model side by side, in the run's
    order); `dtypes` lists them."""
    flt.validate(max_per_page)
    q.ensure_summaries([run_id])
    dtypes = q.run_dtypes(run_id)
    if flt.dtype and flt.dtype not in dtypes:
        raise QueryError(
            f"run {run_id} has no rows of dtype {flt.dtype!r}; its dtypes: {', '.join(dtypes)}"
        )
    where = ["run_id = $run"]
    params: dict[str, Any] = {"run": run_id}
    if flt.dtype:
        where.append("dtype = $dtype")
        params["dtype"] = flt.dtype
    if flt.differs:
        where.append(f"model_id IN ({DIFFERING_MODELS_SQL})")
    if flt.search:
        where.append("contains(lower(model_id), $search)")
        params["search"] = flt.search.lower()
    if flt.outcome == "on_device":
        where.append("outcome = 'passed' AND fallback_ops = 0 AND fallback_calls = 0")
    elif flt.outcome == "with_fallback":
        where.append("outcome = 'passed' AND (fallback_ops > 0 OR fallback_calls > 0)")
    elif flt.outcome:
        where.append("outcome = $outcome")
        params["outcome"] = flt.outcome
    if flt.stage and flt.status:
        where.append(f"s_{flt.stage} = $status")  # stage is from the closed STAGES list
        params["status"] = flt.status
    elif flt.stage:
        where.append("failed_stage = $stage")
        params["stage"] = flt.stage
    elif flt.status:
        where.append("(" + " OR ".join(f"s_{s} = $status" for s in STAGES) + ")")
        params["status"] = flt.status
    if flt.fit:
        where.append(f"({FITS[flt.fit]})")  # from the closed FITS table
    if flt.params:
        where.append(f"({PARAMS[flt.params]})")
    for key in ("library", "pipeline_tag", "model_type", "architecture", "error_signature"):
        value = getattr(flt, key)
        if value:
            where.append(f"{key} = ${key}")
            params[key] = value
    cond = " AND ".join(where)
    total = q.scalar(f"SELECT count(*) FROM model_runs WHERE {cond}", params)
    col = SORT_COLUMNS[flt.sort]
    order = "ASC" if flt.order == "asc" else "DESC"
    rows = q.fetch(
        f"""
        SELECT {TABLE_COLUMNS} FROM model_runs WHERE {cond}
        ORDER BY {col} {order} NULLS LAST, model_id ASC, list_position($dtypes, dtype)
        LIMIT $limit OFFSET $offset
        """,
        {
            **params,
            "dtypes": dtypes,
            "limit": flt.per_page,
            "offset": (flt.page - 1) * flt.per_page,
        },
    )
    for r in rows:
        r["device_label"] = device_label(r["device"], r["device_emulated"])
        r["stages"] = {s: r.pop(f"s_{s}") for s in STAGES}
        r["not_applicable"] = {s: bool(r.pop(f"n_{s}")) for s in STAGES}
    pages = max(1, -(-int(total) // flt.per_page))
    return {
        "run_id": run_id,
        "dtypes": dtypes,
        "total": int(total),
        "page": flt.page,
        "pages": pages,
        "per_page": flt.per_page,
        "rows": rows,
    }


def facets(q: StoreQuery, run_id: str) -> dict[str, list[str]]:
    """The values each filter can take in this run (for the filter menus)."""

    def build() -> dict[str, list[str]]:
        q.ensure_summaries([run_id])
        out: dict[str, list[str]] = {}
        for key in ("library", "pipeline_tag", "model_type"):
            out[key] = [
                r["v"]
                for r in q.fetch(
                    f"SELECT DISTINCT {key} AS v FROM model_runs WHERE run_id = $run "
                    f"AND {key} IS NOT NULL ORDER BY v",
                    {"run": run_id},
                )
            ]
        return out

    return q.memo("facets", run_id, build)


# A history row: a model's summary in one run at one dtype, with each stage's status.
_HISTORY_COLUMNS = (
    "run_id, dtype, outcome, skip_reason, failed_stage, failed_status, error_signature, "
    "error_type, error_message, failing_op, skip_message, stages_passed, fallback_ops, "
    "fallback_calls, device, device_emulated, part_no, " + ", ".join(f"s_{s}" for s in STAGES)
)


def model_history(
    q: StoreQuery, model_id: str, *, include: str | None = None
) -> list[dict[str, Any]]:
    """The model's outcome in every run that has it, newest first, one row per dtype of the run
    in its order (while the dashboard warms up, in the runs summarised so far, plus
    `include`)."""
    ids, _ = q.available_runs()
    if include is not None and include not in ids:
        q.ensure_summaries([include])
        ids = [r for r in q.run_ids() if r in ids or r == include]
    rows = q.fetch(
        f"""
        SELECT {_HISTORY_COLUMNS}
        FROM model_runs WHERE model_id = $model AND list_contains($ids, run_id)
        """,
        {"model": model_id, "ids": ids},
    )
    return _history_rows(q, rows, ids)


def _history_rows(
    q: StoreQuery, rows: list[dict[str, Any]], ids: list[str]
) -> list[dict[str, Any]]:
    """History rows by model, then in the order of `ids` (newest run first), then each run's
    dtypes in the order the run asked for them; with their device label and stages."""
    order = {run: i for i, run in enumerate(ids)}
    asked = {run: run_dtypes((q.run_info(run) or {}).get("dtype")) for run in order}
    rows.sort(
        key=lambda r: (
            r.get("model_id", ""),  # one model's history does not select it
            order.get(r["run_id"], len(order)),
            _position(asked.get(r["run_id"]) or [], r["dtype"]),
        )
    )
    for r in rows:
        r["device_label"] = device_label(r["device"], r["device_emulated"])
        r["stages"] = {s: r.pop(f"s_{s}") for s in STAGES}
    return rows


def model_detail(
    q: StoreQuery, model_id: str, run_id: str | None = None, dtype: str | None = None
) -> dict[str, Any] | None:
    """Everything about one model in one run (default: the newest run that has it), or None if
    no run has it (at `dtype`, when given). In a run of several dtypes, `by_dtype` holds each
    dtype's summary, stages and fallbacks, `dtype_differences` what differs between them, and
    the top level is `dtype`'s (default: the run's first)."""
    if run_id is not None:
        run_id = q.resolve_run(run_id)
    # the asked-for (or newest) run is always in the history, even during a warm-up
    history = model_history(q, model_id, include=run_id or q.latest_run_id())
    if run_id is None and not history and q.warming:
        q.ensure_all_summaries()  # the model may be only in runs not summarised yet: wait
        history = model_history(q, model_id)
    if run_id is None and history:
        run_id = history[0]["run_id"]
    chosen = [h for h in history if h["run_id"] == run_id]
    if not chosen or (dtype is not None and dtype not in {h["dtype"] for h in chosen}):
        return None
    assert run_id is not None
    return _pages(q, run_id, {model_id: history}, {model_id: dtype})[model_id]


def model_details(q: StoreQuery, run_id: str, model_ids: list[str]) -> dict[str, dict[str, Any]]:
    """`model_detail` of many models of one run at once (the static site's model pages): one
    scan of the run's results, fallbacks and configs instead of a few per model."""
    q.ensure_summaries([run_id])
    if not model_ids:
        return {}
    histories: dict[str, list[dict[str, Any]]] = {}
    for h in model_histories(q, list(dict.fromkeys(model_ids))):
        histories.setdefault(h.pop("model_id"), []).append(h)
    found = {m: h for m, h in histories.items() if any(x["run_id"] == run_id for x in h)}
    return _pages(q, run_id, found, {})


def _pages(
    q: StoreQuery,
    run_id: str,
    histories: dict[str, list[dict[str, Any]]],
    dtypes: dict[str, str | None],
) -> dict[str, dict[str, Any]]:
    """The page of each model of `histories` (model -> its history, which has `run_id`) in
    `run_id`, at `dtypes[model]` (default: the run's first dtype it has), from one scan of
    the run's results, fallbacks, configs and alternatives for them all: what `model_detail`
    and `model_details` both build."""
    files = q.files(run_id)
    chosen = {m: [h for h in hs if h["run_id"] == run_id] for m, hs in histories.items()}
    primary = {
        m: next((h for h in rows if h["dtype"] == dtypes.get(m)), rows[0])
        for m, rows in chosen.items()
    }
    parts = {
        m: {h["dtype"]: q.summary_part(run_id, h.get("part_no")) for h in rows}
        for m, rows in chosen.items()
    }
    for hs in histories.values():
        for h in hs:
            h.pop("part_no", None)
    # a model's rows are in the results parts its summary names (all parts where one is not
    # known: a summary written before parts were numbered)
    known = {m: all(p in files.results for p in ps.values()) for m, ps in parts.items()}
    result_files = (
        sorted({p for ps in parts.values() for p in ps.values() if p})
        if all(known.values())
        else list(files.results)
    )
    models = list(chosen)
    stages_of = _stages_by_dtype(q, models, result_files)
    fallbacks_of = _fallbacks_by_dtype(
        q, files, result_files, {m: ps for m, ps in parts.items() if known[m]}, primary
    )
    alternatives_of = _alternatives_of(q, files, models)
    firsts = {m: (stages_of.get(m, {}).get(primary[m]["dtype"]) or [{}])[0] for m in models}
    shrinks = _shrinks_of(q, run_id, files, firsts)
    run = q.run_info(run_id)
    pages: dict[str, dict[str, Any]] = {}
    for m in models:
        by_dtype: dict[str, dict[str, Any]] = {
            h["dtype"]: {
                "summary": h,
                "stages": stages_of.get(m, {}).get(h["dtype"], []),
                "fallbacks": fallbacks_of.get(m, {}).get(h["dtype"], []),
            }
            for h in chosen[m]
        }
        for d, alts in alternatives_of.get(m, {}).items():
            if d in by_dtype:
                by_dtype[d]["alternatives"] = alts
        top = by_dtype[primary[m]["dtype"]]
        # parts written before the configs table carried the shrink on every row: still shown
        legacy = [
            {k: r.pop(k, None) for k in _LEGACY_SHRINK}
            for d in by_dtype.values()
            for r in d["stages"]
        ]
        shrink = shrinks.get(m) or (legacy[0] if legacy else {})
        page = _detail(
            m,
            run_id,
            primary[m],
            histories[m],
            top["stages"],
            top["fallbacks"],
            shrink,
            run,
            by_dtype if len(by_dtype) > 1 else None,  # one dtype: the page's own next step only
            alternatives=top.get("alternatives", []),
            store=q.store.uri,
        )
        page["full_size"] = model_sizing(q, run_id, page["model"]["config_hash"])
        pages[m] = page
    return pages


def model_histories(q: StoreQuery, model_ids: list[str]) -> list[dict[str, Any]]:
    """`model_history` of many models at once: their rows of every summarised run."""
    ids, _ = q.available_runs()
    rows = q.fetch(
        f"""
        SELECT model_id, {_HISTORY_COLUMNS}
        FROM model_runs WHERE list_contains($models, model_id) AND list_contains($ids, run_id)
        """,
        {"models": model_ids, "ids": ids},
    )
    return _history_rows(q, rows, ids)


def _detail(
    model_id: str,
    run_id: str,
    summary: dict[str, Any],
    history: list[dict[str, Any]],
    stages: list[dict[str, Any]],
    fallbacks: list[dict[str, Any]],
    shrink: dict[str, Any],
    run: dict[str, Any] | None,
    by_dtype: dict[str, dict[str, Any]] | None = None,
    *,
    alternatives: list[dict[str, Any]] | None = None,
    store: str | None = None,
) -> dict[str, Any]:
    """One model's page data from its pieces (one model, or many at once); `by_dtype`: each
    dtype's summary, stages, fallbacks (and alternatives) in a run of several;
    `alternatives`: the alternatives table's rows of the model at its dtype; `store`: the
    store they came from (what its next step's commands name)."""
    run = run or {}
    first = stages[0] if stages else {}
    device_peaks = [
        r["peak_memory_bytes"] for r in stages if r.get("peak_memory_bytes") is not None
    ]
    source = first.get("config_source")
    by_dtype = by_dtype or {}
    dtypes = list(by_dtype) or [d for d in (first.get("dtype") or summary.get("dtype"),) if d]
    for r in stages:
        r["shape_detail"] = shape_detail(r) or None
    history_stages = [s for s in STAGES if any(h["stages"][s] for h in history)] or [
        s.value for s in stage_registry.default_stages()
    ]
    device = first.get("device") or run.get("device")
    reproduce = reproduce_command(
        model_id, device, run.get("stages"), dtypes, world_size=run.get("world_size")
    )
    changes = _json(shrink.get("shrink_changes"))
    shrunk = _json(shrink.get("shrunk_config"))

    def step_of(rows: list[dict[str, Any]], fbs: list[dict[str, Any]], alts: list) -> dict:
        return next_steps.next_step(
            rows,
            model=model_id,
            device=device or "cpu",
            fallbacks=fbs,
            check=reproduce_command(
                model_id,
                device,
                run.get("stages"),
                [rows[0]["dtype"]],
                world_size=run.get("world_size"),
            )
            if rows and rows[0].get("dtype")
            else reproduce,
            timeout_s=run.get("timeout_s"),
            memory_limit_bytes=run.get("memory_limit_bytes") or None,
            store=store,
            config=shrunk if isinstance(shrunk, dict) else None,
            changes=changes if isinstance(changes, dict) else None,
            alternatives=next_steps.alternatives_of(alts),
        ).to_dict()

    for entry in by_dtype.values():
        entry["next_step"] = step_of(
            entry["stages"], entry["fallbacks"], entry.get("alternatives", [])
        )
    ran = [r["duration_s"] for r in stages if r.get("duration_s") is not None]
    return {
        "model_id": model_id,
        "run_id": run_id,
        "summary": dict(summary),
        "model": {
            k: first.get(k)
            for k in (
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
                "param_count",
                "dedup_of",
            )
        },
        "device": first.get("device") or run.get("device"),
        "device_emulated": bool(first.get("device_emulated") or run.get("device_emulated")),
        "device_profile_torch": run.get("device_profile_torch"),
        "device_torch": run.get("device_torch"),
        "device_label": device_label(
            first.get("device") or run.get("device"),
            first.get("device_emulated") or run.get("device_emulated"),
        ),
        "dtype": first.get("dtype") or summary.get("dtype"),
        # the model's whole run in its process (the same on each of its rows), the sum of its
        # stages' own seconds, and whose run measured them (a dedup lead's, an earlier run's)
        "wall_s": first.get("wall_s"),
        "stages_s": sum(ran) if ran else None,
        "ranks_s": fmt.ranks_seconds(stages, SHARDING),
        "measured_on": _measured_on(first),
        "peak_host_memory_bytes": first.get("peak_host_memory_bytes"),
        "peak_device_memory_bytes": max(device_peaks) if device_peaks else None,
        # offline, the "original" config is a library's default for the architecture, not the
        # repo's own: the page says so
        "config_is_default": source in DEFAULT_CONFIG_SOURCES,
        "hub_url": hub_url(model_id),
        "stages": stages,
        "fallbacks": fallbacks,
        "dtypes": dtypes,
        "by_dtype": by_dtype if len(by_dtype) > 1 else {},
        "dtype_differences": _model_differences(by_dtype) if len(by_dtype) > 1 else None,
        "shrink_changes": changes,
        "shrunk_config": shrunk,
        "versions": {k: run.get(k) for k in VERSION_FIELDS},
        "run": {
            k: run.get(k)
            for k in ("status", "started_at", "updated_at", "catalog", "device_profile", "command")
        },
        "reproduce": reproduce,
        "next_step": step_of(stages, fallbacks, alternatives or []),
        "alternatives": [
            a.__dict__ | {"described": a.describe()}
            for a in next_steps.alternatives_of(alternatives or [])
        ],
        "fine_tune": _fine_tune_of(stages, fallbacks),
        "sharding": model_sharding(stages),
        "hf_stack": model_hf_stack(stages),
        "history": history,
        "history_stages": history_stages,
    }


def _measured_on(row: dict[str, Any]) -> str | None:
    """Whose run a model's times are, when not its own: the dedup lead that ran the tiny model
    it shares, or the earlier run its rows were copied from."""
    if row.get("reused_from"):
        return f"copied from run {row['reused_from']} (--reuse)"
    if row.get("dedup_of"):
        return f"measured on {row['dedup_of']}, which shares its tiny model"
    return None


def _alternatives_of(
    q: StoreQuery, files: RunFiles, model_ids: list[str]
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """model -> dtype -> its alternatives rows (the latest attempt of each switch and stage),
    in the order they were tried."""
    if not files.alternatives or not model_ids:
        return {}
    rows = q.fetch(
        """
        SELECT model_id, dtype, implementation, stage, status, reason, error_type,
          error_message, failing_op, duration_s, fallback_op_count, wall_s
        FROM alternative_parts WHERE list_contains($models, model_id)
        QUALIFY row_number() OVER (PARTITION BY model_id, dtype, implementation, stage
          ORDER BY attempt DESC NULLS LAST, finished_at DESC NULLS LAST) = 1
        ORDER BY model_id, dtype, min(finished_at) OVER (PARTITION BY model_id, dtype,
          implementation), implementation, list_position($stages, stage)
        """,
        {"models": model_ids, "stages": list(STAGES)},
        scans={"alternative_parts": Scan("alternatives", files.alternatives)},
    )
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        out.setdefault(r.pop("model_id"), {}).setdefault(r["dtype"], []).append(r)
    return out


def _stages_by_dtype(
    q: StoreQuery, model_ids: list[str], result_files: list[str]
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """model -> dtype -> its stage rows in stage order, the latest attempt of each."""
    rows = q.fetch(
        # part files written before a column was added to the schema read it as null
        """
        SELECT * FROM results_parts WHERE list_contains($models, model_id)
        QUALIFY row_number() OVER (PARTITION BY model_id, dtype, stage
          ORDER BY attempt DESC NULLS LAST, finished_at DESC NULLS LAST) = 1
        """,
        {"models": model_ids},
        scans={"results_parts": Scan("results", result_files)},
    )
    for row in rows:
        for name in RESULTS_SCHEMA.names:
            row.setdefault(name, None)
        row.pop("run_id", None)
    rows.sort(key=lambda r: STAGES.index(r["stage"]) if r["stage"] in STAGES else 99)
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        out.setdefault(r["model_id"], {}).setdefault(r["dtype"], []).append(r)
    return out


def _fallbacks_by_dtype(
    q: StoreQuery,
    files: RunFiles,
    result_files: list[str],
    parts: dict[str, dict[str, str | None]],
    primary: dict[str, dict[str, Any]],
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """model -> dtype -> its CPU fallbacks, from the fallbacks parts of its results parts
    (`parts`: model -> dtype -> its results part, where known; a row without a dtype, from a
    run of one dtype, is its part's dtype, else the model's `primary` one)."""
    names = {p.rsplit("/", 1)[-1] for p in result_files}
    fb_files = [p for p in files.fallbacks if p.rsplit("/", 1)[-1] in names]
    if not fb_files:
        return {}
    rows = q.fetch(
        """
        SELECT model_id, dtype, stage, op, count, source, bytes_h2d, bytes_d2h,
          parse_filename(filename) AS part
        FROM fallback_parts WHERE list_contains($models, model_id)
        ORDER BY model_id, list_position($stages, stage), count DESC, op
        """,
        {"models": list(primary), "stages": list(STAGES)},
        scans={
            "fallback_parts": Scan(
                "fallbacks",
                fb_files,
                ("dtype", "stage", "op", "count", "source", "bytes_h2d", "bytes_d2h", "model_id"),
                filename=True,
            )
        },
    )
    part_dtype = {
        m: {p.rsplit("/", 1)[-1]: d for d, p in ps.items() if p} for m, ps in parts.items()
    }
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        model, part, dtype = r.pop("model_id"), r.pop("part"), r.pop("dtype")
        own = part_dtype.get(model)
        if own is not None and part not in own:
            continue  # another part's (an earlier attempt of the model)
        dtype = dtype or (own or {}).get(part) or primary[model]["dtype"]
        out.setdefault(model, {}).setdefault(dtype, []).append(r)
    return out


def _model_differences(by_dtype: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """What differs between one model's dtypes: the stages whose status differs, the kind of
    difference, the op or error behind it (None when every dtype agrees)."""
    summaries = {
        d: {
            **v["summary"],
            "fallback_op_names": sorted({f["op"] for f in v["fallbacks"]}),
        }
        for d, v in by_dtype.items()
    }
    stages: list[dict[str, Any]] = [
        {"stage": s, "by_dtype": {d: v["summary"]["stages"].get(s) for d, v in by_dtype.items()}}
        for s in STAGES
    ]
    differing = [s for s in stages if len(set(s["by_dtype"].values())) > 1]
    cause = difference_cause(summaries)
    if not differing and not cause:
        return None
    return {"kind": difference_kind(summaries), "cause": cause, "stages": differing}


def _fine_tune_of(stages: list[dict[str, Any]], fallbacks: list[dict[str, Any]]) -> list[dict]:
    """The model's training stages: status, whether it ran with no CPU fallback, and the ops
    that fell back in the optimizer's part of a step."""
    out = []
    for r in stages:
        if r["stage"] not in {s.value for s in stage_registry.section_stages("fine_tune")}:
            continue
        ops = [
            f["op"]
            for f in fallbacks
            if f["stage"] == r["stage"] and f["source"] == FallbackSource.OPTIMIZER.value
        ]
        out.append(
            {
                "stage": r["stage"],
                "status": r["status"],
                "reason": r["reason"],
                "no_fallback": r["status"] == Status.PASS.value and not r["fallback_op_count"],
                "fallback_ops": r["fallback_op_count"],
                "optimizer_ops": ops,
                "step_op_calls": r.get("step_op_calls"),
            }
        )
    return out


_LEGACY_SHRINK = ("shrink_changes", "shrunk_config")


def _shrinks_of(
    q: StoreQuery, run_id: str, files: RunFiles, rows: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """model -> what the shrink made of it (`rows`: model -> a stage row of it), stored once
    per run and (original, shrunk) config pair in the configs table, in the part of the model
    that first met the pair: one read of the parts that hold the pairs asked for."""
    pairs = {
        m: (r.get("config_hash"), r["shrunk_config_hash"])
        for m, r in rows.items()
        if r.get("shrunk_config_hash")
    }
    if not pairs or not files.configs:
        return {}
    index = q.memo("config_index", run_id, lambda: _config_index(q, files))
    wanted = sorted({index[pair] for pair in pairs.values() if pair in index})
    if not wanted:
        return {}
    found: dict[tuple[Any, Any], dict[str, Any]] = {}
    for c in q.fetch(
        "SELECT config_hash, shrunk_config_hash, shrink_changes, shrunk_config FROM config_parts",
        scans={"config_parts": Scan("configs", wanted)},
    ):
        pair = (c.pop("config_hash"), c.pop("shrunk_config_hash"))
        found.setdefault(pair, c)
    return {m: found[pair] for m, pair in pairs.items() if pair in found}


def _config_index(q: StoreQuery, files: RunFiles) -> dict[tuple[str | None, str], str]:
    """(original hash, shrunk hash) -> the configs part that holds the pair (hashes only)."""
    rows = q.fetch(
        "SELECT config_hash, shrunk_config_hash, filename FROM config_parts",
        scans={
            "config_parts": Scan(
                "configs", files.configs, ("config_hash", "shrunk_config_hash"), filename=True
            )
        },
    )
    index: dict[tuple[str | None, str], str] = {}
    for r in rows:
        index.setdefault((r["config_hash"], r["shrunk_config_hash"]), r["filename"])
    return index


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def hub_url(model_id: str) -> str | None:
    """The model's page on the Hugging Face Hub (None for an id that is not a Hub id: a local
    config's path)."""
    if not _HUB_ID.fullmatch(model_id) or ".." in model_id:
        return None
    return "https://huggingface.co/" + "/".join(quote(p, safe="") for p in model_id.split("/"))


def reproduce_command(
    model_id: str,
    device: str | None,
    stages: str | None = None,
    dtypes: list[str] | None = None,
    *,
    world_size: int | None = None,
) -> str:
    """The `hfsweep check` command that reruns this model on this device (with the run's
    `--stages` when they are not the default ones, its dtypes when not fp32 alone, and the
    distributed stages' world size when not the default)."""
    command = f"hfsweep check {shlex.quote(model_id)} --device {shlex.quote(device or 'cpu')}"
    if stages and stages != ",".join(s.value for s in stage_registry.default_stages()):
        command += f" --stages {shlex.quote(stages)}"
    if dtypes and dtypes != [DEFAULT_DTYPE]:
        command += f" --dtype {shlex.quote(','.join(dtypes))}"
    if world_size and world_size != DEFAULT_WORLD_SIZE:
        command += f" --world-size {int(world_size)}"
    return command


def _position(listed: list[str], dtype: str | None) -> tuple[int, str]:
    """A row's place among its run's dtypes (in the order the run asked for them)."""
    return (listed.index(dtype) if dtype in listed else len(listed), dtype or "")


def _json(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return {"(unparsed)": text}


def find_stored_model(
    q: StoreQuery, asked: str, catalog: Sequence[CatalogModel] = ()
) -> tuple[Found, str | None]:
    """What the store (every run summarised so far) and `catalog` hold for the id `asked`, and
    the command that gives it results on the store's device (the newest run's device, stages
    and dtypes): for a stored model, the `hfsweep check` that reruns it; for a catalog model the
    store lacks, the `hfsweep run --models` that adds its rows to the store (`check` writes
    none); for an id neither has, None."""
    ids, _ = q.available_runs()
    stored = [
        r["model_id"]
        for r in q.fetch(
            "SELECT DISTINCT model_id FROM model_runs WHERE list_contains($ids, run_id) "
            "ORDER BY model_id",
            {"ids": ids},
        )
    ]
    found = find_model(asked, stored, catalog)
    run = q.run_info(ids[0]) if ids else None
    run = run or {}
    if found.model_id is not None:  # the store has it (not in the run or dtype asked)
        return found, reproduce_command(
            found.model_id,
            run.get("device") or "cpu",
            run.get("stages"),
            run_dtypes(run.get("dtype")),
            world_size=run.get("world_size"),
        )
    if found.in_catalog is not None:  # a sweep of it writes the rows the next lookup reads
        return found, sweep_command(found.in_catalog.model_id, run, q.store.uri)
    return found, None  # neither: nothing to run (a check of an unknown id exits 2)


def sweep_command(model_id: str, run: dict[str, Any], store: str) -> str:
    """The `hfsweep run --models ID` command that adds a catalog model's rows to `store`, on
    the device, stages and dtypes of the store's newest run (`run`), from its catalog where
    that is not the bundled one."""
    command = f"hfsweep run --models {shlex.quote(model_id)}"
    command += f" --device {shlex.quote(run.get('device') or 'cpu')}"
    stages = run.get("stages")
    if stages and stages != ",".join(s.value for s in stage_registry.default_stages()):
        command += f" --stages {shlex.quote(stages)}"
    dtypes = run_dtypes(run.get("dtype"))
    if dtypes and dtypes != [DEFAULT_DTYPE]:
        command += f" --dtype {shlex.quote(','.join(dtypes))}"
    world_size = run.get("world_size")
    if world_size and world_size != DEFAULT_WORLD_SIZE:
        command += f" --world-size {int(world_size)}"
    catalog = run.get("catalog") or ""
    if catalog and not catalog.startswith("bundled"):
        command += f" --catalog {shlex.quote(catalog)}"
    return command + f" --store {shlex.quote(store)}"


def not_found_answer(found: Found, check: str | None, where: str) -> dict[str, Any]:
    """What `lookup` and the dashboard say of a model `where` (a run, any run) has no results
    for: whether the catalog has it (its rank), the command that checks it, and the nearest
    ids; a dict for JSON, with `message` and `hint` lines for text."""
    entry = found.in_catalog
    if found.model_id is not None:  # the store has it, not where (or at the dtype) asked
        message = (
            f"no results for model {found.model_id!r} in {where}; other runs or dtypes of the "
            "store have it (lookup without --run / --dtype shows the newest)"
        )
    elif entry is not None:
        message = (
            f"{entry.model_id} is in the catalog (rank {entry.rank or '-'}"
            + (f", {fmt.downloads(entry.downloads)} downloads" if entry.downloads else "")
            + f") but has no results in {where} yet"
        )
    else:
        message = f"no results for model {found.asked!r} in {where}, and the catalog has no such id"
    return {
        "model_id": found.asked,
        "found": False,
        "in_catalog": None
        if entry is None
        else {"model_id": entry.model_id, "rank": entry.rank, "downloads": entry.downloads},
        "check": check,  # the command that gives it results (None: nothing to run)
        "did_you_mean": [s.to_dict() for s in found.suggestions],
        "message": message,
        "hint": f"run it with: {check}"
        if check
        else "check the id's spelling"
        + (" (did you mean one of these?)" if found.suggestions else ""),
    }
