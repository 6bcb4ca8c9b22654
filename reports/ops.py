"""Missing ops: every ATen op that fell back to the CPU (or that a failure names, or that a
compiler took to lower with no evidence either way), ranked by the downloads of the models it
touches, with the downloads that would run entirely on the device if that op alone were lowered.

Each entry says what it rests on: evidence of absence (the op fell back, or a failure names it:
the device has no kernel, or its code raises) or absence of evidence (only graph ops a compiler
took to lower with nothing deciding it: the models it touches pass, unless the op fails), or,
for an op the device's profile could not know (one its torch did not register: every fallback
of it says `newer_than_profile`), newer than the profile: a guess about the device, unverified,
kept apart from what the profile's own source leaves out."""

from __future__ import annotations

from typing import Any

from reports.coverage import share
from reports.query import (
    IN_DTYPE,
    OUTCOME_FAILED,
    OUTCOME_PASSED,
    Scan,
    StoreQuery,
    in_dtype,
    same_dtype,
)

EVIDENCE_OF_ABSENCE = "evidence of absence"
ABSENCE_OF_EVIDENCE = "absence of evidence"
NEWER_THAN_PROFILE = "newer than the profile"


def _fallback_scan(files: tuple[str, ...]) -> Scan:
    return Scan(
        "fallbacks",
        files,
        ("model_id", "dtype", "stage", "op", "count", "source", "evidence"),
        filename=True,
    )


def missing_ops(
    q: StoreQuery, run_id: str, *, limit: int | None = None, dtype: str | None = None
) -> list[dict[str, Any]]:
    """One row per op, most downloads touched first (`dtype`: of the models' rows at that
    dtype; None: every row of the run, its one dtype).

    - `models` / `downloads`: models where the op fell back in some stage;
    - `calls`: fallback calls summed over those models and stages; `sources`: eager / compile;
    - `sole_models` / `sole_downloads`: models that passed every stage and whose only fallback
      is this op: lowering it makes them run entirely on the device;
    - `failing_models` / `failing_downloads`: models whose failure names this op;
    - `unverified_models` / `unverified_downloads`: models whose compile took the op to lower
      with no evidence either way (`unverified_ops`);
    - `blocked_models` / `blocked_downloads`: models it touches any of these ways (the ranking);
      `top_models`: the five most downloaded of them;
    - `evidence`: "evidence of absence" when some model's fallback or failure names it, else
      "absence of evidence"; "newer than the profile" when every fallback of it says the
      profile's torch did not have it (and no failure names it).
    """

    def build() -> list[dict[str, Any]]:
        q.ensure_summaries([run_id])
        files = q.files(run_id)
        unverified = _unverified(q, run_id, files, dtype)
        rows = _merge(
            _fallen_back(q, run_id, files, dtype),
            _failing(q, run_id, dtype),
            _blocked(q, run_id, files, dtype),
            unverified,
        )
        total = q.run_downloads(run_id, dtype)
        for r in rows:
            r["blocked_downloads_share"] = share(r["blocked_downloads"], total)
            r["downloads_share"] = share(r["downloads"], total)
            r["sole_downloads_share"] = share(r["sole_downloads"], total)
        rows.sort(key=lambda r: (-r["blocked_downloads"], -r["blocked_models"], r["op"]))
        return rows

    rows = q.memo("missing_ops", run_id, build, dtype)
    return rows if limit is None else rows[:limit]


def _failing(q: StoreQuery, run_id: str, dtype: str | None) -> list[dict[str, Any]]:
    """Per op, the failed models whose failure names it."""
    return q.fetch(
        f"""
        SELECT failing_op AS op, count(*) AS failing_models,
          coalesce(sum(downloads), 0) AS failing_downloads
        FROM model_runs
        WHERE run_id = $run AND {IN_DTYPE} AND outcome = '{OUTCOME_FAILED}'
          AND failing_op IS NOT NULL
        GROUP BY ALL
        """,
        {"run": run_id, "dtype": dtype},
    )


def _fallen_back(q: StoreQuery, run_id: str, files: Any, dtype: str | None) -> list[dict[str, Any]]:
    """Per op, the models where it fell back (in the part each model's summary counts), and
    those it alone keeps from running entirely on the device."""
    if not files.fallbacks:
        return []
    return q.fetch(
        f"""
        WITH f AS (
          SELECT f.model_id, s.dtype, f.stage, f.op, f.count, f.source, f.evidence
          FROM fallback_parts f
          JOIN model_runs s ON s.run_id = $run AND s.model_id = f.model_id
            AND {same_dtype("f", "s")} AND {in_dtype("s")}
            AND s.part_no = list_position($parts, parse_filename(f.filename))
        ),
        op_model AS (
          SELECT op, model_id, dtype, sum(count) AS calls,
            list(DISTINCT source) AS sources, list(DISTINCT stage) AS stages,
            coalesce(bool_and(evidence = 'newer_than_profile'), false) AS newer
          FROM f GROUP BY op, model_id, dtype
        ),
        per_model AS (
          SELECT model_id, dtype, count(DISTINCT op) AS n_ops FROM f GROUP BY model_id, dtype
        ),
        m AS (
          SELECT model_id, dtype, downloads, outcome FROM model_runs
          WHERE run_id = $run AND {IN_DTYPE}
        )
        SELECT o.op, count(*) AS models, coalesce(sum(m.downloads), 0) AS downloads,
          sum(o.calls) AS calls,
          list_sort(list_distinct(flatten(list(o.sources)))) AS sources,
          list_sort(list_distinct(flatten(list(o.stages)))) AS stages,
          bool_and(o.newer) AS newer,
          count(*) FILTER (WHERE p.n_ops = 1 AND m.outcome = '{OUTCOME_PASSED}')
            AS sole_models,
          coalesce(sum(m.downloads) FILTER (WHERE p.n_ops = 1
            AND m.outcome = '{OUTCOME_PASSED}'), 0) AS sole_downloads
        FROM op_model o JOIN m USING (model_id, dtype) JOIN per_model p USING (model_id, dtype)
        GROUP BY o.op
        """,
        {"run": run_id, "dtype": dtype, "parts": q.summary_part_names(run_id)},
        scans={"fallback_parts": _fallback_scan(files.fallbacks)},
    )


_UNVERIFIED_SQL = """
  SELECT DISTINCT unnest(r.unverified_ops) AS op, r.model_id, s.dtype
  FROM results_parts r
  JOIN model_runs s ON s.run_id = $run AND s.model_id = r.model_id
    AND s.part_no = list_position($parts, parse_filename(r.filename))
    AND s.dtype = r.dtype AND ($dtype IS NULL OR s.dtype = $dtype)
  WHERE r.unverified_ops IS NOT NULL"""


def _results_scan(files: tuple[str, ...]) -> Scan:
    return Scan("results", files, ("model_id", "dtype", "unverified_ops"), filename=True)


def _unverified(
    q: StoreQuery, run_id: str, files: Any, dtype: str | None
) -> dict[str, dict[str, Any]]:
    """Per op, the models whose compile took it to lower with no evidence either way (in the
    part each model's summary counts)."""
    if not files.results:
        return {}
    rows = q.fetch(
        f"""
        WITH u AS ({_UNVERIFIED_SQL})
        SELECT u.op, count(*) AS unverified_models,
          coalesce(sum(m.downloads), 0) AS unverified_downloads
        FROM u JOIN model_runs m ON m.run_id = $run AND m.model_id = u.model_id
          AND m.dtype = u.dtype
        GROUP BY u.op
        """,
        {"run": run_id, "dtype": dtype, "parts": q.summary_part_names(run_id)},
        scans={"results_parts": _results_scan(files.results)},
    )
    return {r["op"]: r for r in rows}


def _blocked(
    q: StoreQuery, run_id: str, files: Any, dtype: str | None
) -> dict[str, dict[str, Any]]:
    """Per op, the models it touches any way: a fallback, a failure that names it, or a
    compile verdict with no evidence."""
    union = (
        "UNION SELECT DISTINCT f.op, f.model_id, s.dtype "
        "FROM fallback_parts f "
        "JOIN model_runs s ON s.run_id = $run AND s.model_id = f.model_id "
        f"AND {same_dtype('f', 's')} AND {in_dtype('s')} "
        "AND s.part_no = list_position($parts, parse_filename(f.filename))"
        if files.fallbacks
        else ""
    )
    if files.results:
        union += f" UNION {_UNVERIFIED_SQL}"
    blocked_sql = f"""
        WITH fail AS (
          SELECT failing_op AS op, model_id, dtype FROM model_runs
          WHERE run_id = $run AND {IN_DTYPE} AND outcome = '{OUTCOME_FAILED}'
            AND failing_op IS NOT NULL
        ),
        touched AS (SELECT op, model_id, dtype FROM fail {union})
        SELECT t.op, count(*) AS blocked_models,
          coalesce(sum(m.downloads), 0) AS blocked_downloads,
          list(t.model_id ORDER BY m.downloads DESC, t.model_id) AS top_models
        FROM touched t JOIN model_runs m ON m.run_id = $run AND m.model_id = t.model_id
          AND m.dtype = t.dtype
        GROUP BY t.op
    """
    params: dict[str, Any] = {"run": run_id, "dtype": dtype}
    scans = {}
    if files.fallbacks or files.results:
        params["parts"] = q.summary_part_names(run_id)
    if files.fallbacks:
        scans["fallback_parts"] = _fallback_scan(files.fallbacks)
    if files.results:
        scans["results_parts"] = _results_scan(files.results)
    return {r["op"]: r for r in q.fetch(blocked_sql, params, scans=scans)}


def _empty(op: str) -> dict[str, Any]:
    return {
        "op": op,
        "models": 0,
        "downloads": 0,
        "calls": 0,
        "sources": [],
        "stages": [],
        "sole_models": 0,
        "sole_downloads": 0,
        "failing_models": 0,
        "failing_downloads": 0,
    }


def _merge(
    fell_back: list[dict[str, Any]],
    failing: list[dict[str, Any]],
    blocked: dict[str, dict[str, Any]],
    unverified: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One row per op named by a fallback, a failure or an unverified compile verdict, with its
    counts of each kind and what it rests on."""
    unverified = unverified or {}
    by_op = {r["op"]: r for r in fell_back}
    for r in fell_back:
        r.update(failing_models=0, failing_downloads=0)
    for f in failing:
        row = by_op.setdefault(f["op"], _empty(f["op"]))
        row.update(failing_models=f["failing_models"], failing_downloads=f["failing_downloads"])
    for op in unverified:
        by_op.setdefault(op, _empty(op))
    rows = list(by_op.values())
    for r in rows:
        b = blocked.get(r["op"], {})
        u = unverified.get(r["op"], {})
        r["blocked_models"] = b.get("blocked_models", 0)
        r["blocked_downloads"] = b.get("blocked_downloads", 0)
        # the most downloaded models it touches any way (a model once, at any of its dtypes)
        r["top_models"] = list(dict.fromkeys(b.get("top_models") or []))[:5]
        r["unverified_models"] = u.get("unverified_models", 0)
        r["unverified_downloads"] = u.get("unverified_downloads", 0)
        absent = bool(r["models"] or r["failing_models"])
        if r.get("newer") and not r["failing_models"]:
            r["evidence"] = NEWER_THAN_PROFILE
        else:
            r["evidence"] = EVIDENCE_OF_ABSENCE if absent else ABSENCE_OF_EVIDENCE
    return rows


def unverified_models_by_op(q: StoreQuery, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """For each base op (`aten::add` for `aten::add.Tensor`), the models of the run whose
    compile took it to lower with no evidence either way, most downloaded first: a row per
    model and dtype, with the overloads it names (`overloads`)."""

    def build() -> dict[str, list[dict[str, Any]]]:
        q.ensure_summaries([run_id])
        files = q.files(run_id)
        if not files.results:
            return {}
        rows = q.fetch(
            f"""
            WITH u AS ({_UNVERIFIED_SQL})
            SELECT regexp_replace(split_part(u.op, '.', 1), '([^_])_$', '\\1') AS base,
              u.model_id, u.dtype, any_value(m.downloads) AS downloads,
              any_value(m.outcome) AS outcome, any_value(m.architecture) AS architecture,
              list_sort(list_distinct(list(u.op))) AS overloads
            FROM u JOIN model_runs m ON m.run_id = $run AND m.model_id = u.model_id
              AND m.dtype = u.dtype
            GROUP BY base, u.model_id, u.dtype
            ORDER BY base, downloads DESC NULLS LAST, u.model_id, u.dtype
            """,
            {"run": run_id, "dtype": None, "parts": q.summary_part_names(run_id)},
            scans={"results_parts": _results_scan(files.results)},
        )
        out: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            out.setdefault(r.pop("base"), []).append(r)
        return out

    return q.memo("unverified_models_by_op", run_id, build)
