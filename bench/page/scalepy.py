"""The large-history cases of the bench, in the page's Pyodide (run.py drives them).

- ``chatgpt_import``: a ChatGPT ``conversations.json`` made in the page
  (``scalegen.chatgpt_export``), imported
  through ``mem.import_sessions`` and timed until a keyword search finds it.
- ``huge_*``: the 1,000,000-message run, one phase per call (fill in chunks,
  window, export, first search, search p50), each returning its time and the
  heaps measurable from the page at its end (``heap``). Every phase runs under a
  watchdog, so a dead engine worker is reported as a timeout, never a hang.
"""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

import js  # type: ignore[import-not-found]
from scalegen import MARKER, Words, chatgpt_export

import chatmem
from chatmem.runtime import page as _browser

now = js.performance.now


# ---------------------------------------------------------------- heaps


def _wasm_bytes() -> int:
    return int(js.window.chatmem.pyodide._module.HEAP8.length)


async def heap(mem: Any = None) -> dict[str, Any]:
    """What the page can measure of its own memory: Pyodide's Wasm memory (it never
    shrinks, so it is also the peak), the main thread's JS heap (``performance.memory``,
    Chromium only) and DuckDB's buffer manager in its worker (``duckdb_memory()``) when
    the index is open. The engine worker's own Wasm memory is not reachable from here."""
    out: dict[str, Any] = {"pyodide_wasm": _wasm_bytes()}
    pm = getattr(js.performance, "memory", None)
    if pm is not None:
        out["js_heap_used"] = int(pm.usedJSHeapSize)
        out["js_heap_total"] = int(pm.totalJSHeapSize)
    idx = mem.index.query_index if mem is not None else None
    if idx is not None:
        try:
            # bounded: after a failed phase the worker may still be busy (or gone)
            rows = await asyncio.wait_for(
                idx.execute("SELECT sum(memory_usage_bytes)::BIGINT AS b FROM duckdb_memory()"), 10
            )
            out["duckdb_buffer"] = int(rows[0]["b"] or 0)
        except Exception as e:  # noqa: BLE001  (a busy or dead worker, a timeout: say so)
            out["duckdb_buffer_error"] = f"{type(e).__name__}: {e}"
    return out


def _log(msg: str) -> None:
    js.console.log(f"[bench page] {msg}")


async def _watch(coro: Any, seconds: float) -> Any:
    return await asyncio.wait_for(coro, seconds)


# ---------------------------------------------------------------- ChatGPT export -> searchable


async def chatgpt_import(db: str, n: int, timeout_s: float = 600) -> dict[str, Any]:
    """Import an ``n``-message ChatGPT export into an empty store whose index is up,
    then search for the marker until a hit from the import comes back."""
    await _browser.drop_database(db)
    await _browser.opfs_remove(_browser.index_cache_path(db).removeprefix("opfs://"))
    text = chatgpt_export(n)
    mem = await chatmem.open(db)
    await mem.search("warm", limit=1)  # the app is up: the (empty) index is open
    t0 = now()
    report = await mem.import_sessions(text)
    t1 = now()
    hits: list[Any] = []
    tries = 0
    while not hits and now() - t0 < timeout_s * 1000:
        tries += 1
        hits = [h for h in await mem.search(MARKER, limit=5) if MARKER in (h.message.text or "")]
        if not hits:
            await asyncio.sleep(0.05)
    t2 = now()
    imported = report.messages_imported
    phases = dict(getattr(mem.index, "open_ms", {}))  # where the first search's time went
    await mem.close()
    await _browser.drop_database(db)
    await _browser.opfs_remove(_browser.index_cache_path(db).removeprefix("opfs://"))
    return {
        "import_ms": t1 - t0,
        "search_ms": t2 - t1,
        "total_ms": t2 - t0,
        "found": bool(hits),
        "tries": tries,
        "messages": imported,
        "bytes": len(text.encode()),
        "phases_ms": phases,
    }


# ---------------------------------------------------------------- the 1,000,000-message run

_huge: dict[str, Any] = {}


async def huge_open(db: str, per_session: int) -> dict[str, Any]:
    """A fresh store (and no cached index) for the run."""
    await _browser.drop_database(db)
    await _browser.opfs_remove(_browser.index_cache_path(db).removeprefix("opfs://"))
    _huge.clear()
    _huge.update(
        db=db, words=Words(), per=per_session, mem=await chatmem.open(db), done=0, text_bytes=0, sessions=[]
    )
    return {"heap": await heap(_huge["mem"])}


async def huge_fill(count: int, timeout_s: float) -> dict[str, Any]:
    """Store ``count`` more messages through ``append_many``, a session of ``per`` at a time."""

    async def fill() -> None:
        mem, w, per = _huge["mem"], _huge["words"], _huge["per"]
        left = count
        while left > 0:
            k = min(per, left)
            s = await mem.sessions.create(title=f"session {len(_huge['sessions'])}")
            texts = [w.text() for _ in range(k)]
            _huge["text_bytes"] += sum(len(t.encode()) for t in texts)
            await mem.messages.append_many(
                s.session_id,
                [{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(texts)],
            )
            _huge["sessions"].append(s.session_id)
            _huge["done"] += k
            left -= k

    t0 = now()
    await _watch(fill(), timeout_s)
    return {
        "ms": now() - t0,
        "stored": _huge["done"],
        "text_bytes": _huge["text_bytes"],
        "heap": await heap(_huge["mem"]),
    }


async def huge_window(budget: int, timeout_s: float) -> dict[str, Any]:
    """The context window (``build_window``) of the newest session, under ``budget`` tokens."""
    mem = _huge["mem"]
    t0 = now()
    res = await _watch(mem.build_window(_huge["sessions"][-1], max_tokens=budget), timeout_s)
    return {"ms": now() - t0, "kept": len(res.kept_ids), "heap": await heap(mem)}


async def huge_export(timeout_s: float) -> dict[str, Any]:
    """Everything through ``export_iter`` (streamed; only its size is kept)."""
    mem = _huge["mem"]

    async def run() -> int:
        size = 0
        async for chunk in mem.export_iter(batch_size=2000):
            size += len(chunk)
        return size

    t0 = now()
    size = await _watch(run(), timeout_s)
    return {"ms": now() - t0, "chars": size, "heap": await heap(mem)}


async def huge_first_search(timeout_s: float) -> dict[str, Any]:
    """The first keyword search: the index is derived from the store (none is cached)."""
    mem = _huge["mem"]
    q = _huge["words"].queries(1)[0]
    t0 = now()
    hits = await _watch(mem.search(q, limit=10), timeout_s)
    return {
        "ms": now() - t0,
        "hits": len(hits),
        "phases_ms": dict(mem.index.open_ms),
        "heap": await heap(mem),
    }


async def huge_search(queries: int, timeout_s: float) -> dict[str, Any]:
    """Keyword top-10 over ``queries`` queries (after 5 warm-up ones), timed once the
    figures a search keeps in Python are read (``figures_wait_ms``): the samples."""
    mem = _huge["mem"]
    qs = _huge["words"].queries(queries + 5, seed=13)
    waited = 0.0

    async def run() -> list[float]:
        nonlocal waited
        for q in qs[:5]:
            await mem.search(q, limit=10)
        idx = await mem.index.ready()
        t = now()
        if hasattr(idx, "figures_read"):
            await idx.figures_read()
        waited = now() - t
        out = []
        for q in qs[5:]:
            t = now()
            await mem.search(q, limit=10)
            out.append(now() - t)
        return out

    times = await _watch(run(), timeout_s)
    return {
        "times": times,
        "p50": statistics.median(times),
        "figures_wait_ms": waited,
        "heap": await heap(mem),
    }


async def huge_filled(timeout_s: float) -> dict[str, Any]:
    """Wait until ``messages`` is filled after a derivation that left the texts out (what
    ``mem.sql`` on it, substring search and retrieval wait for): ``ms`` waited here, and the
    fill's own milliseconds from its start (``fill_ms``; 0 when there was none)."""
    mem = _huge["mem"]
    t0 = now()
    idx = await mem.index.ready()
    await _watch(idx.messages_filled(), timeout_s)
    fill = getattr(idx, "fill", None)
    return {
        "ms": now() - t0,
        "fill_ms": fill.ms if fill is not None else 0.0,
        "filled": fill.filled if fill is not None else 0,
        "heap": await heap(mem),
    }


_vocabulary: list[Words] = []


def vocabulary() -> Words:
    """The seeded vocabulary of the run, made once a page (``Browser.reload`` makes it before
    a restart's phase: it is the harness's work, not chatmem's)."""
    if not _vocabulary:
        _vocabulary.append(Words())
    return _vocabulary[0]


async def huge_shut(timeout_s: float) -> dict[str, Any]:
    """Close the store as a user's tab closes (its index file saved), keeping both for a restart."""
    mem = _huge.pop("mem")
    t0 = now()
    await _watch(mem.close(), timeout_s)
    return {"ms": now() - t0, "heap": await heap()}


async def huge_restart(db: str, cached: bool, timeout_s: float) -> dict[str, Any]:
    """In a freshly loaded page: open the store again and time the first search, with the
    index file the last close saved (``cached``) or without it (removed first, so the index
    is derived from the store again). ``ms`` runs from ``chatmem.open`` to the first answer."""
    if not cached:
        await _browser.opfs_remove(_browser.index_cache_path(db).removeprefix("opfs://"))
    _huge.clear()
    _huge.update(db=db, words=vocabulary(), sessions=[])
    q = _huge["words"].queries(1, seed=29)[0]
    t0 = now()

    async def run() -> tuple[Any, int, float]:
        mem = await chatmem.open(db)
        _huge["mem"] = mem
        opened = now() - t0
        return mem, len(await mem.search(q, limit=10)), opened

    mem, hits, opened = await _watch(run(), timeout_s)
    ms = now() - t0
    return {
        "ms": ms,
        "open_ms": opened,
        "hits": hits,
        "phases_ms": dict(mem.index.open_ms),
        "heap": await heap(mem),
    }


async def huge_close() -> dict[str, Any]:
    mem = _huge.pop("mem", None)
    if mem is not None:
        try:  # bounded: after a failed phase the engine may never answer again
            await asyncio.wait_for(mem.close(), 60)
        except Exception as e:  # noqa: BLE001  (a timeout too)
            _log(f"closing the huge store: {type(e).__name__}: {e}")
    try:
        await asyncio.wait_for(_browser.drop_database(_huge["db"]), 60)
        await asyncio.wait_for(
            _browser.opfs_remove(_browser.index_cache_path(_huge["db"]).removeprefix("opfs://")), 60
        )
    except Exception as e:  # noqa: BLE001  (left for the next run's huge_open, which drops it first)
        _log(f"removing the huge store: {type(e).__name__}: {e}")
    return {"heap": await heap()}
