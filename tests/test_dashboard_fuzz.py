"""Fuzz the dashboard's HTTP API with schemathesis, against its own OpenAPI schema
(`/api/openapi.json`), in process (ASGI), over the hand-built store.

Every generated request must get an answer below 500, and no string it sent may come back
unescaped in an HTML page (each request is sent again with markup before every string parameter,
so that property is tested for every parameter of every operation). The number of examples per operation is bounded (and derandomized)
so the test stays fast and repeatable in `.ci/run`.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings

from dashboard.app import create_app
from tests.report_store_builder import build_hand_store

MAX_EXAMPLES = 12


def _app() -> Any:
    # Built at import: schemathesis's lazy `from_fixture` loader does not run under pytest 9.
    root = Path(tempfile.mkdtemp(prefix="hfsweep-fuzz-")) / "store"
    atexit.register(shutil.rmtree, root.parent, ignore_errors=True)
    build_hand_store(root)
    return create_app(str(root), refresh_s=0, warm=False)


schema = schemathesis.openapi.from_asgi("/api/openapi.json", _app())


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


MARKUP = "<i data-fuzz='1'>\""


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_api_never_errors_and_never_echoes_markup(case: Any) -> None:
    """Each generated request, then the same one with markup before every string parameter."""
    _check(case, case.call())
    for where in (case.path_parameters, case.query):
        for key, value in list((where or {}).items()):
            if isinstance(value, str):
                where[key] = MARKUP + value
    _check(case, case.call(), markup=True)


def _check(case: Any, response: Any, *, markup: bool = False) -> None:
    where = (case.method, case.formatted_path, case.query)
    assert response.status_code < 500, where
    body = response.text
    assert "Traceback" not in body, where
    kind = response.headers.get("content-type") or ""
    kind = kind[0] if isinstance(kind, list) else kind
    if "text/html" not in kind:  # JSON is never rendered by a browser as a page
        assert kind.startswith(("application/json", "text/css")), (where, kind)
        return
    if markup:
        assert "<i data-fuzz" not in body, where
    for value in _strings(case.path_parameters) + _strings(case.query):
        if "<" in value and len(value) >= 4:  # a short one may occur in the page by chance
            assert value not in body, (where, value)  # only its escaped text may appear
