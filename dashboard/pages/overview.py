"""The overview (`/`, `/api/overview`): one run's report, its charts and the runs to pick."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from dashboard.site import Dashboard, dashboard, json_answer, op_url
from reports.render import html_site
from reports.render.sections import report_sections
from reports.summary import run_report

router = APIRouter()
API = {"/api/overview?run=": "the run report (denominators, funnel, headline, ...)"}
NAV = [("/", "Overview")]


def overview_data(dash: Dashboard, run: str | None) -> dict[str, Any]:
    return run_report(dash.q, dash.run_param(run))


@router.get("/api/overview")
def api_overview(run: str | None = None, dash: Dashboard = Depends(dashboard)) -> Any:
    return json_answer(overview_data(dash, run))


@router.get("/", response_class=HTMLResponse)
def overview(
    request: Request, run: str | None = None, dash: Dashboard = Depends(dashboard)
) -> Response:
    report = overview_data(dash, run)

    def models_link(key: str) -> Callable[[str], str | None]:
        def link(value: str) -> str | None:
            if value in ("(none)", "(no signature)", ""):
                return None
            return "/models?" + urlencode({"run": report["run_id"], key: value})

        return link

    def op_link(op: str) -> str:
        return op_url(op, report["run_id"])

    links = {
        "headline": models_link("architecture"),
        "failures": models_link("signature"),
        "by_library": models_link("library"),
        "by_pipeline_tag": models_link("task"),
        "by_model_type": models_link("model_type"),
        "by_architecture": models_link("architecture"),
        # every op of the missing-ops ranking has a page, and so does every op the op sweep
        # dispatched (its problems, its cheapest lowerings)
        "ops": op_link,
        "op_problems": op_link,
        "op_cheapest": op_link,
    }
    return dash.render(
        request,
        "overview.html",
        report=report,
        sections=report_sections(report),
        charts=html_site.report_charts(report),
        runs=dash.q.run_ids(),
        links=links,
    )
