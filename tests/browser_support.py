"""What the browser tests share: headless Chromium (Debian's, driven by Playwright) and the
dashboard served by a real uvicorn on 127.0.0.1 for a store."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.request
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

browser_marks = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
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
    for _ in range(100):
        try:
            urllib.request.urlopen(base + "/api/health", timeout=2).read()
            break
        except OSError:
            time.sleep(0.1)
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
