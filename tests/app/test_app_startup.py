"""Start-up does only what the first paint needs: the interface is up before
DuckDB-Wasm or the embedding model is requested; the index and then the
embeddings follow in the background, their progress shown in the sidebar;
`ready` means the API answers (a search made at once waits for the index)."""

from __future__ import annotations

from typing import Any

from app.conftest import AppPage
from conftest import unique_name

#: logs every state the sidebar's status line takes, from before the app starts; keeps
#: every resource timing (the default buffer of 250 entries fills before DuckDB or the
#: model is fetched, and later entries are dropped)
WATCH_STATUS = """
performance.setResourceTimingBufferSize(100000);
window.__workStates = [];
new MutationObserver(() => {
  const el = document.getElementById('work-status');
  const s = el && el.dataset.state;
  if (s && window.__workStates[window.__workStates.length - 1] !== s) window.__workStates.push(s);
}).observe(document, {subtree: true, childList: true, attributes: true, attributeFilter: ['data-state']});
"""

N = 60


def _fill(a: AppPage) -> None:
    """Store N messages and save the index, then close the page: the page opened next
    owns the index (while this one lived, another page of it would be a guest that
    asks this one and loads neither DuckDB-Wasm nor the model)."""
    a.py(f"""
import chatmem_app
mem = chatmem_app.app.mem
s = await mem.sessions.create(title="Keys")
await mem.messages.append_many(s.session_id, [
    {{"role": "user" if i % 2 else "assistant",
      "content": f"note {{i}}: the spare key is under the blue flowerpot by door {{i}}"}} for i in range({N})])
await mem.index.save()
""")
    a.page.close()


def _started(context: Any, site: str, db: str) -> AppPage:
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.add_init_script(WATCH_STATUS)
    return AppPage(page, site, db)


def test_interface_first_then_index_then_embeddings_with_progress(
    app_factory: Any, context: Any, site: str
) -> None:
    db = unique_name("startup")
    _fill(app_factory(db=db))
    a = _started(context, site, db)
    try:
        p = a.page
        # the embeddings of every stored message, made in the background, then shown as ready
        p.wait_for_function(
            f"() => {{ const el = document.getElementById('work-status');"
            f" return el.dataset.state === 'ready' && el.dataset.total === '{N}'; }}"
        )
        status = p.locator("#work-status")
        assert status.get_attribute("data-done") == str(N)
        assert f"semantic search ready for {N} messages" in status.inner_text()
        # (the index's own "ready" gives way to "embedding" in the same task: not observed apart)
        assert p.evaluate("window.__workStates") == ["index", "embedding", "ready"]
        assert a.py("import chatmem_app\nlist(chatmem_app.app.mem.index.embed_progress)") == [N, N]
        # nothing of it before the interface was up: DuckDB-Wasm and the model come after
        t = p.evaluate("window.chatmem.timings")
        late = p.evaluate("""() => performance.getEntriesByType('resource')
            .filter(e => /duckdb|\\/models\\//.test(e.name)).map(e => [e.name, e.startTime])""")
        assert any("/models/" in u for u, _ in late) and any("duckdb" in u for u, _ in late), late
        early = [(u, s) for u, s in late if s < t["ui:done"]]
        assert not early, (early, t)
        assert t["wheels:done"] <= t["store:active"] < t["ui:done"] <= t["interactive"]
        assert a.page.get_attribute("#search-input", "placeholder") == "Search all conversations"
        assert not a.errors, a.errors
    finally:
        a.page.close()


def test_a_search_made_right_after_ready_waits_for_the_index(
    app_factory: Any, context: Any, site: str
) -> None:
    db = unique_name("startup-search")
    _fill(app_factory(db=db))
    page = context.new_page()
    page.set_default_timeout(120_000)
    try:
        page.goto(f"{site}?db={db}")
        hits = page.evaluate(
            """db => window.chatmem.ready.then(() => window.chatmem.runPython(`
import chatmem
mem = await chatmem.open("${db}")
hits = await mem.search("flowerpot door 7", limit=20)
await mem.close()
[h.message.content for h in hits]
`))""",
            db,
        )
        assert hits and hits[0] == "note 7: the spare key is under the blue flowerpot by door 7"
        assert len(hits) == 20  # every stored message holds "flowerpot": none was missed
        page.evaluate("window.chatmem.appReady")
    finally:
        page.close()


def test_the_page_starts_when_a_file_of_its_boot_failed_to_arrive_once(browser: Any, site: str) -> None:
    """A connection dropped while the page boots (Pyodide's runtime module, the bridge,
    the build's file list) costs a second fetch, not a broken page."""
    ctx = browser.new_context(service_workers="block")
    asked: dict[str, int] = {}

    def drop_first(route: Any) -> None:
        name = route.request.url.rsplit("/", 1)[1]
        asked[name] = asked.get(name, 0) + 1
        if asked[name] == 1:
            route.abort("connectionreset")
        else:
            route.continue_()

    for name in ("pyodide.asm.mjs", "load.js", "build-info.json"):
        ctx.route(f"**/{name}", drop_first)
    try:
        page = ctx.new_page()
        page.set_default_timeout(120_000)
        page.goto(f"{site}?db={unique_name('boot-retry')}")
        assert page.evaluate("window.chatmem.appReady") is True
        assert page.evaluate("window.chatmem.runPython('import chatmem\\nchatmem.__name__')") == "chatmem"
    finally:
        ctx.close()
    # each fetched again after its first was dropped (the file list is also read by the bridge)
    assert sorted(asked) == ["build-info.json", "load.js", "pyodide.asm.mjs"] and min(asked.values()) >= 2, (
        asked
    )
