"""What a newcomer meets in the first screen of the dashboard at 1280 px, and what the pages say
of sizes and where they leave a placeholder (issue 39, items 1, 6 and 7).

Serves `hfsweep dashboard` over `--store` from the checkout `--code` (default this one: point it
at an older checkout to measure the pages before a change) and prints:

- element boxes in headless Chromium at 1280 x 800 (one laptop screen): whether the models
  table's "failing op / first error" column and `/runs`' git column are in view without
  scrolling, how many lines the models table's filters take, and on `--model`'s page (default
  openai/gpt-oss-20b) the bottom of the verdict, the blocking op, the next step and the repro
  against the screen's 800 px;
- placeholders: a lone "?" and the word STORE in the visible text of the overview, the models
  table and every failed or skipped model's page;
- sizes: what the report's "Cores needed, by downloads" counts as sized, the share of downloads
  that rests on the repo's own config, and the section's notes as printed.

    python bench/newcomer_pages.py --store hfsweep-store
    python bench/newcomer_pages.py --store hfsweep-store --code /tmp/old-checkout --json before.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.dashboard_screenshots import model_path, serve  # noqa: E402
from tests.browser_support import CHROMIUM  # noqa: E402

SCREEN = {"width": 1280, "height": 800}
PLACEHOLDER = re.compile(r"(?<![\w?/=&.])\?(?![\w=?])|\bSTORE\b")

# The right edge of a header cell against what is in view: the window, and its scroll box.
IN_VIEW_JS = r"""
(text) => {
  const th = [...document.querySelectorAll('th')].find(t => t.textContent.trim() === text);
  if (!th) return null;
  let box = th.closest('.table-scroll');
  const right = Math.min(window.innerWidth, box ? box.getBoundingClientRect().right : 1e9);
  const r = th.getBoundingClientRect();
  return {left: Math.round(r.left), right: Math.round(r.right), visible_right: Math.round(right),
          in_view: r.right <= right + 0.5,
          table_width: Math.round(th.closest('table').getBoundingClientRect().width)};
}
"""
FILTER_LINES_JS = r"""
() => {
  const labels = [...document.querySelectorAll('form.facets label')];
  // a line of the form: labels whose boxes overlap vertically (their heights differ)
  const boxes = labels.map(l => l.getBoundingClientRect()).sort((a, b) => a.top - b.top);
  let lines = 0, bottom = -1;
  for (const b of boxes) { if (b.top >= bottom) { lines += 1; bottom = b.bottom; } }
  const params = labels.find(l => l.textContent.trim().startsWith('parameters'));
  return {lines: lines, labels: labels.length,
          parameters_top: params ? Math.round(params.getBoundingClientRect().top) : null,
          first_top: labels.length ? Math.round(labels[0].getBoundingClientRect().top) : null};
}
"""
# The bottom of each thing a model view must show first (null: not on the page).
FIRST_SCREEN_JS = r"""
(op) => {
  const bottom = (el) => el ? Math.round(el.getBoundingClientRect().bottom + window.scrollY) : null;
  const byText = op ? [...document.querySelectorAll('main a, main span, main td')]
    .find(e => e.textContent.trim() === op) : null;
  return {
    verdict: bottom(document.querySelector('#verdict') || document.querySelector('#outcome')),
    blocking_op: bottom(byText),
    next_step: bottom(document.querySelector('#next-command') || document.querySelector('#next-step')),
    repro: bottom(document.querySelector('#reproduce')),
    screen: window.innerHeight,
  };
}
"""


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=120) as r:
        return json.loads(r.read())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", required=True)
    p.add_argument("--code", default=str(ROOT), help="the checkout whose dashboard to serve")
    p.add_argument("--model", default="openai/gpt-oss-20b")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    code = Path(args.code).resolve()
    proc, base = serve(args.store, code)
    out: dict[str, Any] = {"store": args.store, "code": str(code)}
    try:
        overview = get_json(base + "/api/overview")
        c = overview.get("cores_needed") or {}
        total = c.get("downloads") or 0
        own = c["sized"] - c.get("from_default", 0) if "from_default" in c else c.get("sized")
        out["sizes"] = {
            "models": c.get("models"),
            "counted_as_sized": c.get("sized"),
            "counted_as_sized_downloads_share": (c.get("sized_downloads") or 0) / total
            if total
            else None,
            "sized_from_own_config": own,
        }
        models = get_json(base + "/api/models?per_page=500")["rows"]
        out["sizes"]["table_rows_with_parameters"] = sum(
            1 for r in models if r.get("parameters") is not None
        )
        failing_op = next(
            (r.get("failing_op") for r in models if r["model_id"] == args.model), None
        )
        pages = ["/", "/models", "/models?outcome=failed", "/runs"] + [
            model_path(r["model_id"]) for r in models if r["outcome"] in ("failed", "skipped")
        ]
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport=SCREEN)
            page.goto(base + "/models?outcome=failed")
            out["models_error_column"] = page.evaluate(IN_VIEW_JS, "failing op / first error")
            out["models_filters"] = page.evaluate(FILTER_LINES_JS)
            page.goto(base + "/runs")
            out["runs_git_column"] = page.evaluate(IN_VIEW_JS, "git")
            page.goto(base + model_path(args.model))
            out["model_page"] = {"model": args.model, "failing_op": failing_op,
                                 **page.evaluate(FIRST_SCREEN_JS, failing_op)}  # fmt: skip
            found: dict[str, list[str]] = {}
            for path in pages:
                page.goto(base + path)
                hits = PLACEHOLDER.findall(page.inner_text("main"))
                if hits:
                    found[path] = hits
            out["placeholders"] = {"pages": len(pages), "hits": sum(map(len, found.values())),
                                   "where": found}  # fmt: skip
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    for key in ("sizes", "models_error_column", "models_filters", "runs_git_column", "model_page"):
        print(f"{key}: {json.dumps(out.get(key))}")
    ph = out["placeholders"]
    print(f"placeholders: {ph['hits']} over {ph['pages']} pages")
    for path, hits in ph["where"].items():
        print(f"  {path}: {', '.join(hits)}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
