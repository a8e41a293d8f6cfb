"""The query index kept fresh over a store: ``mem.sql``, ``mem.search``, ``mem.retrieve``.

The store stays the source of truth; the index is derived and rebuildable.

- Lazy: nothing is built until the first query, so opening memory (and the
  page) never waits for it. The first query hydrates the index from the store
  in bulk (``QueryIndex.rebuild``).
- Fresh: every acknowledged write in this process is queued (a cheap,
  synchronous append) and the queue is applied before the next query, so a
  write is visible to every query issued after the awaited write returned.
- Other tabs: their BroadcastChannel notices mark sessions stale; a stale
  session is re-read from the store (only what changed) before the next query.
- ``rebuild()`` re-derives everything from the store; it answers like the
  incremental path (tested).
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable

from ..errors import SessionNotFound, UnsupportedEnvironment
from ..models import ChatMessage
from .embed import Embedder, HashingEmbedder
from .engine import SQLEngine
from .index import EVENT_KINDS, QueryIndex
from .retrieve import RetrievalConfig, retrieve
from .search import SearchHit, search

if TYPE_CHECKING:
    from ..core import Core

__all__ = ["LiveIndex", "default_engine"]

EngineFactory = Callable[[], Awaitable[SQLEngine]]
PAGE = 1000


async def default_engine() -> SQLEngine:
    """DuckDB-Wasm in the browser, the ``duckdb`` package on CPython."""
    if sys.platform == "emscripten":
        from .._browser import DuckDBWasmEngine

        return await DuckDBWasmEngine.open()
    try:
        from .engine import DuckDBEngine

        return DuckDBEngine()
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise UnsupportedEnvironment("the query index needs the duckdb package: pip install duckdb") from e


class LiveIndex:
    def __init__(
        self, core: Core, *, engine_factory: EngineFactory | None = None, embedder: Embedder | None = None
    ):
        self._core = core
        self._factory = engine_factory or default_engine
        self.embedder: Embedder = embedder or HashingEmbedder()
        self.index: QueryIndex | None = None
        self._pending: list[tuple[str, str, Any]] = []
        self._stale: set[str] = set()
        self._lock = asyncio.Lock()
        self.hydrations = 0

    # ------------------------------------------------------------------ change intake (sync)
    def on_change(self, kind: str, session_id: str, payload: Any) -> None:
        if self.index is None:
            return  # hydration reads the store as it is then
        if kind in EVENT_KINDS:
            self._pending.append((kind, session_id, payload))
        else:
            self._stale.add(session_id)

    def on_remote(self, session_id: str) -> None:
        if self.index is not None:
            self._stale.add(session_id)

    # ------------------------------------------------------------------ keeping up
    async def _messages(self, metas: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        store = self._core.store
        for meta in metas:
            offset = 0
            while True:
                page = await store.list_messages(meta["sessionId"], offset, PAGE, False)
                for rec in page:
                    yield rec
                if len(page) < PAGE:
                    break
                offset += len(page)

    async def _hydrate(self) -> QueryIndex:
        engine = await self._factory()
        index = QueryIndex(engine, embedder=self.embedder)
        self.index = index  # from here on, writes are queued
        self._pending.clear()
        self._stale.clear()
        metas = await self._core.store.all_sessions()
        await index.rebuild(metas, self._messages(metas))
        self.hydrations += 1
        return index

    async def _refresh_session(self, index: QueryIndex, sid: str) -> None:
        """Re-read one session from the store and apply only what the index lacks."""
        store = self._core.store
        rec = await store.get_session(sid)
        if rec is None:
            await index.apply("session-deleted", sid)
            return
        rows = await index.execute("SELECT seq FROM messages WHERE session_id = ?", [sid])
        # by seq, not max(seq): this tab may have indexed its own newer append before
        # the other tab's earlier ones arrived as a notice
        seqs = {int(r["seq"]) for r in rows}
        if len(seqs) > int(rec.get("messageCount", 0)):  # messages were deleted: start this session over
            await index.apply("session-cleared", sid, rec)
            seqs = set()
        fresh: list[dict[str, Any]] = []
        offset = 0
        while len(seqs) + len(fresh) < int(rec.get("messageCount", 0)):
            page = await store.list_messages(sid, offset, PAGE, True)
            fresh.extend(m for m in page if m["seq"] not in seqs)
            if len(page) < PAGE:
                break
            offset += len(page)
        fresh.reverse()
        await index.apply("session-created", sid, rec)
        if fresh:
            await index.apply("messages-appended", sid, {"messages": fresh, "session": rec})

    async def ready(self) -> QueryIndex:
        """The index, hydrated and caught up with every acknowledged write."""
        async with self._lock:
            index = self.index or await self._hydrate()
            while self._pending or self._stale:
                pending, self._pending = self._pending, []
                for kind, sid, payload in _coalesce(pending):
                    await index.apply(kind, sid, payload)
                stale, self._stale = self._stale, set()
                for sid in sorted(stale):
                    await self._refresh_session(index, sid)
            return index

    async def rebuild(self) -> None:
        """Drop the index and derive it again from the store."""
        async with self._lock:
            old, self.index = self.index, None
            if old is not None:
                await old.close()
            await self._hydrate()

    # ------------------------------------------------------------------ queries
    async def sql(self, query: str, params: list[Any] | tuple[Any, ...] | None = None) -> list[dict[str, Any]]:
        return await (await self.ready()).sql(query, params)

    async def search(self, query: str, **kw: Any) -> list[SearchHit]:
        kw.setdefault("embedder", self.embedder)
        kw.setdefault("now", self._core.now())
        return await search(await self.ready(), query, **kw)

    async def retrieve(self, session_id: str, query: str | None, config: RetrievalConfig | None = None) -> list[SearchHit]:
        return await retrieve(await self.ready(), session_id, query, config, self.embedder)

    async def retriever(self, session_id: str, query: str, config: Any, exclude: set[str]) -> list[ChatMessage]:
        """The window builder's hook: older relevant messages not already in the recent part."""
        try:
            hits = await self.retrieve(session_id, query, config)
        except SessionNotFound:
            return []
        return [h.message for h in hits if h.message.id not in exclude]

    async def close(self) -> None:
        if self.index is not None:
            await self.index.close()
            self.index = None


def _coalesce(events: list[tuple[str, str, Any]]) -> list[tuple[str, str, Any]]:
    """Merge runs of appends to one session into one apply (one transaction)."""
    out: list[tuple[str, str, Any]] = []
    for kind, sid, payload in events:
        if kind == "messages-appended" and out and out[-1][0] == kind and out[-1][1] == sid:
            prev = out[-1][2]
            prev_msgs = prev["messages"] if isinstance(prev, dict) else prev
            msgs = payload["messages"] if isinstance(payload, dict) else payload
            session = payload.get("session") if isinstance(payload, dict) else None
            out[-1] = (kind, sid, {"messages": list(prev_msgs) + list(msgs), "session": session})
        else:
            out.append((kind, sid, payload))
    return out
