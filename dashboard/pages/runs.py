"""Runs and the diff between two (`/runs`, `/api/runs`, `/api/diff`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response

from dashboard.site import Dashboard, dashboard, json_answer
from reports import diff as diff_mod
from reports.errors import UsageError
from reports.render import charts

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
    runs = [{**(q.run_info(r["run_id"]) or {}), **r} for r in reversed(trend)]
    if (a is None) != (b is None):
        raise UsageError("give both a and b to compare two runs")
    result = None
    if a is not None and b is not None:
        result = diff_mod.run_diff(q, dash.run_param(a), dash.run_param(b), limit=limit)
    elif len(ids) >= 2:
        result = diff_mod.run_diff(q, ids[1], ids[0], limit=limit)
    return {"runs": runs, "diff": result}


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
    return dash.render(
        request,
        "runs.html",
        data=data,
        trend=data["runs"][::-1],
        chart=charts.trend_chart(data["runs"][::-1]) if data["runs"] else None,
    )
