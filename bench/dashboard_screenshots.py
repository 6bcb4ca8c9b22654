"""Screenshots of the dashboard over a store, and what its models table measures in a browser.

Serves `hfsweep dashboard` over `--store` (from the checkout `--code`, default this one: point it
at an older checkout to measure the pages before a change), opens the overview, the models
table, its failed view and one model's page in headless Chromium (Debian's, driven by
Playwright), prints the models table's height in pixels and what its cells measure, and, unless
`--measure-only`, writes the screenshots into `--out`:

    python bench/dashboard_screenshots.py --store hfsweep-store --out docs/
    python bench/dashboard_screenshots.py --store S --code /tmp/old-checkout --measure-only

Files: `dashboard.png` (the overview, first screen), `models-failed.png` (the failed view),
`model-page.png` (the most downloaded failed model's page unless `--model` names one).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser_support import CHROMIUM, TABLE_LAYOUT_JS  # noqa: E402  (what the tests measure)

VIEWPORT = {"width": 1280, "height": 1000}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(store: str, code: Path) -> tuple[subprocess.Popen[str], str]:
    """`hfsweep dashboard` over `store`, from the checkout `code`; returns it and its URL."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweep", "dashboard", "--store", store, "--port", str(port)],
        cwd=code,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(base + "/api/health", timeout=2).read()
            break
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the dashboard did not start: {proc.stderr.read()}") from None
            time.sleep(0.2)
    for _ in range(300):  # the background summary of every run, so figures are final
        with urllib.request.urlopen(base + "/api/health", timeout=5) as r:
            if not json.loads(r.read()).get("warming"):
                break
        time.sleep(0.2)
    return proc, base


def model_path(model_id: str) -> str:
    return "/models/" + "/".join(quote(p, safe="") for p in model_id.split("/", 1))


def first_failed(base: str) -> str | None:
    with urllib.request.urlopen(base + "/api/models?outcome=failed&per_page=1", timeout=30) as r:
        rows = json.loads(r.read())["rows"]
    return rows[0]["model_id"] if rows else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", required=True)
    p.add_argument("--out", default=str(ROOT / "docs"), help="folder for the PNGs (docs/)")
    p.add_argument("--code", default=str(ROOT), help="the checkout whose dashboard to serve")
    p.add_argument("--model", help="the model page to take (default: most downloaded failed)")
    p.add_argument("--measure-only", action="store_true", help="print figures, write no PNG")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    proc, base = serve(args.store, Path(args.code).resolve())
    figures: dict[str, Any] = {"store": args.store, "code": str(Path(args.code).resolve())}
    try:
        model = args.model or first_failed(base)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport=VIEWPORT)
            out = Path(args.out)
            views = {
                "models": "/models",
                "models_failed": "/models?outcome=failed",
            }
            for name, path in views.items():
                page.goto(base + path)
                figures[name] = page.evaluate(TABLE_LAYOUT_JS, "#models")
                if name == "models_failed" and not args.measure_only:
                    page.screenshot(path=str(out / "models-failed.png"), full_page=True)
            if not args.measure_only:
                out.mkdir(parents=True, exist_ok=True)
                page.goto(base + "/")
                page.screenshot(path=str(out / "dashboard.png"))
                if model:
                    page.goto(base + model_path(model))
                    page.screenshot(path=str(out / "model-page.png"), full_page=True)
                    figures["model_page"] = model
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    for name in ("models", "models_failed"):
        m = figures.get(name)
        if m:
            print(
                f"{name:<14} table {m['height']:>8.0f} px high, {m['width']:.0f} px wide, "
                f"{m['rows']} rows, tallest row {m['tallest_row']:.0f} px, "
                f"{m['squeezed_cells']} cells narrower than a word they hold"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
