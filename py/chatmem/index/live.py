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
  shortly after (below, and ``cache.py``). Appends of many messages queued
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

Opening and the cache file: the first query after a reload is answered from a
valid cached file where it is, the catch-up's writes made in the file; the
copy into memory follows ``move_delay`` seconds later, and a file written in
place is then saved whole again (in-place writes leave partly used blocks).
``open_ms`` holds the milliseconds of each phase of the last opening or whole
catch-up. Nothing here is the source of truth: what the file lacks is caught
up from the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable

from ..embedding.embedders import Embedder
from ..embedding.local import default_embedder
from ..errors import SessionNotFound
from ..records.models import ChatMessage
from ..scheduling.settle import settle
from ..scheduling.timeslice import TimeSlicer
from ..text.tokenize import preload as preload_stemmers
from .cache import IndexCache
from .derivation import Started
from .fill import FillState
from .lifecycle import HOLDS_INDEX, IndexState, check_transition
from .query_index import EVENT_KINDS, QueryIndex
from .reading import PAGE, each_message
from .retrieve import RetrievalConfig, retrieve
from .schema import OLDER_INDEX, UNFINISHED_INDEX, row_to_session_record, session_row
from .search import SearchHit, search
from .shared import IndexShare, RemoteQueryIndex, answer_guest
from .sql_engine import EngineDerivation, SQLEngine

if TYPE_CHECKING:
    from ..stores.shared import Core

__all__ = ["IN_MEMORY_MAX", "REBUILD_SHARE", "SAVE_SHARE", "EarlyDerivation", "EngineFactory", "LiveIndex"]

EngineFactory = Callable[[], Awaitable[SQLEngine]]
#: the runtime's derivation to begin while the engine opens (``Runtime.early_derivation``),
#: given the sessions' message counts in the order to read them
EarlyDerivation = Callable[[list[tuple[str, int]]], Awaitable[EngineDerivation | None]]

#: a store of more messages than this has its index derived and kept in the cache file,
#: never copied into memory (1,000,000 messages' index did not fit the page's 4 GB there)
IN_MEMORY_MAX = 300_000
#: more changed sessions than this share of all (and at least 50): rebuild instead of catching up
REBUILD_SHARE = 0.25
#: background saves take at most about this share of the time: after a save that took
#: ``s`` seconds, the next background save waits ``s * (1 - SAVE_SHARE) / SAVE_SHARE``
#: (a save copies the whole index: 2-5 s at 100,000 messages while embedding them)
SAVE_SHARE = 0.1
#: more stale sessions than this at once (e.g. another tab imported): compare all with the store
STALE_RESYNC = 50
#: queued appends of more messages than this (e.g. an import): compare all with the store
BULK_EVENTS = 5000


class LiveIndex:
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
        #: waits for the fill of ``messages`` after a derivation that left the texts out
        self._filled: asyncio.Task[Any] | None = None
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
            "messages": self._messages_status(),
        }

    def _messages_status(self) -> dict[str, Any]:
        """Whether ``messages`` is complete, or how far its fill went (``fill.py``)."""
        fill = self.query_index.fill if isinstance(self.query_index, QueryIndex) else None
        if fill is None:
            return {"state": FillState.DONE.value}
        return {"state": fill.state.value, "filled": fill.filled}

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
        # docs are numbered in seq order within a session (a derivation reads each session
        # by seq, appends come after); unlike ``messages``, ``docs`` is never being filled
        rows = await index.execute("SELECT message_id FROM docs WHERE session_id = ? ORDER BY doc", [sid])
        indexed = [str(r["message_id"]) for r in rows]
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
        if self._filled is not None and not self._filled.done():
            self._filled.cancel()  # the fill stops with the index: the file is not complete
            await settle(self._filled)
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

    # ------------------------------------------------------------------ opening, catch-up, the cache file
    def _messages(
        self, index: QueryIndex, metas: list[dict[str, Any]]
    ) -> AsyncIterator[dict[str, Any]] | EngineDerivation:
        """Every message of the sessions ``metas``, in their order: the engine's own
        derivation from the store when it has one (the page's), else ``reading.each_message``."""
        d = index.engine.derivation(
            self._core.store, [(m["sessionId"], int(m.get("messageCount") or 0)) for m in metas]
        )
        return d if d is not None else each_message(self._core.store, metas)

    def _enter(self, state: IndexState) -> None:
        """Move to ``state`` (``lifecycle.TRANSITIONS`` says from where it may be reached)."""
        check_transition(self.state, state)
        self.state = state

    async def _fail(self) -> None:
        """An opening or a derivation failed: its half-made index is dropped, and the next
        query opens again (a cached file left unfinished is rebuilt then)."""
        index, self.query_index = self.query_index, None
        self._enter(IndexState.FAILED)
        if index is not None:
            with contextlib.suppress(Exception):  # the failure being raised is the one that matters
                await index.close()

    def _lap(self, phase: str) -> None:
        """Record the milliseconds since the previous lap under ``phase`` (``open_ms``)."""
        t = time.perf_counter()
        self.open_ms[phase] = round(self.open_ms.get(phase, 0.0) + (t - self._t) * 1000, 1)
        self._t = t

    def _lap_rebuild(self, index: QueryIndex, phase: str) -> None:
        """``_lap`` for a rebuild just done, and its parts (``rebuild_ms``) under ``phase: part``."""
        self._lap(phase)
        for part, ms in index.rebuild_ms.items():
            self.open_ms[f"{phase}: {part}"] = ms

    async def _hydrate(self, force: bool = False) -> QueryIndex:
        self._enter(IndexState.OPENING)
        self.open_ms, self._t = {}, time.perf_counter()
        opening = asyncio.ensure_future(self._factory())
        # the store's sessions are read beside the engine's opening; a session written
        # meanwhile is noted (``_early``) and re-read from the store before the first query
        self._early, self._early_resync = set(), False
        metas = asyncio.ensure_future(self._core.store.all_sessions())
        # with nothing cached to open, the derivation reads, splits and counts meanwhile
        early = None if force or self._early_derivation is None else asyncio.ensure_future(self._begin(metas))
        try:
            await asyncio.sleep(0)  # the engine's opening is under way (in its worker, in the page)
            preload_stemmers()  # meanwhile: the first query's words need them
            self._lap("stemmers")
            try:
                engine = await opening
            except BaseException:
                await self._fail()
                raise
            try:
                index = await self._hydrate_with(engine, metas, force, early)
            except BaseException:
                held = self.query_index is not None and self.query_index.engine is engine
                await self._fail()  # closes the index made over the engine, if it was made
                if not held:
                    with contextlib.suppress(Exception):  # the first error is the one to raise
                        await engine.close()  # no index holds it: let go of its file now
                raise
            self._enter(IndexState.READY)
            return index
        finally:
            self._early = None
            if not metas.done():
                await settle(metas)
            if early is not None:  # not taken (a cached file after all, or a failure): dropped
                await settle(early)
                if not early.cancelled() and early.exception() is None and (begun := early.result()):
                    await begun[1].cancel()

    async def _begin(
        self, metas: asyncio.Future[list[dict[str, Any]]]
    ) -> tuple[list[dict[str, Any]], Started] | None:
        """The runtime's derivation begun over the store's sessions as the opening read them
        (None: something may be cached, or the runtime has none)."""
        assert self._early_derivation is not None
        ms = await metas
        d = await self._early_derivation([(m["sessionId"], int(m.get("messageCount") or 0)) for m in ms])
        return None if d is None else (ms, Started(d))

    async def _hydrate_with(
        self,
        engine: SQLEngine,
        metas: asyncio.Future[list[dict[str, Any]]],
        force: bool,
        early: asyncio.Future[Any] | None = None,
    ) -> QueryIndex:
        self._lap("engine")
        for step, ms in engine.open_ms.items():
            self.open_ms[f"engine: {step}"] = ms
        self.notice = engine.notice or self.notice
        persistent = engine.persistent
        cache = None
        if persistent:
            cache = IndexCache(engine)
            await cache.attach_work()
            self._lap("attach")
        self._cache = cache
        self._weigh(await metas)
        index = QueryIndex(
            engine,
            embedder=self.embedder,
            records=self._core.store.get_messages,
            compress=cache is None or cache.compress,
        )
        self.query_index = index  # from here on, writes are queued
        self._pending.clear()
        self._stale = self._early or set()
        self._early = None
        if cache is not None and not force:
            try:
                state = await cache.state()
                self._lap("state")
                if state == "valid":
                    index.set_up()  # every table is there, of this schema version
                    self._enter(IndexState.CATCHING_UP)
                    caught = await self._catch_up(index, await metas)
                    if caught is not None:
                        self.catchups += 1
                        if caught:  # kept at once (a checkpoint, if written into the file)
                            self._schedule_save()
                        self._schedule_move()
                        return index
                elif state == "stale":
                    self.notice = OLDER_INDEX
                elif state == "unfinished":
                    self.notice = UNFINISHED_INDEX
            except Exception as e:  # noqa: BLE001 - the file is derived: never let it hide a message
                self.notice = f"The saved search index could not be read ({e}); it is being rebuilt."
                await index._rollback()
        self._enter(IndexState.DERIVING)
        if cache is not None:
            await self._to_memory(copy=False)  # rebuilt in memory, then saved
            self._lap("attach memory")
        begun = None
        if early is not None:
            with contextlib.suppress(Exception):  # the usual derivation below reports what failed
                begun = await early
        await self._derive(index, persistent, begun)
        if cache is not None:
            self._schedule_save()
        return index

    async def _catch_up(self, index: QueryIndex, metas: list[dict[str, Any]]) -> int | None:
        """Bring a cached index up to ``metas`` (the store's sessions, read as the opening
        began): the number of sessions re-read or dropped, or None when so many changed
        that a rebuild is cheaper."""
        rows = await index.execute("SELECT * FROM sessions")
        slicer = TimeSlicer()  # a million messages are some 10,000 sessions to compare
        have: dict[str, tuple[Any, ...]] = {}
        for r in rows:
            have[r["session_id"]] = session_row(row_to_session_record(r))
            await slicer.tick()
        wanted = {m["sessionId"]: m for m in metas}
        changed = []
        for sid, m in wanted.items():
            if have.get(sid) != session_row(m):
                changed.append(m)
            await slicer.tick()
        gone = sorted(set(have) - set(wanted))
        self._lap("catchup: compare")
        if len(changed) + len(gone) > max(50, int(REBUILD_SHARE * len(metas))):
            return None
        if changed or gone:
            # each changed session read whole; the index adds what it lacks, and drops and
            # reloads a session whose stored messages differ from its rows (``catchup.py``)
            msgs = [m async for m in each_message(self._core.store, changed)]
            self._lap("catchup: read changed")
            on_file = self._cache is not None and not self._cache.in_memory
            try:
                await index.resync(changed, msgs, gone)  # into the file: the first answer waits for no copy
            except Exception:
                if not on_file or self._file_only:
                    raise
                await self._to_memory()  # the file refuses the write (e.g. the quota): in memory
                self._lap("catchup: copy into memory")
                on_file = False
                await index.resync(changed, msgs, gone)  # the failed one was rolled back
            self._in_place = self._in_place or on_file  # rewritten whole once moved into memory
            self._lap("catchup: apply")
            for step, ms in index.resync_ms.items():
                self.open_ms[f"catchup: apply: {step}"] = round(ms, 1)
        self.last_open = {
            "mode": "cached",
            "persistent": self._cache is not None,
            "sessions": len(metas),
            "refreshed": len(changed),
            "dropped": len(gone),
        }
        return len(changed) + len(gone)

    def _weigh(self, metas: list[dict[str, Any]]) -> None:
        """Note whether the store is too large for an index in memory (``IN_MEMORY_MAX``)."""
        self._file_only = sum(int(m.get("messageCount") or 0) for m in metas) > IN_MEMORY_MAX

    async def _to_memory(self, copy: bool = True) -> None:
        """Make an in-memory copy of the cache file the working database (``copy=False``:
        an empty one, to rebuild into), unless the store is too large for it: then the
        file stays the working database, and a failed write is raised, not moved."""
        if self._cache is not None and not self._file_only:
            await self._cache.to_memory(copy)

    def _schedule_move(self) -> None:
        """Copy the cached file into memory once the first queries are answered (they
        were answered from the file): later queries and writes run in memory."""
        if self._moving is None or self._moving.done():
            self._moving = asyncio.ensure_future(self._move_later())

    async def _move_later(self) -> None:
        await asyncio.sleep(self.move_delay)
        async with self._lock:
            cache, index = self._cache, self.query_index
            if cache is None or cache.in_memory or not isinstance(index, QueryIndex):
                return
            async with index._lock:
                try:
                    await self._to_memory()
                except Exception:  # noqa: BLE001 - the file keeps answering; a save copies nothing
                    return
        if self._in_place:
            self._in_place = False
            self._schedule_save(soon=True)

    async def _compact_file(self) -> None:
        """Before the last save of a closing index whose catch-up wrote into the file and
        that never moved into memory: move it now, so that the save rewrites the file
        whole, as compact as a fresh one (writes in place leave partly used blocks)."""
        if self._in_place and self._cache is not None and not self._cache.in_memory:
            self._in_place = False
            try:
                await self._to_memory()
                self._dirty = self._dirty or self._cache.in_memory
            except Exception:  # noqa: BLE001 - the file stays as it is, complete
                pass

    def _schedule_save(self, *, soon: bool = False) -> None:
        """Save in the background once the queries of the moment are answered (the first
        query does not wait for the copy; later ones may, for its ~1-2 s), and at most
        ``SAVE_SHARE`` of the time; ``soon``: after ``save_delay`` only (e.g. at the end
        of a long run of writes)."""
        self._dirty = True
        if soon and self._saving is not None and self._save_waiting:
            self._saving.cancel()  # still waiting: replaced by a sooner one
            self._saving = None
        if self._saving is None or self._saving.done():
            self._saving = asyncio.ensure_future(self._save_later(soon))

    def _save_wait(self) -> float:
        """Seconds the next background save waits: ``save_delay``, or longer after a
        costly save (``SAVE_SHARE``)."""
        since = time.monotonic() - self._saved_at
        return max(self.save_delay, self._save_cost * (1 - SAVE_SHARE) / SAVE_SHARE - since)

    async def _save_later(self, soon: bool = False) -> None:
        self._save_waiting = True
        try:
            await asyncio.sleep(self.save_delay if soon else self._save_wait())
            if isinstance(self.query_index, QueryIndex):
                await self.query_index.messages_filled()  # saved complete, or not at all
        finally:
            if self._saving is asyncio.current_task():  # not one replaced by a sooner save
                self._save_waiting = False
        async with self._lock:
            if self._dirty and self._cache is not None and self.query_index is not None:
                await self._save()
        if self._dirty and self._saving is asyncio.current_task():  # written to during the copy
            self._saving = asyncio.ensure_future(self._save_later())

    async def _save(self) -> None:
        """Copy the index to its file, in steps under the index's lock (``IndexCache.save``):
        queries run between them, and so may vectors' writes, which make it dirty again.
        The caller holds ``_lock`` (or is closing): no catch-up writes meanwhile."""
        index = self.query_index
        if self._cache is not None and index is not None:
            self._dirty = False
            self._copying = True
            t = time.monotonic()
            try:
                await self._cache.save(hold=lambda: index._lock)
            except Exception as e:  # noqa: BLE001 - e.g. the storage quota: keep working in memory
                self._cache = None
                self.notice = (
                    f"The search index cannot be saved ({e}); "
                    "it is kept in memory and rebuilt on the next visit."
                )
                self.last_open["persistent"] = False
            finally:
                self._copying = False
            self._saved_at = time.monotonic()
            self._save_cost = self._saved_at - t

    async def save(self) -> bool:
        """Write the index to its cache file now (a guest has the owner do it; False when
        there is no file, e.g. the storage refused it)."""
        if self.role == "guest" and self.share is not None:
            return bool(await self.share.call("save"))
        async with self._lock:
            if self._cache is None or self.query_index is None:
                return False
            await self._save()
            return True

    async def _derive(
        self, index: QueryIndex, persistent: bool, begun: tuple[list[dict[str, Any]], Started] | None = None
    ) -> None:
        """Fill ``index`` from the store, dropping what it held; with the derivation ``begun``
        as the opening began (over those sessions), whose writes since are kept to re-read."""
        if begun is None:
            self._pending.clear()
            self._stale.clear()
            self._resync = False
            metas = await self._core.store.all_sessions()
            self._lap("derive: store sessions")
            await index.rebuild(metas, self._messages(index, metas))
        else:
            metas, started = begun
            self.open_ms["derive: begun early"] = 1
            self._resync = self._resync or self._early_resync  # what the store held since: compared after
            try:
                await index.rebuild(metas, started)
            finally:
                await started.cancel()  # a no-op once it ran; else its loads are dropped
        if index.fill is None:
            await index.set_meta("complete", "1")
        else:
            self._filled = asyncio.ensure_future(self._after_fill(index))
        self._lap_rebuild(index, "derive: rebuild")
        self.hydrations += 1
        self.last_open = {"mode": "rebuilt", "persistent": persistent, "sessions": len(metas)}

    async def _after_fill(self, index: QueryIndex) -> None:
        """Once ``index``'s fill of ``messages`` ends: the index is complete (and saved), or,
        if the fill failed, the next query opens it again (the file, not marked complete,
        is derived again)."""
        fill = index.fill
        if fill is None:
            return
        ended = await fill.ended()
        if self.query_index is not index or index.fill is not fill:
            return  # closed, or derived again
        if ended is FillState.DONE:
            self.open_ms["fill: messages"] = round(fill.ms, 1)
            await index.set_meta("complete", "1")
            if self._cache is not None:
                self._schedule_save()
        elif ended is FillState.FAILED:
            async with self._lock:
                if self.query_index is index:
                    self.notice = (
                        f"The search index could not be completed ({fill.error}); it is being rebuilt."
                    )
                    await self._fail()


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
