"""What a person meets reading a store: the text report's widest lines, the dashboard's and the
static site's links that lead nowhere, and the pages wider than a 1280 px window.

Prints, for the newest run of `--store`, rendered by the checkout `--code` (default this one:
point it at an older checkout to measure the pages before a change):

- the text report's lines, how many are over 120 characters, and the widest;
- the static site: the files its links reach, the links to a file that is not there, the pages
  no link reaches;
- the dashboard (a real uvicorn): the URLs its links lead to, fetched over HTTP, and those that
  answer 404 or 5xx, with the page that links to each;
- unless `--no-browser`: in headless Chromium at 1280 px, the pages of each that scroll
  sideways or hold a table wider than the window with no scroll box of its own.

    python bench/page_check.py --store hfsweep-store
    python bench/page_check.py --store hfsweep-store --code /tmp/old-checkout

The link crawler and the width check are the tests' own (`tests/link_check.py`,
`tests/test_page_widths_browser.py`), loaded from this checkout whatever `--code` is.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 1280


def load(name: str, path: Path) -> ModuleType:
    """A module of this checkout by its file, whatever `sys.path` finds first."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--code", default=str(ROOT), help="the checkout whose pages are measured")
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.code).resolve()))
    links = load("page_check_links", ROOT / "tests" / "link_check.py")
    support = load("page_check_browser", ROOT / "tests" / "browser_support.py")
    overflow_js = _overflow_js()

    from reports.query import StoreQuery
    from reports.render import html_site, text
    from reports.summary import run_report

    store = Path(args.store)
    q = StoreQuery(store)
    report = run_report(q)
    print(f"code {args.code}, store {store}, run {report['run_id']}")
    lines = text.render(report).splitlines()
    over = sum(len(line) > 120 for line in lines)
    print(
        f"text report: {len(lines)} lines, {over} over 120 characters, widest {max(map(len, lines))}"
    )
    site = Path(tempfile.mkdtemp(prefix="page-check-site-"))
    html_site.write_site(q, report, site)
    crawl = links.crawl_site(site)
    missing = [b for b in crawl.broken if b[0] != "(no page)"]
    orphans = [b for b in crawl.broken if b[0] == "(no page)"]
    print(
        f"static site: {len(crawl.visited)} files reached, {len(missing)} links to nothing, "
        f"{len(orphans)} pages no link reaches"
    )
    for source, target, why in crawl.broken[:10]:
        print(f"    {target} {why} ({source})")
    with support.served_dashboard(store) as base:
        started = time.monotonic()
        dash = links.crawl_dashboard(base)
        print(
            f"dashboard: {len(dash.visited)} URLs fetched, {len(dash.broken)} answer 404 or 5xx "
            f"({time.monotonic() - started:.0f} s)"
        )
        for source, target, why in dash.broken[:10]:
            print(f"    {target.replace(base, '')} {why} (linked from {source.replace(base, '')})")
        if args.no_browser:
            return
        pages = [
            url
            for url, status in dash.visited.items()
            if status == 200 and "/api/" not in url and not url.endswith(".css")
        ]
        with support.chromium() as browser:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})
            for what, urls in (
                ("static site", [p.as_uri() for p in sorted(site.rglob("*.html"))]),
                ("dashboard", pages),
            ):
                wide = []
                for url in urls:
                    page.goto(url)
                    m = page.evaluate(overflow_js)
                    if m["doc"] > WIDTH or m["loose"]:
                        wide.append((url.replace(base, ""), m))
                print(
                    f"{what}: {len(urls)} pages at {WIDTH} px, {len(wide)} scroll sideways or "
                    "hold a wide table with no scroll box"
                )
                for url, m in wide[:10]:
                    print(f"    {url}: {m['doc']} px wide, tables {m['loose']}")


def _overflow_js() -> str:
    """The width check of the browser test, read from its source (the test module imports
    pytest fixtures this script does not need)."""
    source = (ROOT / "tests" / "test_page_widths_browser.py").read_text(encoding="utf-8")
    return source.split('OVERFLOW_JS = r"""', 1)[1].split('"""', 1)[0]


if __name__ == "__main__":
    main()
