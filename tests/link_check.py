"""Follow every internal link of the dashboard (over real HTTP) or of a static site (on disk) and
say which ones lead nowhere: a page that answers 404, a file that is not there, an anchor
(`#id`) the target page does not have.

A link is an `<a href>`, `<link href>`, `<img src>`, `<script src>` or a GET `<form action>`;
links off the site (the Hub) are not followed."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urldefrag, urljoin, urlsplit

LINK_ATTRS = {"a": "href", "link": "href", "img": "src", "script": "src", "form": "action"}


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(str(values["id"]))
        attr = LINK_ATTRS.get(tag)
        if attr is None or not values.get(attr):
            return
        if tag == "form" and (values.get("method") or "get").lower() != "get":
            return
        self.links.append(str(values[attr]))


def parse(html: str) -> _Links:
    found = _Links()
    found.feed(html)
    return found


@dataclass
class Crawl:
    """What a crawl saw: every page or file it reached (with its status) and each broken link
    (`(page it is on, link, why)`)."""

    visited: dict[str, int] = field(default_factory=dict)
    broken: list[tuple[str, str, str]] = field(default_factory=list)


def crawl_dashboard(base: str, *, start: str = "/", limit: int = 5000) -> Crawl:
    """Every page of the dashboard at `base` reachable from `start` by its links, each fetched
    once: a 404 (or any 5xx) is broken; JSON and the style sheet are fetched, not parsed.

    Every link found is fetched; a page's own links are read from the first page of each shape
    (its path and the names of its query parameters): `/models?run=r2&sort=downloads&order=asc`
    links to what `/models?run=r2&sort=wall_s&order=desc` links to, in another order, and
    following both would fetch every sort of every filter of the models table."""
    crawl = Crawl()
    read_shapes: set[tuple[str, frozenset[str]]] = set()
    queue: deque[tuple[str, str]] = deque([("(start)", urljoin(base, start))])
    host = urlsplit(base).netloc
    ids: dict[str, set[str]] = {}
    anchors: list[tuple[str, str, str]] = []
    while queue:
        source, url = queue.popleft()
        url, fragment = urldefrag(url)
        if fragment:
            anchors.append((source, url, fragment))
        if url in crawl.visited:
            continue
        if len(crawl.visited) >= limit:
            raise AssertionError(f"more than {limit} pages reachable from {start}")
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                status, kind = resp.status, resp.headers.get("content-type", "")
                body = resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            status, kind, body = exc.code, "", ""
        crawl.visited[url] = status
        if status == 404 or status >= 500:
            crawl.broken.append((source, url, f"answers {status}"))
            continue
        parts = urlsplit(url)
        shape = (parts.path, frozenset(k for k, _ in parse_qsl(parts.query)))
        if not kind.startswith("text/html") or shape in read_shapes:
            continue
        read_shapes.add(shape)
        page = parse(body)
        ids[url] = page.ids
        for link in page.links:
            target = urljoin(url, link)
            to = urlsplit(target)
            if to.scheme in ("http", "https") and to.netloc == host:
                queue.append((url, target))
    for source, url, fragment in anchors:
        if url in ids and fragment not in ids[url]:
            crawl.broken.append((source, f"{url}#{fragment}", "has no such anchor"))
    return crawl


def crawl_site(folder: Path, *, start: str = "index.html") -> Crawl:
    """Every file of a static site reachable from `start` by its relative links: a link to a
    file that is not there, or that leaves the folder, is broken; every page of the folder must
    be reachable (an orphan page is reported too)."""
    crawl = Crawl()
    root = folder.resolve()
    queue: deque[tuple[str, Path, str]] = deque([("(start)", root / start, "")])
    ids: dict[Path, set[str]] = {}
    anchors: list[tuple[str, Path, str]] = []
    while queue:
        source, path, fragment = queue.popleft()
        if fragment:
            anchors.append((source, path, fragment))
        key = path.as_posix()
        if key in crawl.visited:
            continue
        if not path.is_relative_to(root):
            crawl.broken.append((source, key, "leaves the site's folder"))
            continue
        if not path.is_file():
            crawl.visited[key] = 404
            crawl.broken.append((source, key, "is not there"))
            continue
        crawl.visited[key] = 200
        if path.suffix != ".html":
            continue
        page = parse(path.read_text(encoding="utf-8"))
        ids[path] = page.ids
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                continue  # off the site (the Hub)
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            queue.append((path.relative_to(root).as_posix(), target, parts.fragment))
    for source, path, fragment in anchors:
        if path in ids and fragment not in ids[path]:
            crawl.broken.append((source, f"{path}#{fragment}", "has no such anchor"))
    for page in sorted(root.rglob("*.html")):
        if page.as_posix() not in crawl.visited:
            crawl.broken.append(("(no page)", page.relative_to(root).as_posix(), "links to it"))
    return crawl
