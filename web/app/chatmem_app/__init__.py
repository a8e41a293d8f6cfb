"""chatmem's web app: the page's UI, written in Python over the chatmem API.

``await start(db_name)`` opens the IndexedDB database, renders the app and
wires its events; it reports the loading steps to the page's boot screen.
"""

from __future__ import annotations

from typing import Any

__all__ = ["app", "start"]

app: Any = None


async def start(db_name: str = "chatmem") -> Any:
    """Open the store, draw the interface, then build the search index in the background."""
    global app
    import js  # type: ignore[import-not-found]

    import chatmem

    from . import dom, settings
    from .app import App

    step = js.window.chatmem.step
    step("store", "active")
    mem = await chatmem.open(db_name)
    prefs = await settings.load(mem)
    step("store", "done")
    step("ui", "active")
    app = App(mem, prefs)
    app.bind()
    await app.refresh_sessions()
    # the conversation open last time (mem.sessions.active(), kept per profile), else the newest
    active = await mem.sessions.active()
    first = active or next((s.session_id for s in app.sessions if not s.archived), None)
    await app.open_session(first)
    await app.start_background()
    step("ui", "done")
    # the interface works without the index (it is derived, and queries wait for it):
    # DuckDB-Wasm, the index and then the embeddings start after the first paint
    step("index", "active")
    from . import background

    dom.spawn(background.run(app, step))
    return app
