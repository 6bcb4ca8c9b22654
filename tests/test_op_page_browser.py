"""The op pages in real headless Chromium against a real uvicorn server on 127.0.0.1: from the
missing-ops ranking to an op's page (its samples by dtype, the models that fall back on it and
their downloads), and the op sweep's own page; a hostile sample text runs no script."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser_support import browser_marks, served_dashboard
from tests.op_store_builder import EVIL_SAMPLE, build_op_run
from tests.report_store_builder import build_hand_store

pytestmark = browser_marks


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("op-browser") / "store"
    build_hand_store(root)
    build_op_run(root)
    with served_dashboard(root) as base:
        yield base


def test_missing_ops_to_op_page(server: str, browser) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(server + "/ops?run=r2")
    histc = page.locator("#ops tbody tr", has_text="aten::histc")
    assert histc.locator("td.op-sweep").inner_text().split("\n") == ["100.0%", "correct not native"]
    histc.locator("a", has_text="aten::histc").click()
    page.wait_for_url("**/ops/aten%3A%3Ahistc**")
    assert page.locator("#op-name").inner_text() == "aten::histc"
    assert page.locator(".emulated").is_visible()
    assert "correct not native" in page.locator("#verdict").inner_text()
    dtypes = page.locator("#op-dtypes tbody tr")
    assert dtypes.count() == 1 and dtypes.first.inner_text().split()[:3] == ["fp32", "2", "2"]
    assert page.locator("#op-samples tbody tr").count() == 2
    models = page.locator("#op-models tbody tr")
    assert models.count() == 2
    assert models.first.inner_text().startswith("org/b-pass-fallback")
    assert "800" in page.locator("#op-models-total").inner_text()
    models.first.locator("a").click()
    page.wait_for_url("**/models/org/b-pass-fallback**")
    assert page.locator("#model-id").inner_text() == "org/b-pass-fallback"
    assert requests and all(u.startswith(server) for u in requests)
    page.close()


def test_op_sweep_page_and_hostile_sample(server: str, browser) -> None:
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(server + "/op-sweep")
    assert "Op sweep, run o1" in page.locator("h1").inner_text()
    denominators = page.locator("table.section-op_denominators").inner_text()
    assert "skipped by PyTorch's applicability" in denominators
    assert "of which for ops with no native lowering" in denominators
    assert page.locator("#op-table tbody tr").count() == 5
    page.locator("#op-table a", has_text="aten::evil").click()
    page.wait_for_url("**/ops/aten%3A%3Aevil**")
    assert EVIL_SAMPLE in page.locator("#op-samples").inner_text()
    assert dialogs == []
    page.close()
