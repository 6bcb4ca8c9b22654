"""What every page family of the dashboard shares: the `Dashboard` (the store's query and the
templates), the parameters each family reads the same way (a run, an op-sweep run), the URL
builders the templates use, and the JSON answer.

A page family (`dashboard/pages/<family>.py`) reaches it through `Depends(dashboard)`: routes are
module-level functions, and `create_app` puts one `Dashboard` on `app.state`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import HTMLResponse, JSONResponse

from ground.errors import StoreError, UsageError
from reports import op_sweep
from reports.model_search import CatalogModel
from reports.query import StoreQuery
from reports.store import check_run_id


class NotFound(Exception):
    """A model or run the store does not have (HTTP 404). `hint`: what to do instead; `answer`:
    more for the JSON body and the page (a model's catalog entry, the command that checks it,
    the ids meant: `reports.models.not_found_answer`)."""

    def __init__(
        self, message: str, *, hint: str | None = None, answer: dict[str, Any] | None = None
    ):
        super().__init__(message)
        self.hint = hint
        self.answer = answer or {}


def op_url(op: str, run_id: str | None = None, op_run_id: str | None = None) -> str:
    """`/ops/aten%3A%3Aadd` (the op quoted whole), with the runs to show."""
    params = {k: v for k, v in (("run", run_id), ("op_run", op_run_id)) if v}
    return "/ops/" + quote(op, safe="") + (("?" + urlencode(params)) if params else "")


def model_url(model_id: str, run_id: str | None = None, dtype: str | None = None) -> str:
    """`/models/org/name` with each segment quoted (ids may hold anything)."""
    path = "/models/" + "/".join(quote(part, safe="") for part in model_id.split("/", 1))
    params = {k: v for k, v in (("run", run_id), ("dtype", dtype)) if v}
    return path + (("?" + urlencode(params)) if params else "")


@dataclass
class Dashboard:
    """One store's query, the templates, and the API index the families declare."""

    q: StoreQuery
    env: jinja2.Environment
    endpoints: dict[str, str] = field(default_factory=dict)
    # the catalog, for a model with no results: its rank and the ids meant (`hfsweep dashboard`
    # gives the bundled one or its --catalog)
    catalog: tuple[CatalogModel, ...] = ()

    def render(
        self, request: Request, template: str, status_code: int = 200, **ctx: Any
    ) -> HTMLResponse:
        html = self.env.get_template(template).render(request_path=request.url.path, **ctx)
        return HTMLResponse(html, status_code=status_code)

    def run_param(self, run: str | None) -> str:
        """The run a `run=` parameter names (the latest when absent): a bad id is a 400, a run
        the store does not have a 404."""
        if run is not None:
            try:
                check_run_id(run)
            except StoreError as exc:
                raise UsageError(exc.message) from None
        try:
            return self.q.resolve_run(run)
        except StoreError as exc:
            raise NotFound(exc.message + (f" ({exc.hint})" if exc.hint else "")) from None

    def op_run_param(self, op_run: str | None) -> str | None:
        """The op-sweep run an `op_run=` parameter names, None when absent."""
        if op_run is None:
            return None
        try:
            check_run_id(op_run)
        except StoreError as exc:
            raise UsageError(exc.message) from None
        found = op_sweep.op_query(self.q).resolve(op_run)
        if found is None:
            raise NotFound(f"no op-sweep run {op_run!r} in {self.q.store.uri!r}")
        return found

    def denominators(self, run_id: str, dtype: str | None = None) -> dict[str, Any]:
        from reports.coverage import denominators

        return denominators(self.q, run_id, dtype)


def dashboard(request: Request) -> Dashboard:
    """The app's Dashboard, for `Depends` (adds no parameter to the API)."""
    found: Dashboard = request.app.state.dashboard
    return found


def json_answer(data: Any) -> JSONResponse:
    return JSONResponse(jsonable_encoder(data))
