"""Run Python code once in the built app's page (Pyodide in Chromium) and return its answer:
the bench scripts that time one step in both runtimes (derive_speed, tokenize_speed) share it."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["run_in_page"]

ROOT = Path(__file__).resolve().parent.parent


def run_in_page(code: str, setup_js: str | None = None) -> Any:
    """Build ``dist/`` if needed, serve it on a free port, boot one page and answer ``code``
    (run by ``window.chatmem.runPython``; its last expression is the answer). ``setup_js``
    runs in the page first (e.g. to observe long tasks)."""
    sys.path.insert(0, str(ROOT))
    from playwright.sync_api import sync_playwright
    from tools.base import CHROMIUM, CHROMIUM_ARGS, DIST
    from tools.serving import make_server
    from tools.static_site import build_if_needed

    build_if_needed()
    srv = make_server(DIST, 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.set_default_timeout(3_600_000)
            page.goto(f"http://127.0.0.1:{srv.server_address[1]}/")
            page.evaluate("window.chatmem.ready")
            if setup_js:
                page.evaluate(setup_js)
            out = page.evaluate("c => window.chatmem.runPython(c)", code)
            browser.close()
            return out
    finally:
        srv.shutdown()
