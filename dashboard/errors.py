"""One error answer for every page and API route: JSON (`{"error", "status", "hint"}`) under
`/api/`, the error page elsewhere; bad parameters are 400, what the store lacks 404."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from dashboard.site import Dashboard, NotFound
from ground.errors import StoreError, UsageError


def error(
    request: Request,
    status: int,
    message: str,
    hint: str | None = None,
    answer: dict[str, Any] | None = None,
) -> Response:
    """The error as JSON under `/api/` (with `answer`'s fields: a model's catalog entry, the
    command that checks it, the ids meant), the error page elsewhere."""
    if request.url.path.startswith("/api/"):
        body: dict[str, Any] = {"error": message, "status": status}
        if hint:
            body["hint"] = hint
        body.update({k: v for k, v in (answer or {}).items() if k not in ("message", "hint")})
        return JSONResponse(body, status_code=status)
    dash: Dashboard = request.app.state.dashboard
    return dash.render(
        request,
        "error.html",
        status_code=status,
        status=status,
        message=message,
        hint=hint,
        answer=answer or {},
    )


def add_error_handlers(app: FastAPI) -> None:
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
        return error(request, 404, str(exc), exc.hint, exc.answer)

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> Response:
        return error(request, 404, exc.message, exc.hint)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        message = "page not found" if exc.status_code == 404 else str(exc.detail)
        return error(request, exc.status_code, message)
