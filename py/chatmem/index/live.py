"""The query index kept fresh over a store: ``mem.sql``, ``mem.search``, ``mem.retrieve``.

The store stays the source of truth; the index is derived and rebuildable.

- Lazy: nothing is built until the first query, so opening memory (and the
  page) never waits for it. The first query hydrates the index from the store
  in bulk (``QueryIndex.rebuild``); ``warm()`` starts that in the background.
- Cached: in the browser the index is saved to an OPFS file named after the
  store (``opfs://chatmem-index-<name>.duckdb``, chosen by the page runtime), so a reload does not
  re-derive it: the first query compares each session's stored record with
  the index's row in the file; the sessions that differ are re-read (a session
  only appended to gets just its new messages, any other is reloaded whole,
  ``catchup.py``), those gone dropped, all in one transaction in the file; the
  first query is answered from the file itself, which is copied into memory
  shortly after (``opening.py``, ``cache.py``). Appends of many messages queued
  before a query (an import) are caught up the same way, by one comparison with
  the store. The file is saved after a hydration, after a catch-up that
  changed something, on ``save()`` and on ``close()``; what was written after
  the last save is caught up at the next opening. The tab holding the Web
  Lock of the file owns it; another tab gets an in-memory index hydrated from
  the store. An engine with ``persistent=True`` (e.g. ``DuckDBEngine(path)``
  on CPython) is treated the same way.
- Recovery, never a hidden message: a cached file of an older schema, one that
  cannot be read or loaded, or one that cannot be saved (e.g. the storage
  quota) leads to a rebuild from the store or an in-memory index, and
  ``notice`` says so in words for the user (the app shows it).
- Fresh: every acknowledged write in this process is queued (a cheap,
  synchronous append) and the queue is applied before the next query, so a
  write is visible to every query issued after the awaited write returned.
- Other tabs: their BroadcastChannel notices mark sessions stale; a stale
  session is re-read from the store (only what changed) before the next query.
- One index for every tab: with a ``share`` (the page runtime's), the first tab
  to query becomes the *owner* (it keeps the index and its cache file, and
  answers the others); every other tab is a *guest* whose queries run on the
  owner's index (``shared.py``), so a second tab answers at once and holds no
  second copy. A guest never writes the index: its writes and the notices it
  received go to the owner as session ids, re-read from the store before the
  owner answers. When the owner goes, the next tab in line takes over from the
  saved file (``takeovers``); queries asked meanwhile wait and are answered.
- ``rebuild()`` re-derives everything from the store, in place (the owner keeps
  its engine and cache file; a guest has the owner do it); it answers like the
  incremental path (tested).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..embedding.local import default_embedder
from ..errors import SessionNotFound
from ..records.models import ChatMessage
from ..scheduling.settle import settle
from .cache import IndexCache
from .embed import Embedder
from .lifecycle import HOLDS_INDEX, IndexState
from .opening import CachedOpening, EarlyDerivation
from .query_index import EVENT_KINDS, QueryIndex
from .reading import PAGE
from .retrieve import RetrievalConfig, retrieve
from .search import SearchHit, search
from .shared import IndexShare, RemoteQueryIndex, answer_guest
from .sql_engine import SQLEngine

if TYPE_CHECKING:
    from ..core import Core

__all__ = ["LiveIndex", "EngineFactory"]

EngineFactory = Callable[[], Awaitable[SQLEngine]]
#: more stale sessions than this at once (e.g. another tab imported): compare all with the store
STALE_RESYNC = 50
#: queued appends of more messages than this (e.g. an import): compare all with the store
BULK_EVENTS = 5000


class LiveIndex(CachedOpening):
    """The query index of one store; ``engine_factory()`` opens its SQL engine
    (the runtime's, on the cache file ``cache`` when there is one)."""

    def __init__(
        self,
        core: Core,
        *,
        engine_factory: EngineFactory,
        embedder: Embedder | None = None,
        cache: str | None = None,
        share: IndexShare | None = None,
        early: EarlyDerivation | None = None,
    ):
        self._core = core
        self.cache = cache
        #: how this tab shares the index with the store's other tabs (None: it does not)
        self.share = share
        #: "owner" (keeps the index, answers other tabs), "guest" (asks the owner),
        #: "solo" (not shared), None until the first query
        self.role: str | None = None
        #: times this tab became owner after another owner went
        self.takeovers = 0
        self._taking_over: asyncio.Task[Any] | None = None
        self._factory = engine_factory
        #: a derivation to begin while the engine opens, when nothing is cached (None: no way)
        self._early_derivation = early
        self.embedder: Embedder = embedder or default_embedder()
        self.state = IndexState.UNOPENED
        self.query_index: QueryIndex | None = None
        self._pending: list[tuple[str, str, Any]] = []
        self._stale: set[str] = set()
        #: sessions written while an opening reads the store's sessions, before the index
        #: queues writes (None: no opening under way); re-read once it does
        self._early: set[str] | None = None
        #: another process wrote while an opening read the store (see ``on_external``)
        self._early_resync = False
        #: the store is too large for an index in memory: it is derived and kept in its file
        self._file_only = False
        self._resync = False
        self._lock = asyncio.Lock()
        self._warming: asyncio.Task[Any] | None = None
        self._cache: IndexCache | None = None
        self._dirty = False
        self._saving: asyncio.Task[Any] | None = None
        self._save_cost = 0.0
        self._saved_at = 0.0
        self._save_waiting = False
        self._copying = False
        #: seconds between an opening that changed the index and its background save
        self.save_delay = 1.0
        #: seconds between an opening answered from the cached file and its copy into memory
        self.move_delay = 2.0
        self._moving: asyncio.Task[Any] | None = None
        #: a catch-up wrote into the cached file: it is rewritten whole once the index is in memory
        self._in_place = False
        #: full derivations from the store / openings of a cached index
        self.hydrations = 0
        self.catchups = 0
        #: what the last opening did: "rebuilt", or "cached" with the sessions re-read and dropped
        self.last_open: dict[str, Any] = {}
        #: a sentence for the user when the cached index had to be rebuilt or cannot be saved
        self.notice: str | None = None
        #: milliseconds per phase of the last opening or whole catch-up (engine, state, catch-up...)
        self.open_ms: dict[str, float] = {}
        self._t = time.perf_counter()

    # ------------------------------------------------------------------ change intake (sync)
    def on_change(self, kind: str, session_id: str, payload: Any) -> None:
        if self.state not in HOLDS_INDEX:
            if self._early is not None:
                self._early.add(session_id)  # the opening re-reads it from the store
            if self.share is not None and self.role is None:
                self._stale.add(session_id)  # should this tab become a guest: the owner re-reads it
            return  # hydration reads the store as it is then
        if self.role == "guest":
            self._stale.add(session_id)  # the owner re-reads it from the store
        elif kind in EVENT_KINDS:
            self._pending.append((kind, session_id, payload))
        else:
            self._stale.add(session_id)

    def on_remote(self, session_id: str) -> None:
        if self.state in HOLDS_INDEX:
            self._stale.add(session_id)
        elif self._early is not None:
            self._early.add(session_id)  # an opening's derivation may have read it already

    def on_external(self) -> None:
        """Another process wrote to the store: compare every session before the next query."""
        if self.state in HOLDS_INDEX:
            self._resync = True
        elif self._early is not None:
            self._early_resync = True  # an opening's derivation may have read the store before

    def mark_stale(self, session_ids: list[str], resync: bool = False) -> None:
        """Re-read these sessions (with ``resync``: compare all) from the store before the next query."""
        if self.state in HOLDS_INDEX:
            self._stale.update(session_ids)
            self._resync = self._resync or resync

    def changed_in_background(self) -> None:
        """The index changed outside a catch-up (e.g. vectors): save it soon."""
        if self._cache is not None:
            self._schedule_save()

    def status(self) -> dict[str, Any]:
        """How this tab holds the index (for status displays and tests)."""
        return {
            "state": self.state.value,
            "role": self.role,
            "served": self.share.served if self.share else 0,
            "takeovers": self.takeovers,
            "hydrations": self.hydrations,
            "catchups": self.catchups,
            "last_open": self.last_open,
            "notice": self.notice,
            "persistent": self._cache is not None,
            "open_ms": self.open_ms,
        }

    # ------------------------------------------------------------------ keeping up
    async def _refresh_session(self, index: QueryIndex, sid: str) -> None:
        """Re-read one session from the store and apply only what the index lacks: new
        messages at the end are appended; anything else (a message gone, or one that
        arrived where it belongs, before others) re-reads the session whole, since
        every later ``seq`` moved."""
        store = self._core.store
        rec = await store.get_session(sid)
        if rec is None:
            await index.apply("session-deleted", sid)
            return
        rows = await index.execute("SELECT id FROM messages WHERE session_id = ? ORDER BY seq", [sid])
        indexed = [str(r["id"]) for r in rows]
        held = await store.message_ids(sid)
        if held[: len(indexed)] != indexed:  # moved or gone: start this session over
            await index.apply("session-cleared", sid, rec)
            indexed = []
        await index.apply("session-created", sid, rec)
        for start in range(len(indexed), len(held), PAGE):  # read a page at a time
            fresh = [m for m in await store.get_messages(held[start : start + PAGE]) if m is not None]
            if fresh:
                await index.apply("messages-appended", sid, {"messages": fresh, "session": rec})

    async def embed_in_background(
        self, embedder: Embedder | None = None, *, batch_size: int = 64, chunk: int = 4096
    ) -> int:
        """Embed every message that lacks a vector: found ``chunk`` at a time by one
        statement (0.3-0.5 s at 100,000 messages, whatever the chunk), their text read
        ``missing.READ`` at a time (one answer each: 1,024 with their text made one that
        held the page's main thread ~0.1 s in JSON alone), written ``batch_size`` at a
        time. The index cache is saved in the background after each ``chunk``, at most
        ``SAVE_SHARE`` of the time (a save copies the whole index), and soon after the
        last: a reload resumes where the last save left off. It starts once the
        figures a search keeps in Python are read, and loads the model first. Embedding yields to the event
        loop; queries run between batches. Returns how many were embedded;
        ``embed_progress`` shows ``(done, total)`` meanwhile."""
        emb = embedder or self.embedder
        # first the figures a search keeps in Python, then the model: their background read
        # beside the model's download and parse made the page's longest tasks (V8
        # collecting the garbage of both at once: 57-78 ms)
        await (await self.ready()).figures_read()
        load = getattr(emb, "load", None)
        if inspect.iscoroutinefunction(load):  # LocalEmbedder's (StaticEmbedder.load reads a file)
            await load()
        count = unsaved = 0
        while True:
            index = await self.ready()
            n = await index.embed_missing(emb, batch_size=batch_size, limit=max(chunk, batch_size))
            count += n
            unsaved += n
            # a guest's batches are the owner's to save; the end of a run saves soon even
            # when its last chunk's save was asked for (that one may wait, SAVE_SHARE)
            if self.role != "guest" and (unsaved >= chunk or (not n and count)):
                self._schedule_save(soon=not n)
                unsaved = 0
            if not n:
                return count
            await asyncio.sleep(0)

    @property
    def embed_progress(self) -> tuple[int, int]:
        """``(messages with a vector, messages)`` as of the last embedding batch."""
        return self.query_index.embed_progress if self.query_index is not None else (0, 0)

    def warm(self) -> asyncio.Task[Any]:
        """Start opening (or hydrating) the index in the background; queries await the same work."""
        if self._warming is None or self._warming.done():
            self._warming = asyncio.ensure_future(self.ready())
        return self._warming

    async def _open(self) -> QueryIndex:
        """The first query: become owner or guest (with a share), then open the index."""
        self._enter(IndexState.OPENING)
        if self.share is not None and self.role is None:
            try:
                self.role = await self.share.claim(self._on_owner)
            except BaseException:
                self._enter(IndexState.FAILED)
                raise
            if self.role == "guest":
                self.query_index = RemoteQueryIndex(
                    self.share, embedder=self.embedder, records=self._core.store.get_messages
                )
                self._pending.clear()
                self._enter(IndexState.READY)
                return self.query_index
        self.role = self.role or "solo"
        try:
            return await self._hydrate()
        finally:
            if self.role == "owner" and self.share is not None:
                self.share.serve(self._answer)  # a failed opening is tried again per request

    async def _answer(self, req: dict[str, Any]) -> Any:
        return await answer_guest(self, req)

    def _on_owner(self) -> None:
        """The owner went and this tab is next in line (called by the share)."""
        self._taking_over = asyncio.ensure_future(self._take_over())

    async def _take_over(self) -> None:
        async with self._lock:
            if self.state is IndexState.CLOSED:
                return
            self.role = "owner"
            self._enter(IndexState.OPENING)
            self.query_index = None  # the guest's view; requests in flight are now this tab's
            try:
                await self._hydrate()
                self.takeovers += 1
            except Exception as e:  # noqa: BLE001 - each request tries the opening again
                self.notice = f"The search index could not be opened ({e}); the next query tries again."
            finally:
                if self.share is not None:
                    self.share.serve(self._answer)

    async def ready(self) -> QueryIndex:
        """The index, hydrated and caught up with every acknowledged write (a guest's:
        the owner's index, caught up with this tab's writes and notices)."""
        await self._core.check_external()
        if (
            self._copying
            and self.query_index is not None
            and not (self._pending or self._stale or self._resync)
        ):
            return self.query_index  # a save holds _lock: its copy steps let queries through
        async with self._lock:
            index = self.query_index or await self._open()
            if self.role == "guest":
                stale, self._stale = sorted(self._stale), set()
                resync, self._resync = self._resync, False
            else:
                return await self._keep_up(index)
        assert isinstance(index, RemoteQueryIndex)
        try:
            await index.catch_up(stale, resync)  # outside the lock: this tab may be taking over
        except BaseException:
            self._stale.update(stale)
            self._resync = self._resync or resync
            raise
        return index

    async def _keep_up(self, index: QueryIndex) -> QueryIndex:
        if not (self._pending or self._stale or self._resync):
            return index
        self._enter(IndexState.CATCHING_UP)
        try:
            return await self._catch_up_writes(index)
        finally:
            if self.state in (IndexState.CATCHING_UP, IndexState.DERIVING):
                self._enter(IndexState.READY)

    async def _catch_up_writes(self, index: QueryIndex) -> QueryIndex:
        """Apply what was written since the last query (``_keep_up``): the queued writes,
        the sessions to re-read, or a comparison of every session with the store."""
        if len(self._stale) > STALE_RESYNC:  # comparing every session is cheaper
            self._stale.clear()
            self._resync = True
        if _appended(self._pending) > BULK_EVENTS:
            # e.g. an import: compared with the store in one pass (one transaction, or a
            # rebuild when most sessions changed) instead of a transaction per event;
            # the store holds every acknowledged write the events describe
            self._pending.clear()
            self._stale.clear()
            self._resync = True
        if self._resync:
            self._resync = False
            self.open_ms, self._t = {}, time.perf_counter()
            metas = await self._core.store.all_sessions()
            self._weigh(metas)
            if await self._catch_up(index, metas) is None:
                self._enter(IndexState.DERIVING)
                try:
                    if self._cache is not None:
                        await self._to_memory(copy=False)  # rebuilt in memory, then saved
                    await index.rebuild(metas, self._messages(index, metas))
                except BaseException:
                    await self._fail()  # half rebuilt: the next query opens again
                    raise
                self._lap_rebuild(index, "catchup: rebuild")
            self._dirty = True
        while self._pending or self._stale:
            self._dirty = True
            pending, self._pending = self._pending, []
            stale, self._stale = self._stale, set()
            try:
                for kind, sid, payload in _coalesce(pending):
                    await index.apply(kind, sid, payload)
                for sid in sorted(stale):
                    await self._refresh_session(index, sid)
            except Exception:
                # nothing is dropped: applying again is harmless (an append skips ids it has)
                self._pending[:0] = pending
                self._stale |= stale
                if self._cache is None or self._cache.in_memory or self._file_only:
                    raise
                await self._to_memory()  # the file cannot be written: work in memory
        return index

    async def rebuild(self) -> None:
        """Derive the index again from the store, in place: the engine and its cache file
        stay (the file is saved when this returns). An index kept in memory because its
        file could not be used tries the file again. A guest has the owner do it."""
        async with self._lock:
            index = self.query_index or await self._open()
            if self.role != "guest":
                if self.cache and self._cache is None:
                    self._enter(IndexState.OPENING)
                    self.query_index = None
                    await index.close()  # in memory: it holds no file
                    await self._hydrate(force=True)
                else:
                    self._enter(IndexState.DERIVING)
                    try:
                        if self._cache is not None:
                            self._weigh(await self._core.store.all_sessions())
                            await self._to_memory(copy=False)  # rebuilt in memory, then saved
                        await self._derive(index, self._cache is not None)
                    except BaseException:
                        await self._fail()  # half rebuilt: the next query opens again
                        raise
                    self._enter(IndexState.READY)
                if self._cache is not None:
                    await self._save()
                return
        assert self.share is not None
        await self.share.call("rebuild")

    async def sql(
        self, query: str, params: list[Any] | tuple[Any, ...] | None = None, *, timeout: float | None = None
    ) -> list[dict[str, Any]]:
        return await (await self.ready()).sql(query, params, timeout=timeout)

    async def search(self, query: str, **kw: Any) -> list[SearchHit]:
        kw.setdefault("embedder", self.embedder)
        kw.setdefault("now", self._core.now())
        return await search(await self.ready(), query, **kw)

    async def retrieve(
        self, session_id: str, query: str | None, config: RetrievalConfig | None = None
    ) -> list[SearchHit]:
        return await retrieve(await self.ready(), session_id, query, config, self.embedder)

    async def retriever(
        self, session_id: str, query: str, config: Any, exclude: set[str]
    ) -> list[ChatMessage]:
        """The window builder's hook: older relevant messages not already in the recent part;
        those from other sessions (``scope``) marked with where they came from."""
        from .retrieve import mark_provenance

        try:
            hits = await self.retrieve(session_id, query, config)
        except SessionNotFound:
            return []
        out: list[ChatMessage] = []
        titles: dict[str, tuple[str | None, int | None]] = {}
        for h in hits:
            if h.message.id in exclude:
                continue
            if h.session_id == session_id:
                out.append(h.message)
                continue
            if h.session_id not in titles:
                rows = await (await self.ready()).execute(
                    "SELECT title, created_at FROM sessions WHERE session_id = ?", [h.session_id]
                )
                titles[h.session_id] = (rows[0]["title"], rows[0]["created_at"]) if rows else (None, None)
            out.append(mark_provenance(h, *titles[h.session_id]))
        return out

    async def close(self) -> None:
        """Save and close the index. An owner first answers the requests it took, and
        only then lets the next tab in line take over (from the file saved here)."""
        if self._moving is not None and not self._moving.done():
            self._moving.cancel()  # the file is the index: nothing to copy
            await settle(self._moving)
        if self._saving is not None and self._save_waiting:
            self._saving.cancel()  # saved below, without its wait
            await settle(self._saving)
        for task in (self._warming, self._saving, self._taking_over):  # all finish soon
            if task is not None and not task.done():
                try:
                    await task
                except Exception:
                    pass
        if self._saving is not None and not self._saving.done():
            self._saving.cancel()  # the next one, for writes during that copy: saved below
            await settle(self._saving)
        if self.role == "owner" and self.share is not None:
            await self.share.drain()
        if self.query_index is not None:
            await self._compact_file()
            if self._dirty and self._cache is not None:
                try:
                    await self.ready()  # what is queued goes into the saved copy too
                    await self._save()
                except Exception:
                    pass  # the cache is derived: the next opening catches up anyway
            await self.query_index.close()
            self.query_index = None
            self._cache = None
        self._enter(IndexState.CLOSED)
        if self.share is not None:
            await self.share.close()


def _appended(events: list[tuple[str, str, Any]]) -> int:
    """How many messages the queued events append."""
    n = 0
    for kind, _, payload in events:
        if kind == "messages-appended":
            msgs = payload.get("messages") if isinstance(payload, dict) else payload
            n += len(msgs) if isinstance(msgs, list) else 0
    return n


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
