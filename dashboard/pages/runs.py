"""Runs and the diff between two (`/runs`, `/api/runs`, `/api/diff`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response

from dashboard.site import Dashboard, NotFound, dashboard, json_answer
from ground.errors import StoreError, UsageError
from reports import diff as diff_mod
from reports.coverage import device_label
from reports.render import charts
from reports.store import check_run_id

router = APIRouter()
API = {
    "/api/runs?a=&b=": "every run, with the diff of two (default: the last two)",
    "/api/diff?a=&b=": "the diff of two runs",
}
NAV = [("/runs", "Runs")]


def runs_data(dash: Dashboard, a: str | None, b: str | None, limit: int) -> dict[str, Any]:
    if not 0 <= limit <= 5000:
        raise UsageError(f"limit must be between 0 and 5000, not {limit}")
    from reports.coverage import coverage_over_runs

    q = dash.q
    ids = q.run_ids()
    trend = coverage_over_runs(q) if ids else []
    figures: dict[str, list[dict[str, Any]]] = {}  # a run of several dtypes: a line per dtype
    for r in trend:
        figures.setdefault(r["run_id"], []).append(r)
    # every run of the runs table, newest first: one interrupted before its first results part
    # is listed too (no models yet) and can be compared
    runs = []
    for info in q.runs():
        for per_dtype in figures.get(info["run_id"]) or [{}]:
            row = {**info, **per_dtype}
            row["has_results"] = info["run_id"] in figures or info["run_id"] in ids
            row.setdefault("models", 0)
            row.setdefault("dtypes", 1)  # no results yet: one line, its dtypes as asked
            row.setdefault(
                "device_label", device_label(info.get("device"), info.get("device_emulated"))
            )
            for key in ("passed_share", "passed_downloads_share", "on_device_downloads_share"):
                row.setdefault(key, None)
            row["duration_s"] = run_duration_s(info)
            runs.append(row)
    if (a is None) != (b is None):
        raise UsageError("give both a and b to compare two runs")
    result = None
    if a is not None and b is not None:
        result = diff_mod.run_diff(q, diff_run_param(dash, a), diff_run_param(dash, b), limit=limit)
    elif len(ids) >= 2:
        result = diff_mod.run_diff(q, ids[1], ids[0], limit=limit)
    return {"runs": runs, "diff": result}


def run_duration_s(info: dict[str, Any]) -> float | None:
    """Seconds from a run's start to its last update (its end, once it has ended)."""
    started, updated = info.get("started_at"), info.get("updated_at")
    if started is None or updated is None:
        return None
    return max(0.0, (updated - started).total_seconds())


def diff_run_param(dash: Dashboard, run: str) -> str:
    """A run to compare: any run of the store, with results or not (400 for a bad id, 404 for
    a run the store does not have)."""
    try:
        check_run_id(run)
    except StoreError as exc:
        raise UsageError(exc.message) from None
    try:
        return diff_mod.resolve_known_run(dash.q, run)
    except StoreError as exc:
        raise NotFound(exc.message + (f" ({exc.hint})" if exc.hint else "")) from None


@router.get("/api/runs")
def api_runs(
    a: str | None = None,
    b: str | None = None,
    limit: int = Query(100),
    dash: Dashboard = Depends(dashboard),
) -> Any:
    return json_answer(runs_data(dash, a, b, limit))


@router.get("/api/diff")
def api_diff(a: str, b: str, limit: int = Query(100), dash: Dashboard = Depends(dashboard)) -> Any:
    return json_answer(runs_data(dash, a, b, limit)["diff"])


@router.get("/runs", response_class=HTMLResponse)
def runs_page(
    request: Request,
    a: str | None = None,
    b: str | None = None,
    limit: int = Query(100),
    dash: Dashboard = Depends(dashboard),
) -> Response:
    data = runs_data(dash, a, b, limit)
    trend = [r for r in data["runs"][::-1] if r["has_results"]]
    return dash.render(
        request,
        "runs.html",
        data=data,
        chart=charts.trend_chart(trend) if trend else None,
    )
