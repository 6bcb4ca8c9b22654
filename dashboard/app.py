"""The dashboard: HTML pages and a JSON API over one store, both built from `reports/`.

Pages: `/` overview, `/models` table, `/models/{org}/{name}` one model, `/ops` missing ops,
`/ops/{op}` one ATen op (its OpInfo samples, the models that fall back on it), `/op-sweep` the
op sweep, `/runs` runs and the diff between two. Each has its JSON twin under `/api/`. Everything is
rendered by Jinja2 with autoescape on; charts are inline SVG; no asset comes from the internet.

Each page family is one `APIRouter` in `dashboard/pages/` (listed in `dashboard.pages.FAMILIES`);
`create_app` only assembles them over one store.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from dashboard.errors import add_error_handlers
from dashboard.pages import FAMILIES
from dashboard.site import Dashboard, NotFound, model_url, op_url
from reports.model_search import CatalogModel
from reports.query import STAGES, StoreQuery
from reports.render import site_pages
from reports.summary import run_report

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

__all__ = ["NotFound", "create_app", "model_url", "op_url"]


def create_app(
    store: str,
    *,
    refresh_s: float = 2.0,
    warm: bool = True,
    threads: int | None = None,
    catalog: Sequence[CatalogModel] = (),
) -> FastAPI:
    """The app over `store`. `warm` summarises every run in the background at start-up, so the
    first visitor does not pay for it. `catalog`: what a model page with no results searches
    (its rank, the ids meant)."""
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
        nav=[link for family in FAMILIES for link in family.NAV],
        docs_base="/docs/",
        glossary_url="/docs",
    )
    endpoints = {path: what for family in FAMILIES for path, what in family.API.items()}
    app.state.dashboard = Dashboard(q, env, endpoints, tuple(catalog))
    if STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC), name="static")
    add_error_handlers(app)
    for family in FAMILIES:
        app.include_router(family.router)
    return app


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
