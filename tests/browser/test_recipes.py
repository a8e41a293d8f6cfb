"""The recipes of Getting started for using chatmem from one's own page, as minimal pages
(tests/recipes/) served beside dist/ and loaded offline in Chromium: an existing
Pyodide with loadChatmem(), and PyScript with js_modules. Each must reach a
working `import chatmem` and a search over IndexedDB + DuckDB-Wasm."""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from doc_pages import blocks

RECIPES = ROOT / "tests" / "recipes"


@pytest.fixture(scope="module")
def recipe_site(dist: Path) -> Iterator[str]:
    """dist/ with the recipe pages at its root (where a user's page would sit)."""
    from tools import serving

    class Handler(serving.Handler):
        def translate_path(self, path: str) -> str:
            name = path.split("?", 1)[0].lstrip("/")
            if (RECIPES / name).is_file() and "/" not in name:
                return str(RECIPES / name)
            return super().translate_path(path)

    srv = serving.Server(("127.0.0.1", 0), functools.partial(Handler, directory=str(dist)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()


@pytest.mark.parametrize("recipe", ["own-pyodide.html", "pyscript.html"])
def test_recipe_page_loads_chatmem_and_searches_offline(browser: Any, recipe_site: str, recipe: str) -> None:
    ctx = browser.new_context()
    seen: list[str] = []
    ctx.on("request", lambda r: seen.append(r.url))
    errors: list[str] = []
    try:
        page = ctx.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.set_default_timeout(120_000)
        page.goto(recipe_site + recipe)
        page.wait_for_selector("body[data-result]", state="attached")
        found = json.loads(page.get_attribute("body", "data-result") or "null")
    finally:
        ctx.close()
    assert found == ["Lisbon is lovely in May."], errors
    assert not errors
    assert [u for u in seen if not u.startswith((recipe_site, "data:", "blob:"))] == []


def test_the_docs_show_the_recipes_as_tested() -> None:
    """Each recipe page is in the docs verbatim (what users copy is what runs here)."""
    shown = [b.code for b in blocks("html")]
    for f in sorted(RECIPES.glob("*.html")):
        assert f.read_text(encoding="utf-8") in shown, f"{f.name} is not shown in the docs"


def test_load_chatmem_refuses_a_wheel_whose_hash_differs(browser: Any, recipe_site: str) -> None:
    """A wheel whose SHA-256 is not the one build-info.json names is refused, and the error
    reaches the page: nothing is installed."""

    def tamper(route: Any) -> None:
        info = route.fetch().json()
        info["wheels"][0]["sha256"] = "0" * 64
        route.fulfill(json=info)

    ctx = browser.new_context()
    errors: list[str] = []
    ctx.route("**/build-info.json", tamper)
    try:
        page = ctx.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.set_default_timeout(120_000)
        page.goto(recipe_site + "own-pyodide.html")
        page.wait_for_event("pageerror")
        found = page.get_attribute("body", "data-result")
    finally:
        ctx.close()
    assert found is None
    assert any("SHA-256" in e and "expected " + "0" * 64 in e for e in errors), errors


def test_wheels_are_unzipped_in_a_worker_or_here_when_workers_are_refused(
    browser: Any, recipe_site: str
) -> None:
    """``loadChatmem`` fetches, checks and unzips the wheels in a worker of its own; a page
    whose CSP refuses workers gets them unzipped on its main thread instead."""
    page_text = (RECIPES / "own-pyodide.html").read_text(encoding="utf-8")
    no_workers = page_text.replace(
        '<meta charset="utf-8">',
        '<meta charset="utf-8">\n  <meta http-equiv="Content-Security-Policy" content="worker-src \'none\'">',
    )
    no_workers = re.sub(
        r"const found = await pyodide\.runPythonAsync\(`.*?`\);",
        lambda _: "const found = pyodide.runPython(`import chatmem\n[chatmem.__version__]`);",
        no_workers,
        flags=re.S,
    )
    assert "worker-src 'none'" in no_workers and "__version__" in no_workers
    results = {}
    for name, text in (("worker", page_text), ("here", no_workers)):
        found, seen = _own_page(browser, recipe_site, text)
        results[name] = (found, any(u.endswith("/js/wheels-worker.js") for u in seen))
    assert results["worker"] == (["Lisbon is lovely in May."], True)
    assert results["here"] == (["0.1.0"], False)  # refused before it was requested


def _own_page(browser: Any, recipe_site: str, text: str) -> tuple[Any, list[str]]:
    """The own-Pyodide recipe page served as ``text``: its ``data-result``, and every URL it asked for."""
    ctx = browser.new_context()
    seen: list[str] = []
    ctx.on("request", lambda r: seen.append(r.url))
    ctx.route("**/own-pyodide.html", lambda route: route.fulfill(body=text, content_type="text/html"))
    try:
        page = ctx.new_page()
        page.set_default_timeout(120_000)
        page.goto(recipe_site + "own-pyodide.html")
        page.wait_for_selector("body[data-result]", state="attached")
        return json.loads(page.get_attribute("body", "data-result") or "null"), seen
    finally:
        ctx.close()


def test_what_the_first_open_imports_is_frozen_out_of_the_collector(browser: Any, recipe_site: str) -> None:
    """``import chatmem`` reads its modules when first used; the page's first ``chatmem.open``
    freezes them (as ``loadChatmem`` does with the boot), so a full collection never scans them."""
    text = (
        (RECIPES / "own-pyodide.html")
        .read_text(encoding="utf-8")
        .replace(
            '[h.message.text for h in await mem.search("lisbon")]',
            "import gc, chatmem.memory, chatmem.sync.synchronizer\n"
            "tracked = {id(o) for o in gc.get_objects()}\n"
            "[id(chatmem.memory.Memory.__init__) in tracked, id(chatmem.sync.synchronizer.Synchronizer.__init__) in tracked,\n"
            " gc.get_freeze_count() > 0]",
        )
    )
    found, _ = _own_page(browser, recipe_site, text)
    assert found == [False, False, True]
