"""chatmem's web app: the page's UI, written in Python over the chatmem API.

``await start(db_name)`` opens the IndexedDB database, renders the app and
wires its events; it reports the loading steps to the page's boot screen.
"""

from __future__ import annotations

from typing import Any

__all__ = ["start", "app"]

app: Any = None


async def start(db_name: str = "chatmem") -> Any:
    global app
    import js  # type: ignore[import-not-found]

    import chatmem

    from . import settings
    from .app import App
    from .sync_panel import start_background

    step = js.window.chatmem.step
    step("store", "active")
    mem = await chatmem.open(db_name)
    prefs = await settings.load(mem)
    step("store", "done")
    step("index", "active")
    await mem.index.ready()  # DuckDB-Wasm, then the index derived from the store
    step("index", "done")
    step("ui", "active")
    app = App(mem, prefs)
    app.bind()
    await app.refresh_sessions()
    first = next((s.session_id for s in app.sessions if not s.archived), None)
    await app.open_session(first)
    await start_background(app)
    step("ui", "done")
    return app
