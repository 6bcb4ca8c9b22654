"""The dashboard: HTML pages and a JSON API over one store, both built from `reports/`.

Pages: `/` overview, `/models` table, `/models/{org}/{name}` one model, `/ops` missing ops,
`/ops/{op}` one ATen op (its OpInfo samples, the models that fall back on it), `/op-sweep` the
op sweep, `/runs` runs and the diff between two. Each has its JSON twin under `/api/`. Everything is
rendered by Jinja2 with autoescape on; charts are inline SVG; no asset comes from the internet.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Depends, FastAPI, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from reports import diff as diff_mod
from reports import op_sweep
from reports import ops as ops_mod
from reports.errors import StoreError, UsageError
from reports.ids import unsafe_model_id
from reports.models import OUTCOME_FILTERS, SORT_COLUMNS, ModelFilter, facets, model_detail
from reports.models import model_table as model_table_query
from reports.query import STAGES, StoreQuery
from reports.render import charts, html_site, site_pages
from reports.render.sections import report_sections
from reports.schema import Status
from reports.store import check_run_id
from reports.summary import run_report

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"


class NotFound(Exception):
    """A model or run the store does not have (HTTP 404)."""


def op_url(op: str, run_id: str | None = None, op_run_id: str | None = None) -> str:
    """`/ops/aten%3A%3Aadd` (the op quoted whole), with the runs to show."""
    params = {k: v for k, v in (("run", run_id), ("op_run", op_run_id)) if v}
    return "/ops/" + quote(op, safe="") + (("?" + urlencode(params)) if params else "")


def model_url(model_id: str, run_id: str | None = None) -> str:
    """`/models/org/name` with each segment quoted (ids may hold anything)."""
    path = "/models/" + "/".join(quote(part, safe="") for part in model_id.split("/", 1))
    return path + (("?" + urlencode({"run": run_id})) if run_id else "")


def create_app(
    store: str, *, refresh_s: float = 2.0, warm: bool = True, threads: int | None = None
) -> FastAPI:
    """The app over `store`. `warm` summarises every run in the background at start-up, so the
    first visitor does not pay for it."""
    q = StoreQuery(store, refresh_s=refresh_s, threads=threads)

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        if warm:
            q.warming = True  # before the thread starts: no request sees a false "warm"
            threading.Thread(target=_warm, args=(q,), daemon=True, name="warm-up").start()
        yield

    # No Swagger UI: it loads its scripts from a CDN, and the dashboard works offline.
    app = FastAPI(
        title="hfsweep dashboard",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    app.state.query = q
    env = site_pages.environment([TEMPLATES])
    env.globals.update(
        model_url=model_url,
        op_url=op_url,
        stages=STAGES,
        store_uri=q.store.uri,
        store_warming=lambda: q.warming,
    )
    if STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC), name="static")

    def render_page(
        request: Request, template: str, status_code: int = 200, **ctx: Any
    ) -> HTMLResponse:
        html = env.get_template(template).render(request_path=request.url.path, **ctx)
        return HTMLResponse(html, status_code=status_code)

    def wants_json(request: Request) -> bool:
        return request.url.path.startswith("/api/")

    def error(request: Request, status: int, message: str, hint: str | None = None) -> Response:
        if wants_json(request):
            body = {"error": message, "status": status}
            if hint:
                body["hint"] = hint
            return JSONResponse(body, status_code=status)
        return render_page(
            request, "error.html", status_code=status, status=status, message=message, hint=hint
        )

    @app.exception_handler(RequestValidationError)
    async def bad_params(request: Request, exc: RequestValidationError) -> Response:
        parts = []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("query", "path"))
            parts.append(f"{loc}: {e.get('msg')}")
        return error(request, 400, "bad parameter: " + "; ".join(parts))

    @app.exception_handler(UsageError)
    async def usage(request: Request, exc: UsageError) -> Response:
        return error(request, 400, exc.message, exc.hint)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> Response:
        return error(request, 404, str(exc))

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> Response:
        return error(request, 404, exc.message, exc.hint)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        message = "page not found" if exc.status_code == 404 else str(exc.detail)
        return error(request, exc.status_code, message)

    def run_param(run: str | None) -> str:
        if run is not None:
            try:
                check_run_id(run)
            except StoreError as exc:
                raise UsageError(exc.message) from None
        try:
            return q.resolve_run(run)
        except StoreError as exc:
            raise NotFound(exc.message + (f" ({exc.hint})" if exc.hint else "")) from None

    # ---- overview ------------------------------------------------------------------------

    def overview_data(run: str | None) -> dict[str, Any]:
        return run_report(q, run_param(run))

    @app.get("/api/overview")
    def api_overview(run: str | None = None) -> Any:
        return _json(overview_data(run))

    @app.get("/", response_class=HTMLResponse)
    def overview(request: Request, run: str | None = None) -> Response:
        report = overview_data(run)

        def models_link(key: str) -> Callable[[str], str | None]:
            def link(value: str) -> str | None:
                if value in ("(none)", "(no signature)", ""):
                    return None
                return "/models?" + urlencode({"run": report["run_id"], key: value})

            return link

        links = {
            "headline": models_link("architecture"),
            "failures": models_link("signature"),
            "by_library": models_link("library"),
            "by_pipeline_tag": models_link("task"),
            "by_model_type": models_link("model_type"),
            "by_architecture": models_link("architecture"),
        }
        return render_page(
            request,
            "overview.html",
            report=report,
            sections=report_sections(report),
            charts=html_site.report_charts(report),
            runs=q.run_ids(),
            links=links,
        )

    # ---- models table --------------------------------------------------------------------

    def table_data(params: dict[str, Any]) -> tuple[dict[str, Any], ModelFilter]:
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
            sort=params["sort"],
            order=params["order"],
            page=params["page"],
            per_page=params["per_page"],
        )
        run_id = run_param(params["run"])
        return model_table_query(q, run_id, flt), flt

    @app.get("/api/models")
    def api_models(params: dict[str, Any] = Depends(table_params)) -> Any:
        data, _ = table_data(params)
        return _json(data)

    @app.get("/models", response_class=HTMLResponse)
    def models(request: Request, params: dict[str, Any] = Depends(table_params)) -> Response:
        data, flt = table_data(params)
        params = {**params, "per_page": params["per_page"] if params["per_page"] != 50 else None}
        sort, order = params["sort"], params["order"]

        def link(**changes: Any) -> str:
            merged = {**params, **changes}
            return "/models?" + urlencode({k: v for k, v in merged.items() if v not in (None, "")})

        def sort_link(col: str) -> str:
            new_order = "asc" if (sort == col and order == "desc") else "desc"
            return link(sort=col, order=new_order, page=None)

        return render_page(
            request,
            "models.html",
            table=data,
            flt=flt,
            link=link,
            sort_link=sort_link,
            facets=facets(q, data["run_id"]),
            outcomes=OUTCOME_FILTERS,
            statuses=[s.value for s in Status],
            sort_columns=SORT_COLUMNS,
            denominators=run_report_denominators(q, data["run_id"]),
        )

    # ---- one model -----------------------------------------------------------------------

    def detail_data(model_id: str, run: str | None) -> dict[str, Any]:
        problem = unsafe_model_id(model_id)
        if problem:  # ids never name files here, but a climbing one is refused all the same
            raise UsageError(f"bad model id {model_id!r}: {problem}")
        run_id = run_param(run) if run is not None else None
        if run_id is None and not q.run_ids():
            raise NotFound(f"the store {q.store.uri!r} has no results yet")
        found = model_detail(q, model_id, run_id)
        if found is None:
            where = f"run {run_id}" if run_id else "any run"
            raise NotFound(f"no results for model {model_id!r} in {where}")
        return found

    def model_routes(prefix: str, handler: Callable[..., Any], **kw: Any) -> None:
        app.add_api_route(prefix + "/{org}/{name:path}", handler, methods=["GET"], **kw)
        app.add_api_route(prefix + "/{name}", handler, methods=["GET"], **kw)

    def api_model(name: str, org: str | None = None, run: str | None = None) -> Any:
        model_id = f"{org}/{name}" if org is not None else name
        return _json(detail_data(model_id, run))

    def model_page(
        request: Request, name: str, org: str | None = None, run: str | None = None
    ) -> Response:
        model_id = f"{org}/{name}" if org is not None else name
        return render_page(request, "model.html", m=detail_data(model_id, run))

    model_routes("/api/models", api_model)
    model_routes("/models", model_page, response_class=HTMLResponse)

    # ---- ops -----------------------------------------------------------------------------

    def ops_data(run: str | None, limit: int) -> dict[str, Any]:
        if not 1 <= limit <= 10_000:
            raise UsageError(f"limit must be between 1 and 10000, not {limit}")
        run_id = run_param(run)
        rows = ops_mod.missing_ops(q, run_id)
        op_run = op_sweep.op_run_for_model_run(q, run_id)
        return {
            "run_id": run_id,
            "total": len(rows),
            "ops": op_sweep.with_op_sweep(q, run_id, rows[:limit], op_run),
            "op_run_id": op_run,
            "denominators": run_report_denominators(q, run_id),
        }

    @app.get("/api/ops")
    def api_ops(run: str | None = None, limit: int = Query(200)) -> Any:
        return _json(ops_data(run, limit))

    @app.get("/ops", response_class=HTMLResponse)
    def ops_page(request: Request, run: str | None = None, limit: int = Query(200)) -> Response:
        return render_page(request, "ops.html", data=ops_data(run, limit))

    # ---- the op sweep and one op's page ---------------------------------------------------

    def op_run_param(op_run: str | None) -> str | None:
        if op_run is None:
            return None
        try:
            check_run_id(op_run)
        except StoreError as exc:
            raise UsageError(exc.message) from None
        found = op_sweep.op_query(q).resolve(op_run)
        if found is None:
            raise NotFound(f"no op-sweep run {op_run!r} in {q.store.uri!r}")
        return found

    def op_sweep_data(run: str | None) -> dict[str, Any]:
        op_run = op_run_param(run) or op_sweep.op_query(q).resolve()
        runs = op_sweep.op_query(q).runs()
        if op_run is None:
            return {"op_run_id": None, "runs": runs, "report": None, "ops": []}
        report = op_sweep.op_sweep_section_data(q, None, op_run_id=op_run)
        assert report is not None
        joined = report.get("joined") or {}
        return {
            "op_run_id": op_run,
            "model_run_id": joined.get("model_run_id"),
            "runs": runs,
            "report": report,
            "ops": op_sweep.op_table(q, op_run),
        }

    @app.get("/api/op-sweep")
    def api_op_sweep(run: str | None = None) -> Any:
        return _json(op_sweep_data(run))

    @app.get("/op-sweep", response_class=HTMLResponse)
    def op_sweep_page(request: Request, run: str | None = None) -> Response:
        from reports.render.op_sections import op_sweep_sections

        data = op_sweep_data(run)
        links = set(data["ops"] and [o["op"] for o in data["ops"]])
        return render_page(
            request,
            "op_sweep.html",
            data=data,
            sections=op_sweep_sections(data["report"]),
            op_link_or_none=lambda cell: (
                op_url(cell, None, data["op_run_id"]) if cell in links else None
            ),
        )

    def op_data(op: str, run: str | None, op_run: str | None) -> dict[str, Any]:
        if not op_sweep.valid_op_name(op):
            raise UsageError(
                "op must be an ATen op name (letters, digits, '_', ':' and '.'), "
                f"at most {op_sweep.OP_NAME_MAX} characters"
            )
        run_id = run_param(run) if (run is not None or q.run_ids()) else None
        page = op_sweep.op_page(q, op, model_run_id=run_id, op_run_id=op_run_param(op_run))
        if not page["found"]:
            raise NotFound(
                f"{page['op']} was dispatched by no OpInfo sample of op-sweep run "
                f"{page['op_run_id'] or '(none)'} and no model of run {run_id or '(none)'} "
                "fell back on it"
            )
        return page

    @app.get("/api/ops/{op:path}")
    def api_op(op: str, run: str | None = None, op_run: str | None = None) -> Any:
        return _json(op_data(op, run, op_run))

    @app.get("/ops/{op:path}", response_class=HTMLResponse)
    def op_page(
        request: Request, op: str, run: str | None = None, op_run: str | None = None
    ) -> Response:
        page = op_data(op, run, op_run)
        api = "/api/ops/" + quote(page["op"], safe="")
        params = {k: v for k, v in (("run", run), ("op_run", op_run)) if v}
        return render_page(
            request,
            "op.html",
            p=page,
            model_link=lambda mid: model_url(mid, page["model_run_id"]),
            api_url=api + (("?" + urlencode(params)) if params else ""),
        )

    # ---- runs and diff -------------------------------------------------------------------

    def runs_data(a: str | None, b: str | None, limit: int) -> dict[str, Any]:
        if not 0 <= limit <= 5000:
            raise UsageError(f"limit must be between 0 and 5000, not {limit}")
        from reports.coverage import coverage_over_runs

        ids = q.run_ids()
        trend = coverage_over_runs(q) if ids else []
        runs = [{**(q.run_info(r["run_id"]) or {}), **r} for r in reversed(trend)]
        if (a is None) != (b is None):
            raise UsageError("give both a and b to compare two runs")
        result = None
        if a is not None and b is not None:
            result = diff_mod.run_diff(q, run_param(a), run_param(b), limit=limit)
        elif len(ids) >= 2:
            result = diff_mod.run_diff(q, ids[1], ids[0], limit=limit)
        return {"runs": runs, "diff": result}

    @app.get("/api/runs")
    def api_runs(a: str | None = None, b: str | None = None, limit: int = Query(100)) -> Any:
        return _json(runs_data(a, b, limit))

    @app.get("/api/diff")
    def api_diff(a: str, b: str, limit: int = Query(100)) -> Any:
        return _json(runs_data(a, b, limit)["diff"])

    @app.get("/runs", response_class=HTMLResponse)
    def runs_page(
        request: Request, a: str | None = None, b: str | None = None, limit: int = Query(100)
    ) -> Response:
        data = runs_data(a, b, limit)
        return render_page(
            request,
            "runs.html",
            data=data,
            trend=data["runs"][::-1],
            chart=charts.trend_chart(data["runs"][::-1]) if data["runs"] else None,
        )

    # ---- assets --------------------------------------------------------------------------

    @app.get("/style.css")
    def style() -> FileResponse:
        return FileResponse(site_pages.STYLE, media_type="text/css")

    @app.get("/api")
    def api_index() -> Any:
        return {
            "endpoints": {
                "/api/overview?run=": "the run report (denominators, funnel, headline, ...)",
                "/api/models?run=&search=&outcome=&stage=&status=&library=&task=&model_type="
                "&sort=&order=&page=&per_page=": "one page of the models table",
                "/api/models/{org}/{name}?run=": "one model (ids without an org: /api/models/{name})",
                "/api/ops?run=&limit=": "missing ops ranked by the downloads they touch",
                "/api/ops/{op}?run=&op_run=": "one ATen op: its OpInfo samples and the models "
                "whose fallbacks include it",
                "/api/op-sweep?run=": "an op-sweep run: denominators, ops, join to the models",
                "/api/runs?a=&b=": "every run, with the diff of two (default: the last two)",
                "/api/diff?a=&b=": "the diff of two runs",
                "/api/health": "liveness and number of runs",
                "/api/openapi.json": "OpenAPI schema",
            }
        }

    @app.get("/api/health")
    def health() -> Any:
        return {"ok": True, "store": q.store.uri, "runs": len(q.run_ids()), "warming": q.warming}

    return app


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
        "sort": sort,
        "order": order,
        "page": page,
        "per_page": per_page,
    }


def run_report_denominators(q: StoreQuery, run_id: str) -> dict[str, Any]:
    from reports.coverage import denominators

    return denominators(q, run_id)


def _json(data: Any) -> JSONResponse:
    return JSONResponse(jsonable_encoder(data))


def _warm(q: StoreQuery) -> None:
    """Summarise every run and build the latest run's overview."""
    try:
        latest = q.latest_run_id()
        if latest:  # the newest run first: the overview is ready before the history is
            q.ensure_summaries([latest])
        q.warm()
        if latest:
            run_report(q, latest)
    except Exception:  # a broken store shows up on the first request, with its message
        pass
    finally:
        q.warming = False
