"""Words a newcomer cannot look up (issue 39, item 8): each glossary word is explained where it
appears (a `title`), the dashboard's `/docs` shows the glossary and serves this checkout's
docs read-only, and docs/glossary.md says what the tooltips say. The hand-built store, the
FastAPI test client: no server, no browser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape

from dashboard.app import create_app
from reports.render.glossary import GLOSSARY, doc_links, explain
from tests.report_store_builder import build_hand_store

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    root = tmp_path_factory.mktemp("glossary") / "store"
    build_hand_store(root)
    return TestClient(create_app(str(root), refresh_s=0, warm=False))


def test_docs_glossary_page_says_what_the_tooltips_say() -> None:
    text = (ROOT / "docs" / "glossary.md").read_text()
    headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert headings == list(GLOSSARY)
    for term, explanation in GLOSSARY.items():
        assert explanation in text, term


def test_docs_is_a_page_with_the_glossary_and_the_docs(client: TestClient) -> None:
    r = client.get("/docs")
    assert r.status_code == 200
    for term, explanation in GLOSSARY.items():
        assert str(escape(explanation)) in r.text, term
    assert '<a href="/docs/sizing.md">' in r.text and 'href="/docs"' in r.text  # and in the nav
    doc = client.get("/docs/sizing.md")
    assert doc.status_code == 200 and doc.headers["content-type"].startswith("text/plain")
    assert doc.headers["x-content-type-options"] == "nosniff"
    assert doc.text == (ROOT / "docs" / "sizing.md").read_text()
    for bad in ("/docs/..%2Fpyproject.toml", "/docs/results%2Findex.md", "/docs/nothing.md",
                "/docs/SIZING.md"):  # fmt: skip
        assert client.get(bad).status_code == 404, bad


def test_the_words_carry_their_explanation_where_they_appear(client: TestClient) -> None:
    ops = client.get("/ops?run=r2").text
    for term in ("only obstacle", "dl on device if lowered", "evidence of absence"):
        assert f'title="{str(escape(explain(term)))}"' in ops, term
    overview = client.get("/?run=r2").text
    assert f'title="{str(escape(explain("only obstacle")))}"' in overview
    models = client.get("/models?run=r2").text  # the outcome filter's on_device, partial, ...
    for term in ("on_device", "with_fallback", "partial"):
        assert f'title="{str(escape(explain(term)))}"' in models, term
    page = client.get("/models/org/b-pass-fallback?run=r2").text
    assert f'title="{str(escape(explain("h2d / d2h")))}"' in page


def test_doc_links_escape_the_text_around_them() -> None:
    out = str(doc_links("<b> see docs/sizing.md & docs/x_y.md", "/docs/"))
    assert (
        out
        == '&lt;b&gt; see <a class="doc" href="/docs/sizing.md">docs/sizing.md</a> &amp; docs/x_y.md'
    )
