"""The dtype axis on the reading side: a run may sweep every model at several dtypes (its rows
carry theirs), and this puts the dtypes side by side. Per pair of dtypes, how many models (and
downloads) pass in both, in one only, in neither; the models whose rows differ between the
dtypes, with the op or error that differs; the missing ops of each dtype next to each other.

A run of one dtype (every run made before a run could sweep several) has nothing to compare:
`dtype_differences` is None and the missing ops are those of the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ground import fmt
from reports.coverage import share
from reports.query import OUTCOME_FAILED, OUTCOME_PASSED, Scan, StoreQuery, same_dtype

# Models whose rows at the run's dtypes do not all agree: the outcome, running entirely on the
# device or not, or the first failure (stage, status, error) differs. Needs $run.
DIFFERING_MODELS_SQL = """
  SELECT model_id FROM model_runs WHERE run_id = $run GROUP BY model_id
  HAVING count(DISTINCT dtype) > 1 AND (
    count(DISTINCT outcome) > 1
    OR count(DISTINCT (outcome = 'passed' AND fallback_ops = 0 AND fallback_calls = 0)) > 1
    OR count(DISTINCT (coalesce(failed_stage, ''), coalesce(failed_status, ''),
      coalesce(error_signature, ''))) > 1)
"""

KINDS = {
    "passes_only": "passes every stage in some dtypes only",
    "on_device_only": "passes in every dtype, with no CPU fallback in some only",
    "fails_differently": "fails (or is skipped) in every dtype, not in the same way",
}


def several(dtypes: Sequence[str] | None) -> bool:
    """True for a run of more than one dtype (the views that put dtypes side by side)."""
    return len(dtypes or ()) > 1


def dtype_differences(q: StoreQuery, run_id: str, *, limit: int = 200) -> dict[str, Any] | None:
    """For a run of several dtypes: per other dtype against the first, the models (and
    downloads) that pass in both, in one only, in neither, with and without CPU fallback; and the
    models whose rows differ between the dtypes (most downloaded first, up to `limit`), each with
    its outcome per dtype and the op or error that differs. None for a run of one dtype."""
    dtypes = q.run_dtypes(run_id)
    if not several(dtypes):
        return None

    def build() -> dict[str, Any]:
        pairs = [_pair(q, run_id, dtypes[0], other) for other in dtypes[1:]]
        rows = q.fetch(
            f"""
            SELECT model_id, dtype, downloads, outcome, skip_reason, failed_stage,
              failed_status, error_type, error_signature, error_message, failing_op,
              fallback_ops, fallback_calls
            FROM model_runs
            WHERE run_id = $run AND model_id IN ({DIFFERING_MODELS_SQL})
            """,
            {"run": run_id},
        )
        ops = _fallback_ops(q, run_id, sorted({r["model_id"] for r in rows}))
        models: dict[str, dict[str, Any]] = {}
        for r in rows:
            m = models.setdefault(
                r["model_id"], {"model_id": r["model_id"], "downloads": 0, "by_dtype": {}}
            )
            m["downloads"] = max(m["downloads"], r["downloads"] or 0)
            r["fallback_op_names"] = ops.get((r["model_id"], r["dtype"]), [])
            del r["model_id"], r["downloads"]
            m["by_dtype"][r.pop("dtype")] = r
        listing = sorted(models.values(), key=lambda m: (-m["downloads"], m["model_id"]))
        for m in listing:
            m["by_dtype"] = {d: m["by_dtype"][d] for d in dtypes if d in m["by_dtype"]}
            m["kind"] = difference_kind(m["by_dtype"])
            m["cause"] = difference_cause(m["by_dtype"])
        total = q.run_downloads(run_id, dtypes[0])
        return {
            "run_id": run_id,
            "dtypes": dtypes,
            "pairs": pairs,
            "differing": len(listing),
            "differing_downloads": sum(m["downloads"] for m in listing),
            "differing_downloads_share": share(sum(m["downloads"] for m in listing), total),
            "by_kind": {k: sum(1 for m in listing if m["kind"] == k) for k in KINDS},
            "models": listing[:limit],
        }

    return q.memo("dtype_differences", run_id, build, limit)  # type: ignore[no-any-return]


def _pair(q: StoreQuery, run_id: str, a: str, b: str) -> dict[str, Any]:
    """Models with rows at both dtypes (skipped ones included, as in every share): how many
    pass in both, in `a` only, in `b` only, in neither; the same for passing with no CPU
    fallback; counts and downloads."""
    on_device = f"outcome = '{OUTCOME_PASSED}' AND fallback_ops = 0 AND fallback_calls = 0"
    side = (
        f"SELECT model_id, downloads, outcome = '{OUTCOME_PASSED}' AS ok_passed, "
        f"({on_device}) AS ok_on_device FROM model_runs WHERE run_id = $run AND dtype = "
    )
    cells = []
    for what in ("passed", "on_device"):
        for name, test in _PAIR_CELLS.items():
            t = test.replace("ok", f"ok_{what}")
            cells.append(
                f'count(*) FILTER (WHERE {t}) AS "{what}.{name}", '
                f'coalesce(sum(a.downloads) FILTER (WHERE {t}), 0) AS "{what}.{name}_downloads"'
            )
    row = q.fetch(
        f"""
        SELECT count(*) AS models, coalesce(sum(a.downloads), 0) AS downloads, {", ".join(cells)}
        FROM ({side}$a) a JOIN ({side}$b) b USING (model_id)
        """,
        {"run": run_id, "a": a, "b": b},
    )[0]
    out: dict[str, Any] = {"a": a, "b": b, "models": row["models"], "downloads": row["downloads"]}
    for what in ("passed", "on_device"):
        out[what] = {
            name: {
                "models": row[f"{what}.{name}"],
                "downloads": row[f"{what}.{name}_downloads"],
                "downloads_share": share(row[f"{what}.{name}_downloads"], row["downloads"]),
            }
            for name in _PAIR_CELLS
        }
    return out


_PAIR_CELLS = {
    "both": "a.ok AND b.ok",
    "only_a": "a.ok AND NOT b.ok",
    "only_b": "NOT a.ok AND b.ok",
    "neither": "NOT a.ok AND NOT b.ok",
}


def _fallback_ops(
    q: StoreQuery, run_id: str, models: list[str]
) -> dict[tuple[str, str], list[str]]:
    """(model, dtype) -> the ops that fell back (any stage), for these models of the run."""
    files = q.files(run_id)
    if not models or not files.fallbacks:
        return {}
    rows = q.fetch(
        f"""
        SELECT f.model_id, s.dtype, list_sort(list_distinct(list(f.op))) AS ops
        FROM fallback_parts f
        JOIN model_runs s ON s.run_id = $run AND s.model_id = f.model_id
          AND {same_dtype("f", "s")}
          AND s.part_no = list_position($parts, parse_filename(f.filename))
        WHERE list_contains($models, f.model_id)
        GROUP BY f.model_id, s.dtype
        """,
        {"run": run_id, "parts": q.summary_part_names(run_id), "models": models},
        scans={
            "fallback_parts": Scan(
                "fallbacks", files.fallbacks, ("model_id", "dtype", "op"), filename=True
            )
        },
    )
    return {(r["model_id"], r["dtype"]): list(r["ops"]) for r in rows}


def _on_device(r: Mapping[str, Any]) -> bool:
    return (
        r.get("outcome") == OUTCOME_PASSED
        and not r.get("fallback_ops")
        and not r.get("fallback_calls")
    )


def difference_kind(by_dtype: Mapping[str, Mapping[str, Any]]) -> str:
    """Which of `KINDS` a model's rows per dtype show."""
    passed = [r.get("outcome") == OUTCOME_PASSED for r in by_dtype.values()]
    if any(passed) and not all(passed):
        return "passes_only"
    if all(passed):
        return "on_device_only"
    return "fails_differently"


def problem(r: Mapping[str, Any]) -> str:
    """A model's first problem at one dtype, in a few words: where it failed and on which op or
    error, or why it was skipped."""
    if r.get("outcome") == OUTCOME_FAILED:
        where = f"{r.get('failed_stage')} {r.get('failed_status')}"
        what = r.get("failing_op") or _error(r) or r.get("error_signature")
        return f"{where}: {what}" if what else where
    if r.get("outcome") == OUTCOME_PASSED:
        return "passes"
    return f"skip: {r.get('skip_reason') or 'unknown'}"


def _error(r: Mapping[str, Any]) -> str:
    """The error as raised, on one line: `Type: first line of its message` (numbers and all;
    the signature only groups failures)."""
    message = fmt.clip(fmt.first_line(r.get("error_message")), 100)
    kind = r.get("error_type")
    return f"{kind}: {message}" if kind and message else kind or message


def difference_cause(by_dtype: Mapping[str, Mapping[str, Any]]) -> str:
    """The op or error that differs between the dtypes: each dtype's failure where it does not
    pass, and the ops that fall back at one dtype only."""
    parts = []
    for dtype, r in by_dtype.items():
        if r.get("outcome") != OUTCOME_PASSED:
            parts.append(f"{dtype}: {problem(r)}")
    ops = {d: set(r.get("fallback_op_names") or ()) for d, r in by_dtype.items()}
    for dtype, mine in ops.items():
        others = set().union(*(o for d, o in ops.items() if d != dtype))
        only = sorted(mine - others)
        if only:
            shown = ", ".join(only[:3]) + (f" (+{len(only) - 3})" if len(only) > 3 else "")
            parts.append(f"{dtype} only falls back on {shown}")
    if not parts:
        on = [d for d, r in by_dtype.items() if _on_device(r)]
        if on:
            parts.append(f"no CPU fallback in {', '.join(on)} only")
    return "; ".join(parts)


def missing_ops_side_by_side(
    per_dtype: Mapping[str, Sequence[Mapping[str, Any]]],
) -> list[dict[str, Any]]:
    """Missing-ops rows of each dtype (`reports.ops.missing_ops`, with the op sweep's results at
    the same dtype) merged by op: `by_dtype` holds each dtype's row (None where the op does not
    touch a model at that dtype); most downloads touched at any dtype first."""
    merged: dict[str, dict[str, Any]] = {}
    for dtype, rows in per_dtype.items():
        for r in rows:
            item = merged.setdefault(
                r["op"], {"op": r["op"], "by_dtype": dict.fromkeys(per_dtype), "rank_downloads": 0}
            )
            item["by_dtype"][dtype] = dict(r)
            item["rank_downloads"] = max(item["rank_downloads"], r["blocked_downloads"] or 0)
    return sorted(merged.values(), key=lambda i: (-i["rank_downloads"], i["op"]))


__all__ = [
    "DIFFERING_MODELS_SQL",
    "KINDS",
    "difference_cause",
    "difference_kind",
    "dtype_differences",
    "missing_ops_side_by_side",
    "problem",
    "several",
]
