"""Missing ops (`/ops`, `/api/ops`): the ops models fell back on, ranked by the downloads they
touch, with the op sweep's verdict where an op-sweep run covers them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response

from dashboard.site import Dashboard, dashboard, json_answer
from ground.errors import UsageError
from reports import dtypes as dtypes_mod
from reports import op_sweep
from reports import ops as ops_mod

router = APIRouter()
API = {
    "/api/ops?run=&limit=": "missing ops ranked by the downloads they touch (a run of "
    "several dtypes: `ops` at &dtype=, default its first; `side_by_side` every dtype's)"
}
NAV = [("/ops", "Missing ops")]


def ops_data(
    dash: Dashboard, run: str | None, limit: int, dtype: str | None = None
) -> dict[str, Any]:
    if not 1 <= limit <= 10_000:
        raise UsageError(f"limit must be between 1 and 10000, not {limit}")
    run_id = dash.run_param(run)
    dtypes = dash.q.run_dtypes(run_id)
    if dtype is not None and dtype not in dtypes:
        raise UsageError(
            f"run {run_id} has no rows of dtype {dtype[:32]!r}; its dtypes: {', '.join(dtypes)}"
        )
    several = len(dtypes) > 1
    shown = dtype or (dtypes[0] if several else None)
    op_run = op_sweep.op_run_for_model_run(dash.q, run_id)

    def of(d: str | None) -> tuple[int, list[dict[str, Any]]]:
        rows = ops_mod.missing_ops(dash.q, run_id, dtype=d)
        return len(rows), op_sweep.with_op_sweep(dash.q, run_id, rows[:limit], op_run, d)

    total, rows = of(shown)
    side_by_side = None
    if several and dtype is None:  # every dtype's missing ops next to each other
        side_by_side = dtypes_mod.missing_ops_side_by_side({d: of(d)[1] for d in dtypes})[:limit]
    return {
        "run_id": run_id,
        "dtypes": dtypes,
        "dtype": shown,
        "total": total,
        "ops": rows,
        "side_by_side": side_by_side,
        "op_run_id": op_run,
        "denominators": dash.denominators(run_id, shown),
    }


@router.get("/api/ops")
def api_ops(
    run: str | None = None,
    dtype: str | None = None,
    limit: int = Query(200),
    dash: Dashboard = Depends(dashboard),
) -> Any:
    return json_answer(ops_data(dash, run, limit, dtype or None))


@router.get("/ops", response_class=HTMLResponse)
def ops_page(
    request: Request,
    run: str | None = None,
    dtype: str | None = None,
    limit: int = Query(200),
    dash: Dashboard = Depends(dashboard),
) -> Response:
    return dash.render(request, "ops.html", data=ops_data(dash, run, limit, dtype or None))
