"""The op sweep (`/op-sweep`, `/api/op-sweep`) and one ATen op's page (`/ops/{op}`,
`/api/ops/{op}`: its OpInfo samples, the models that fall back on it)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from dashboard.site import Dashboard, NotFound, dashboard, json_answer, model_url, op_url
from ground.errors import UsageError
from reports import op_sweep
from reports.render.op_sections import op_sweep_sections

router = APIRouter()
API = {
    "/api/ops/{op}?run=&op_run=": "one ATen op: its OpInfo samples and the models "
    "whose fallbacks include it",
    "/api/op-sweep?run=": "an op-sweep run: denominators, ops, join to the models",
}
NAV = [("/op-sweep", "Op sweep")]


# ---- the op sweep ----------------------------------------------------------------------------


def op_sweep_data(dash: Dashboard, run: str | None) -> dict[str, Any]:
    op_run = dash.op_run_param(run) or op_sweep.op_query(dash.q).resolve()
    runs = op_sweep.op_query(dash.q).runs()
    if op_run is None:
        return {"op_run_id": None, "runs": runs, "report": None, "ops": []}
    report = op_sweep.op_sweep_section_data(dash.q, None, op_run_id=op_run)
    assert report is not None
    joined = report.get("joined") or {}
    return {
        "op_run_id": op_run,
        "model_run_id": joined.get("model_run_id"),
        "runs": runs,
        "report": report,
        "ops": op_sweep.op_table(dash.q, op_run),
    }


@router.get("/api/op-sweep")
def api_op_sweep(run: str | None = None, dash: Dashboard = Depends(dashboard)) -> Any:
    return json_answer(op_sweep_data(dash, run))


@router.get("/op-sweep", response_class=HTMLResponse)
def op_sweep_page(
    request: Request, run: str | None = None, dash: Dashboard = Depends(dashboard)
) -> Response:
    data = op_sweep_data(dash, run)
    links = set(data["ops"] and [o["op"] for o in data["ops"]])
    return dash.render(
        request,
        "op_sweep.html",
        data=data,
        sections=op_sweep_sections(data["report"]),
        op_link_or_none=lambda cell: (
            op_url(cell, None, data["op_run_id"]) if cell in links else None
        ),
    )


# ---- one op ----------------------------------------------------------------------------------


def op_data(dash: Dashboard, op: str, run: str | None, op_run: str | None) -> dict[str, Any]:
    if not op_sweep.valid_op_name(op):
        raise UsageError(
            "op must be an ATen op name (letters, digits, '_', ':' and '.'), "
            f"at most {op_sweep.OP_NAME_MAX} characters"
        )
    run_id = dash.run_param(run) if (run is not None or dash.q.run_ids()) else None
    page = op_sweep.op_page(dash.q, op, model_run_id=run_id, op_run_id=dash.op_run_param(op_run))
    if not page["found"]:
        raise NotFound(
            f"{page['op']} was dispatched by no OpInfo sample of op-sweep run "
            f"{page['op_run_id'] or '(none)'}, and no model of run {run_id or '(none)'} "
            "fell back on it, failed at it or compiled it with no evidence"
        )
    return page


@router.get("/api/ops/{op:path}")
def api_op(
    op: str,
    run: str | None = None,
    op_run: str | None = None,
    dash: Dashboard = Depends(dashboard),
) -> Any:
    return json_answer(op_data(dash, op, run, op_run))


@router.get("/ops/{op:path}", response_class=HTMLResponse)
def op_page(
    request: Request,
    op: str,
    run: str | None = None,
    op_run: str | None = None,
    dash: Dashboard = Depends(dashboard),
) -> Response:
    page = op_data(dash, op, run, op_run)
    api = "/api/ops/" + quote(page["op"], safe="")
    params = {k: v for k, v in (("run", run), ("op_run", op_run)) if v}
    return dash.render(
        request,
        "op.html",
        p=page,
        model_link=lambda mid: model_url(mid, page["model_run_id"]),
        api_url=api + (("?" + urlencode(params)) if params else ""),
    )
