"""The dashboard in real headless Chromium against a real uvicorn server on 127.0.0.1: open the
overview, search for a model, open its page and check what it shows; a hostile model id runs no
script."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.report_store_builder import EVIL_ID, build_hand_store

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import uvicorn

    from dashboard.app import create_app

    root = tmp_path_factory.mktemp("browser") / "store"
    build_hand_store(root)
    port = _free_port()
    config = uvicorn.Config(
        create_app(str(root), refresh_s=0), host="127.0.0.1", port=port, log_level="warning"
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(base + "/api/health", timeout=2).read()
            break
        except OSError:
            time.sleep(0.1)
    yield base
    srv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


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
    assert page.locator("#match-count").inner_text().startswith("1 models match")
    rows = page.locator("#models tbody tr")
    assert rows.count() == 1
    assert "emulated" in rows.first.inner_text()
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
