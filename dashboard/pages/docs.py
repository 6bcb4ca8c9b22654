"""The documentation, offline (`/docs`): the glossary of the words the pages use (each word's
tooltip says the same) and the documentation pages of this checkout, each served read-only as
plain text (`/docs/NAME.md`).

Only the Markdown files directly in the checkout's `docs/` folder are served, by a name that
matches `[a-z0-9-]+.md` and is in the listing taken when asked: no path from the request
reaches the file system. An install without the `docs/` folder (a wheel) lists none and says
where they are."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from dashboard.site import Dashboard, NotFound, dashboard
from reports.render.glossary import GLOSSARY, anchor

router = APIRouter()
API: dict[str, str] = {}
NAV = [("/docs", "Docs")]

DOCS = Path(__file__).resolve().parents[2] / "docs"
_NAME = re.compile(r"[a-z0-9-]+\.md")
_TITLE = re.compile(r"^#\s+(.+)$", re.MULTILINE)


def doc_pages() -> dict[str, str]:
    """NAME.md -> its title, for the Markdown files directly in `docs/` ({}: none here)."""
    if not DOCS.is_dir():
        return {}
    pages = {}
    for path in sorted(DOCS.glob("*.md")):
        if _NAME.fullmatch(path.name):
            found = _TITLE.search(path.read_text(encoding="utf-8", errors="replace"))
            pages[path.name] = found[1].strip() if found else path.stem
    return pages


@router.get("/docs", response_class=HTMLResponse)
def docs_index(request: Request, dash: Dashboard = Depends(dashboard)) -> Response:
    glossary = [{"term": t, "anchor": anchor(t), "text": x} for t, x in GLOSSARY.items()]
    return dash.render(request, "docs.html", glossary=glossary, pages=doc_pages())


@router.get("/docs/{name}")
def doc_page(name: str) -> Any:
    pages = doc_pages()
    if name not in pages:
        raise NotFound(f"no documentation page {name!r}; /docs lists them")
    text = (DOCS / name).read_text(encoding="utf-8", errors="replace")
    return PlainTextResponse(
        text,
        media_type="text/plain; charset=utf-8",
        headers={"X-Content-Type-Options": "nosniff"},
    )
