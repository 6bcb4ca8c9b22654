"""The models table (`/models`, `/api/models`) and one model's page (`/models/{org}/{name}`,
`/api/models/{org}/{name}`; ids without an org: `/models/{name}`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response

from dashboard.site import Dashboard, NotFound, dashboard, json_answer, model_url, op_url
from ground.errors import UsageError
from ground.ids import unsafe_model_id
from ground.schema import Status
from reports.coverage import run_stages
from reports.models import (
    OUTCOME_FILTERS,
    SORT_COLUMNS,
    ModelFilter,
    facets,
    find_stored_model,
    model_detail,
    not_found_answer,
)
from reports.models import model_table as model_table_query
from reports.sizing import FITS, PARAMS

router = APIRouter()
API = {
    "/api/models?run=&search=&outcome=&stage=&status=&library=&task=&model_type="
    "&fit=&params=&sort=&order=&page=&per_page=": "one page of the models table (a run of several "
    "dtypes: a row per model and dtype; &dtype= one of them, &differs=true the models that "
    "differ; &fit= and &params= filter by the cores and parameters at full size)",
    "/api/models/{org}/{name}?run=": "one model (ids without an org: /api/models/{name}; "
    "&dtype= the top level at one dtype of a run of several)",
}
NAV = [("/models", "Models")]


def table_params(
    run: str | None = None,
    search: str | None = None,
    outcome: str | None = None,
    stage: str | None = None,
    status: str | None = None,
    library: str | None = None,
    task: str | None = None,
    model_type: str | None = None,
    architecture: str | None = None,
    signature: str | None = None,
    dtype: str | None = None,
    differs: bool = False,
    fit: str | None = None,
    params: str | None = None,
    sort: str = "downloads",
    order: str = "desc",
    page: int = Query(1),
    per_page: int = Query(50),
) -> dict[str, Any]:
    """The query parameters of the models table (HTML and JSON alike)."""
    return {
        "run": run,
        "search": search,
        "outcome": outcome,
        "stage": stage,
        "status": status,
        "library": library,
        "task": task,
        "model_type": model_type,
        "architecture": architecture,
        "signature": signature,
        "dtype": dtype,
        "differs": differs,
        "fit": fit,
        "params": params,
        "sort": sort,
        "order": order,
        "page": page,
        "per_page": per_page,
    }


# ---- the models table ------------------------------------------------------------------------


def table_data(dash: Dashboard, params: dict[str, Any]) -> tuple[dict[str, Any], ModelFilter]:
    flt = ModelFilter(
        search=params["search"] or None,
        outcome=params["outcome"] or None,
        stage=params["stage"] or None,
        status=params["status"] or None,
        library=params["library"] or None,
        pipeline_tag=params["task"] or None,
        model_type=params["model_type"] or None,
        architecture=params["architecture"] or None,
        error_signature=params["signature"] or None,
        dtype=params["dtype"] or None,
        differs=bool(params["differs"]),
        fit=params["fit"] or None,
        params=params["params"] or None,
        sort=params["sort"],
        order=params["order"],
        page=params["page"],
        per_page=params["per_page"],
    )
    run_id = dash.run_param(params["run"])
    data = model_table_query(dash.q, run_id, flt)
    data["answer"] = _search_answer(dash, flt.search, run_id) if not data["total"] else None
    return data, flt


def _search_answer(dash: Dashboard, search: str | None, run_id: str | None) -> dict | None:
    """What `lookup` says of a searched id the run has no row for (its catalog rank and the
    command that gives it results, or the ids meant), where the search names a model id."""
    if not search or not search.strip() or " " in search.strip():
        return None
    meant, command = find_stored_model(dash.q, search.strip(), dash.catalog)
    if meant.model_id is None and meant.in_catalog is None and not meant.suggestions:
        return None
    return not_found_answer(meant, command, f"run {run_id}" if run_id else "any run")


@router.get("/api/models")
def api_models(
    params: dict[str, Any] = Depends(table_params), dash: Dashboard = Depends(dashboard)
) -> Any:
    data, _ = table_data(dash, params)
    return json_answer(data)


@router.get("/models", response_class=HTMLResponse)
def models(
    request: Request,
    params: dict[str, Any] = Depends(table_params),
    dash: Dashboard = Depends(dashboard),
) -> Response:
    data, flt = table_data(dash, params)
    params = {
        **params,
        "per_page": params["per_page"] if params["per_page"] != 50 else None,
        "differs": "true" if params["differs"] else None,
    }
    sort, order = params["sort"], params["order"]

    def link(**changes: Any) -> str:
        merged = {**params, **changes}
        return "/models?" + urlencode({k: v for k, v in merged.items() if v not in (None, "")})

    def sort_link(col: str) -> str:
        new_order = "asc" if (sort == col and order == "desc") else "desc"
        return link(sort=col, order=new_order, page=None)

    return dash.render(
        request,
        "models.html",
        table=data,
        flt=flt,
        link=link,
        sort_link=sort_link,
        model_link=lambda mid: model_url(mid, data["run_id"]),
        op_link=lambda op: op_url(op, data["run_id"]),
        facets=facets(dash.q, data["run_id"]),
        outcomes=OUTCOME_FILTERS,
        statuses=[s.value for s in Status],
        sort_columns=SORT_COLUMNS,
        fits=FITS,
        param_ranges=PARAMS,
        denominators=dash.denominators(data["run_id"]),
        stages=run_stages(dash.q, data["run_id"]),
    )


# ---- one model -------------------------------------------------------------------------------


def detail_data(
    dash: Dashboard, model_id: str, run: str | None, dtype: str | None = None
) -> dict[str, Any]:
    problem = unsafe_model_id(model_id)
    if problem:  # ids never name files here, but a climbing one is refused all the same
        raise UsageError(f"bad model id {model_id!r}: {problem}")
    if dtype is not None and len(dtype) > 32:
        raise UsageError("dtype is longer than 32 characters")
    run_id = dash.run_param(run) if run is not None else None
    if run_id is None and not dash.q.run_ids():
        raise NotFound(f"the store {dash.q.store.uri!r} has no results yet")
    found = model_detail(dash.q, model_id, run_id, dtype or None)
    if found is None:
        where = f"run {run_id}" if run_id else "any run"
        where += f" at dtype {dtype}" if dtype else ""
        meant, check = find_stored_model(dash.q, model_id, dash.catalog)
        if meant.how == "case":  # the one stored id that differs only in case: its page
            found = model_detail(dash.q, str(meant.model_id), run_id, dtype or None)
        if found is None:
            answer = not_found_answer(meant, check, where)
            raise NotFound(answer["message"], hint=answer["hint"], answer=answer)
    return found


def api_model(
    name: str,
    org: str | None = None,
    run: str | None = None,
    dtype: str | None = None,
    dash: Dashboard = Depends(dashboard),
) -> Any:
    model_id = f"{org}/{name}" if org is not None else name
    return json_answer(detail_data(dash, model_id, run, dtype))


def model_page(
    request: Request,
    name: str,
    org: str | None = None,
    run: str | None = None,
    dtype: str | None = None,
    dash: Dashboard = Depends(dashboard),
) -> Response:
    model_id = f"{org}/{name}" if org is not None else name
    m = detail_data(dash, model_id, run, dtype)
    run_id = m["run_id"]
    links = SimpleNamespace(
        op=lambda op: op_url(op, run_id),
        run=lambda rid: "/?" + urlencode({"run": rid}),
        history=lambda rid: model_url(model_id, rid),
        cluster=lambda sig: "/models?" + urlencode({"run": run_id, "signature": sig}),
        dtype=lambda d: model_url(model_id, run_id, d),
        docs="/docs/",
    )
    api = model_url(model_id, run, dtype).replace("/models/", "/api/models/", 1)
    return dash.render(request, "model.html", m=m, links=links, api_url=api)


def _model_routes(prefix: str, handler: Any, **kw: Any) -> None:
    """A model id with an org (`org/name`, the name may hold more slashes) and one without."""
    router.add_api_route(prefix + "/{org}/{name:path}", handler, methods=["GET"], **kw)
    router.add_api_route(prefix + "/{name}", handler, methods=["GET"], **kw)


_model_routes("/api/models", api_model)
_model_routes("/models", model_page, response_class=HTMLResponse)
