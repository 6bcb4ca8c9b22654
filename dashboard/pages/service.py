"""What is not a page: the style sheet (`/style.css`), the API index (`/api`, every family's
endpoints) and the health check (`/api/health`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import FileResponse

from dashboard.site import Dashboard, dashboard
from reports.render import site_pages

router = APIRouter()
API = {
    "/api/health": "liveness and number of runs",
    "/api/openapi.json": "OpenAPI schema",
}
NAV: list[tuple[str, str]] = []


@router.get("/style.css")
def style() -> FileResponse:
    return FileResponse(site_pages.STYLE, media_type="text/css")


@router.get("/api")
def api_index(dash: Dashboard = Depends(dashboard)) -> Any:
    return {"endpoints": dash.endpoints}


@router.get("/api/health")
def health(dash: Dashboard = Depends(dashboard)) -> Any:
    q = dash.q
    return {"ok": True, "store": q.store.uri, "runs": len(q.run_ids()), "warming": q.warming}
