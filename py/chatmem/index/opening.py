"""How a ``LiveIndex`` opens its index and keeps its cache file: the engine, the
cached file's state, the catch-up with the store, the rebuild, the file's copy
into memory and its saves (``CachedOpening``, a base of ``LiveIndex``; see
``live.py`` for the whole story and ``cache.py`` for the file).

The first query after a reload is answered from a valid cached file where it
is, the catch-up's writes made in the file; the copy into memory follows
``move_delay`` seconds later, and a file written in place is then saved whole
again (in-place writes leave partly used blocks). ``open_ms`` holds the
milliseconds of each phase of the last opening or whole catch-up. Nothing here
is the source of truth: what the file lacks is caught up from the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable

from ..scheduling.settle import settle
from .cache import IndexCache
from .derivation import EngineDerivation, Started
from .embed import Embedder
from .lifecycle import IndexState, check_transition
from .query_index import QueryIndex
from .reading import each_message
from .schema import OLDER_INDEX, UNFINISHED_INDEX, row_to_session_record, session_row
from .sql_engine import SQLEngine
from .tokenize import preload as preload_stemmers

if TYPE_CHECKING:
    from ..core import Core
    from .shared import IndexShare

__all__ = ["IN_MEMORY_MAX", "CachedOpening", "EarlyDerivation", "REBUILD_SHARE", "SAVE_SHARE"]

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


class CachedOpening:
    """The opening, catch-up and saving half of ``LiveIndex`` (which sets every attribute)."""

    _core: Core
    _factory: Callable[[], Awaitable[SQLEngine]]
    _early_derivation: EarlyDerivation | None
    embedder: Embedder
    share: IndexShare | None
    role: str | None
    #: where the index is in its lifecycle (``lifecycle.py``); ``query_index`` is set exactly in
    #: the states of ``HOLDS_INDEX``
    state: IndexState
    query_index: QueryIndex | None
    notice: str | None
    last_open: dict[str, Any]
    hydrations: int
    catchups: int
    open_ms: dict[str, float]
    _t: float
    _cache: IndexCache | None
    _pending: list[tuple[str, str, Any]]
    _stale: set[str]
    _early: set[str] | None
    _early_resync: bool
    _file_only: bool
    _resync: bool
    _lock: asyncio.Lock
    _dirty: bool
    _saving: asyncio.Task[Any] | None
    #: seconds the last save took, and when it ended (``time.monotonic``)
    _save_cost: float
    _saved_at: float
    #: the background save is still waiting (``close`` cancels it then and saves itself)
    _save_waiting: bool
    #: a save is copying the index to its file: queries with nothing to catch up need no ``_lock``
    _copying: bool
    _moving: asyncio.Task[Any] | None
    _in_place: bool
    save_delay: float
    move_delay: float

    def _messages(
        self, index: QueryIndex, metas: list[dict[str, Any]]
    ) -> AsyncIterator[dict[str, Any]] | EngineDerivation:
        """Every message of the sessions ``metas``, in their order: the engine's own
        derivation from the store when it has one (the page's), else ``reading.each_message``."""
        own = getattr(index.engine, "derivation", None)
        d = (
            own(self._core.store, [(m["sessionId"], int(m.get("messageCount") or 0)) for m in metas])
            if own
            else None
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
                held = self.query_index is not None and getattr(self.query_index, "engine", None) is engine
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
        for step, ms in (getattr(engine, "open_ms", None) or {}).items():
            self.open_ms[f"engine: {step}"] = ms
        self.notice = getattr(engine, "notice", None) or self.notice
        persistent = bool(getattr(engine, "persistent", False))
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
        have = {r["session_id"]: session_row(row_to_session_record(r)) for r in rows}
        wanted = {m["sessionId"]: m for m in metas}
        changed = [m for sid, m in wanted.items() if have.get(sid) != session_row(m)]
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
        await index.set_meta("complete", "1")
        self._lap_rebuild(index, "derive: rebuild")
        self.hydrations += 1
        self.last_open = {"mode": "rebuilt", "persistent": persistent, "sessions": len(metas)}
