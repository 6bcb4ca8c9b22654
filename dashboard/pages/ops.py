"""Missing ops (`/ops`, `/api/ops`): the ops models fell back on, ranked by the downloads they
touch, with the op sweep's verdict where an op-sweep run covers them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response

from dashboard.site import Dashboard, dashboard, json_answer
from reports import op_sweep
from reports import ops as ops_mod
from reports.errors import UsageError

router = APIRouter()
API = {"/api/ops?run=&limit=": "missing ops ranked by the downloads they touch"}
NAV = [("/ops", "Missing ops")]


def ops_data(dash: Dashboard, run: str | None, limit: int) -> dict[str, Any]:
    if not 1 <= limit <= 10_000:
        raise UsageError(f"limit must be between 1 and 10000, not {limit}")
    run_id = dash.run_param(run)
    rows = ops_mod.missing_ops(dash.q, run_id)
    op_run = op_sweep.op_run_for_model_run(dash.q, run_id)
    return {
        "run_id": run_id,
        "total": len(rows),
        "ops": op_sweep.with_op_sweep(dash.q, run_id, rows[:limit], op_run),
        "op_run_id": op_run,
        "denominators": dash.denominators(run_id),
    }


@router.get("/api/ops")
def api_ops(
    run: str | None = None, limit: int = Query(200), dash: Dashboard = Depends(dashboard)
) -> Any:
    return json_answer(ops_data(dash, run, limit))


@router.get("/ops", response_class=HTMLResponse)
def ops_page(
    request: Request,
    run: str | None = None,
    limit: int = Query(200),
    dash: Dashboard = Depends(dashboard),
) -> Response:
    return dash.render(request, "ops.html", data=ops_data(dash, run, limit))
