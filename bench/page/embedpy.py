"""W10, in the page's Pyodide (run.py drives it): the stored history embedded in the
background with the default model, as the app does after the first paint.

- ``fill``: a fresh store of ``n`` messages (bench_browser.py's 30-150-word texts,
  ``scalegen.Words``) and its keyword index up; no vectors yet.
- ``load_model``: the shipped model fetched and parsed, timed on its own (once the
  search's figures are read, as ``embed_in_background`` does).
- ``embed_all``: ``mem.embed_in_background()`` until every message has a vector;
  its time, the batches and the progress the app would show.
The host watches the main thread meanwhile (``longtask`` entries: tasks over 50 ms).
"""

from __future__ import annotations

from typing import Any

import js  # type: ignore[import-not-found]
from scalegen import Words

import chatmem
from chatmem.runtime import page as _browser

now = js.performance.now
_state: dict[str, Any] = {}


async def fill(db: str, n: int, per_session: int = 1000) -> dict[str, Any]:
    await _browser.drop_database(db)
    await _browser.opfs_remove(_browser.index_cache_path(db).removeprefix("opfs://"))
    mem = await chatmem.open(db)
    if not isinstance(mem.index.embedder, chatmem.LocalEmbedder):
        raise RuntimeError(
            f"the default embedder is {type(mem.index.embedder).__name__}, not the shipped model"
        )
    w, left, t0 = Words(), n, now()
    while left > 0:
        k = min(per_session, left)
        s = await mem.sessions.create(title="w10")
        await mem.messages.append_many(
            s.session_id, [{"role": ("user", "assistant")[i % 2], "content": w.text()} for i in range(k)]
        )
        left -= k
    await mem.search("warm", limit=1)  # the keyword index is up, as after the app's first paint
    _state.update(db=db, mem=mem)
    return {"fill_ms": now() - t0, "stored": n}


async def load_model() -> dict[str, Any]:
    mem = _state["mem"]
    await (await mem.index.ready()).figures_read()  # as embed_in_background does, first
    t0 = now()
    await mem.index.embedder.load()
    return {"load_ms": now() - t0}


async def embed_all() -> dict[str, Any]:
    mem = _state["mem"]
    t0 = now()
    count = await mem.embed_in_background()
    done, total = mem.index.embed_progress
    return {"embed_ms": now() - t0, "embedded": count, "done": done, "total": total}


async def close() -> None:
    mem, db = _state.pop("mem"), _state.pop("db")
    await mem.close()
    await _browser.drop_database(db)
    await _browser.opfs_remove(_browser.index_cache_path(db).removeprefix("opfs://"))
