"""No link leads nowhere: every internal link of the dashboard (served by a real uvicorn, fetched
over HTTP) and of the static site (on disk) is followed from the overview, on a store shaped like
the demo's (ops that only a compile with no evidence names, failures that name long ops, a model
only the older run has) and on a run of several dtypes; none answers 404, no file is missing,
no anchor is absent, and no page of the site is out of reach."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from reports.query import StoreQuery
from reports.render import html_site
from reports.render.op_site import op_file_name
from reports.summary import run_report
from tests.browser_support import served_dashboard
from tests.dtype_store_builder import build_dtype_store
from tests.link_check import crawl_dashboard, crawl_site
from tests.page_store_builder import NO_EVIDENCE_OPS, build_pages_store

STORES: dict[str, Callable[[Path], object]] = {
    "demo-like": build_pages_store,
    "dtypes": build_dtype_store,
}


@pytest.fixture(scope="module", params=list(STORES))
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp(f"links-{request.param}") / "store"
    STORES[request.param](root)
    return root


@pytest.fixture(scope="module")
def dashboard(store: Path) -> Iterator[str]:
    with served_dashboard(store) as base:
        yield base


def test_no_dashboard_link_answers_404(store: Path, dashboard: str) -> None:
    crawl = crawl_dashboard(dashboard)
    assert crawl.broken == []
    pages = {url.removeprefix(dashboard).split("?")[0] for url in crawl.visited}
    # it went everywhere: every page family, and the pages of models and ops
    assert {"/", "/models", "/ops", "/op-sweep", "/runs", "/api/overview"} <= pages
    assert sum(p.startswith("/models/") for p in pages) >= 5
    assert sum(p.startswith("/ops/") for p in pages) >= 3
    if store.parent.name.startswith("links-demo-like"):
        # the ops only a compile with no evidence names: linked from the ranking, and a page
        for op in NO_EVIDENCE_OPS:
            assert "/ops/" + quote(op, safe="") in pages
        assert "/models/org/old" in pages  # only the older run has it: linked from the diff


def test_no_static_site_link_is_missing(store: Path, tmp_path: Path) -> None:
    q = StoreQuery(store)
    site = tmp_path / "site"
    html_site.write_site(q, run_report(q), site)
    crawl = crawl_site(site)
    assert crawl.broken == []
    assert len([p for p in crawl.visited if p.endswith(".html")]) >= 10
    if store.parent.name.startswith("links-demo-like"):
        for op in NO_EVIDENCE_OPS:
            page = site / "ops" / op_file_name(op.split(".")[0])
            assert page.as_posix() in crawl.visited, page
