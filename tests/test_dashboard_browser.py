"""The dashboard in real headless Chromium against a real uvicorn server on 127.0.0.1: open the
overview, search for a model, open its page and check what it shows; a hostile model id runs no
script."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import pytest

from tests.browser_support import browser_marks, served_dashboard
from tests.report_store_builder import EVIL_ID, build_hand_store

pytestmark = browser_marks


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("browser") / "store"
    build_hand_store(root)
    with served_dashboard(root) as base:
        yield base


def test_overview_search_model_page(server: str, browser) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(server + "/")
    assert page.locator("h1").inner_text() == "Coverage of run r2"
    assert page.locator(".emulated").is_visible()
    assert page.locator("svg.chart").count() == 5
    assert "73.6%" in page.locator(".cards").inner_text()
    page.fill("#search", "b-pass")
    page.click("text=Search")
    page.wait_for_url("**/models?**")
    assert page.locator("#match-count").inner_text().startswith("1 model matches")
    rows = page.locator("#models tbody tr")
    assert rows.count() == 1
    assert "emulated" not in rows.first.inner_text()  # the banner above says it, once
    page.click("#models tbody tr a")
    page.wait_for_url("**/models/org/b-pass-fallback**")
    assert page.locator("#model-id").inner_text() == "org/b-pass-fallback"
    assert page.locator("#outcome").inner_text() == "passed"
    assert page.locator("#device").inner_text() == "neuron (emulated)"
    assert page.locator("#stages tbody tr").count() == 5
    fallbacks = page.locator("#fallbacks").inner_text()
    assert "aten::histc" in fallbacks and "forward" in fallbacks and "backward" in fallbacks
    assert "4096" in page.locator("#shrink").inner_text()
    assert page.locator("#reproduce").inner_text() == (
        "hfsweep check org/b-pass-fallback --device neuron"
    )
    assert page.locator("#history tbody tr").count() == 2
    # every request stayed on this server: the page works offline
    assert requests and all(u.startswith(server) for u in requests)
    page.close()


def test_hostile_id_runs_no_script(server: str, browser) -> None:
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    org, name = EVIL_ID.split("/", 1)
    page.goto(f"{server}/models/{org}/{quote(name, safe='')}")
    assert page.locator("#model-id").inner_text() == EVIL_ID
    assert "<script>alert('pwned')</script>" in page.locator("#stages").inner_text()
    page.goto(server + "/models?search=" + quote("<script>"))
    assert EVIL_ID in page.locator("#models").inner_text()
    page.goto(server + "/models/" + quote("<img src=x onerror=alert(1)>", safe=""))
    assert "no results for model" in page.locator("#error-message").inner_text()
    assert dialogs == []
    page.close()
