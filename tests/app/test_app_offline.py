"""Offline after one visit (service worker precache), the installable
manifest, and time to interactive."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from app.conftest import AppPage
from conftest import CHROMIUM_ARGS, unique_name


def wait_precached(page: Any) -> dict[str, Any]:
    """Wait until the service worker is active and its cache holds every file of the build."""
    return page.evaluate("""async () => {
        const reg = await navigator.serviceWorker.ready;
        const files = (await (await fetch('./build-info.json')).json()).files;
        for (let i = 0; i < 600; i++) {
            const keys = await caches.keys();
            const mine = keys.filter(k => k.startsWith('chatmem-'));
            if (mine.length === 1) {
                const cached = (await (await caches.open(mine[0])).keys()).length;
                if (cached >= files.length + 1 && navigator.serviceWorker.controller)
                    return {cache: mine[0], cached, files: files.length, state: reg.active.state};
            }
            await new Promise(r => setTimeout(r, 100));
        }
        throw new Error('precache did not complete');
    }""")


def test_starts_and_works_offline_after_one_visit(browser: Any, site: str, dist: Any) -> None:
    ctx = browser.new_context()  # a first visit: no service worker yet
    try:
        page = ctx.new_page()
        page.set_default_timeout(90_000)
        db = unique_name("offline")
        app = AppPage(page, site, db)
        app.new_session()
        app.send("The spare key is under the blue flowerpot")
        info = wait_precached(page)
        version = json.loads((dist / "build-info.json").read_text())["version"]
        assert info["cache"] == f"chatmem-{version}" and info["state"] == "activated"

        # cut the network: offline emulation, and (browser-wide) no host resolves but loopback
        assert any(a.startswith("--host-resolver-rules=MAP * ~NOTFOUND") for a in CHROMIUM_ARGS)
        ctx.set_offline(True)
        assert (
            page.evaluate(
                "() => fetch('/build-info.json?bypass=' + Math.random(), {cache: 'no-store'})"
                ".then(() => 'online', () => 'offline')"
            )
            == "offline"
        )
        page.reload()
        app.ready()
        assert not page.locator("#boot").is_visible()
        app.expect_titles(["The spare key is under the blue flowerpot"])
        # it works: a new conversation, a message, an answer from memory
        app.new_session()
        app.send("Where is the spare key?")
        reply = page.locator("#messages .msg.assistant").last.inner_text()
        assert "Offline — answering from memory" in reply and "blue flowerpot" in reply
        assert page.evaluate("navigator.onLine") is False
        assert not app.errors, app.errors

        # the documentation site came with the build: it reads offline too
        assert page.get_attribute("#docs-link", "href") == "docs/index.html"
        docs = ctx.new_page()
        docs.goto(site + "docs/index.html")
        assert "conversation memory for AI chat apps" in docs.locator("article").inner_text()
        docs.goto(site + "docs/reference/api.html")
        assert "build_window" in docs.locator("article").inner_text()
        assert docs.evaluate("navigator.onLine") is False
    finally:
        ctx.close()


def test_manifest_and_service_worker_are_served(app: AppPage, site: str, dist: Any) -> None:
    p = app.page
    manifest = p.evaluate(
        "() => fetch(document.querySelector('link[rel=manifest]').href).then(r => r.json())"
    )
    assert manifest["display"] == "standalone" and manifest["start_url"] == "./"
    assert any(i["src"] == "icons/icon.svg" for i in manifest["icons"])
    sw = (dist / "sw.js").read_text()
    version = json.loads((dist / "build-info.json").read_text())["version"]
    assert f'const VERSION = "{version}"' in sw
    files = json.loads((dist / "build-info.json").read_text())["files"]
    for f in files:
        assert json.dumps(f) in sw, f


def test_time_to_interactive(app_factory: Callable[..., AppPage]) -> None:
    """Navigation to a usable interface (warm cache, shared browser). Printed for the docs."""
    a = app_factory()
    t = a.page.evaluate("window.chatmem.timings")
    assert t["interactive"] >= t["ui:done"] >= t["store:done"] >= t["wheels:done"] >= t["pyodide:done"] > 0
    # the loading screen showed each step, then gave way to the app; the search
    # index (DuckDB-Wasm) is built after the interface is up
    steps = a.page.evaluate("[...document.querySelectorAll('#boot-steps li')].map(li => li.dataset.state)")
    assert steps[:4] == ["done"] * 4 and steps[4] in ("active", "done")
    assert a.page.locator("#app").is_visible() and not a.page.locator("#boot").is_visible()
    a.page.wait_for_function("() => window.chatmem.timings['index:done']")
    t = a.page.evaluate("window.chatmem.timings")
    print(
        f"\ntime to interactive: {t['interactive']} ms "
        f"(Pyodide {t['pyodide:done']} ms, wheels {t['wheels:done'] - t['pyodide:done']} ms, "
        f"store {t['store:done'] - t['store:active']} ms, UI {t['ui:done'] - t['ui:active']} ms); "
        f"search index ready at {t['index:done']} ms"
    )
    assert t["interactive"] < 30_000 and t["index:done"] >= t["ui:done"]
    assert a.page.get_attribute("#search-input", "placeholder") == "Search all conversations"
