"""What the browser tests share: headless Chromium (Debian's, driven by Playwright) and the
dashboard served by a real uvicorn on 127.0.0.1 for a store."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# What a table's cells measure in the page: the table's height, its tallest row, and the cells
# narrower than the longest word they hold (text broken inside a word to fit: what
# `overflow-wrap: anywhere` did). Each word is measured in its own element's font; a model id
# (`.id-seg` spans) may break after its "/" only, so each segment counts as one word.
TABLE_LAYOUT_JS = r"""
(selector) => {
  const table = document.querySelector(selector);
  if (!table) return null;
  const rows = [...table.querySelectorAll('tbody tr')];
  const probe = document.createElement('span');
  probe.style.cssText = 'position:absolute;visibility:hidden;white-space:nowrap;';
  document.body.appendChild(probe);
  let squeezed = 0, worst = null, broken_ids = 0;
  for (const td of table.querySelectorAll('tbody td')) {
    const style = getComputedStyle(td);
    const inner = td.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    let longest = 0, word_at = '';
    const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      probe.style.font = getComputedStyle(node.parentElement).font;
      for (const word of node.textContent.split(/\s+/)) {
        if (!word) continue;
        probe.textContent = word;
        const w = probe.getBoundingClientRect().width;
        if (w > longest) { longest = w; word_at = word; }
      }
    }
    for (const seg of td.querySelectorAll('.id-seg')) {
      probe.style.font = getComputedStyle(seg).font;
      probe.textContent = seg.textContent;
      const w = probe.getBoundingClientRect().width;
      if (w > longest) { longest = w; word_at = seg.textContent; }
      if (seg.getClientRects().length > 1) broken_ids += 1;
    }
    if (longest > inner + 1) {
      squeezed += 1;
      if (!worst || longest - inner > worst.short_by)
        worst = {word: word_at, width: inner, needs: longest, short_by: longest - inner};
    }
  }
  probe.remove();
  const heights = rows.map(r => r.getBoundingClientRect().height);
  return {
    height: table.getBoundingClientRect().height,
    width: table.getBoundingClientRect().width,
    rows: rows.length,
    tallest_row: Math.max(0, ...heights),
    squeezed_cells: squeezed,
    broken_ids: broken_ids,
    worst: worst,
  };
}
"""

# A browser test module's `pytestmark`. Its tests use the session's one Chromium (the `browser`
# fixture of tests/conftest.py) and, on several xdist workers, all run on the one that started it.
browser_marks = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
    pytest.mark.xdist_group("browser"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def served_dashboard(root: Path) -> Iterator[str]:
    """The dashboard over `root` on a free loopback port; yields its base URL once it answers."""
    import uvicorn

    from dashboard.app import create_app

    config = uvicorn.Config(
        create_app(str(root), refresh_s=0), host="127.0.0.1", port=free_port(), log_level="warning"
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{config.port}"
    deadline = time.monotonic() + 600  # a guard against a hang, not a speed
    while not srv.started:  # uvicorn's own flag: it listens
        assert thread.is_alive() and time.monotonic() < deadline, "the dashboard never started"
        time.sleep(0.05)
    try:
        yield base
    finally:
        srv.should_exit = True
        thread.join(timeout=10)


@contextlib.contextmanager
def chromium() -> Iterator[object]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
