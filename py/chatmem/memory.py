"""``Memory``: the facade over one store, and ``open()`` which picks the runtime and the store.

``open()`` chooses the runtime once (``runtime=``, or this platform's): in
Pyodide it opens (and migrates) the IndexedDB database ``name``; on CPython it
gives an in-memory store, or SQLite when ``persist`` names a file. ``Memory``
then builds every service from the store and the runtime, through their
constructors; none of them refers back to the ``Memory``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from types import TracebackType
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterable

from .air.context_store import ContextStore, MemoryContextStore
from .context.builder import ContextBuilder
from .context.providers import LiveContext, ModuleStateProvider
from .context.tokens import EstimateTokenizer, Tokenizer
from .context.window import ModelBudget, WindowResult
from .conversations.messages import Messages
from .conversations.retention import Retention
from .conversations.session import Session
from .conversations.sessions import Sessions
from .embedding.embedders import Embedder
from .errors import ValidationError
from .facts import Facts
from .index.live import LiveIndex
from .index.retrieve import RetrievalConfig
from .index.search import SearchHit
from .index.shared import IndexShare
from .records.ids import Clock, IdGenerator
from .records.validation import DEFAULT_LIMITS, Limits
from .runtime import IN_BROWSER, Runtime, default_runtime
from .stores.base import Store
from .stores.caches import CACHE_STRATEGIES, LRUCache, make_cache
from .stores.outbox import Outbox
from .stores.shared import Core
from .sync.synchronizer import Synchronizer

if TYPE_CHECKING:
    from .transfer.io import ImportReport, Transfer

__all__ = ["Memory", "open", "open_indexeddb", "IN_BROWSER", "DEFAULT_SQL_TIMEOUT", "CHANGED_ELSEWHERE"]

DURABILITIES = ("relaxed", "strict")
#: seconds ``Memory.sql`` lets one query run before it interrupts it
DEFAULT_SQL_TIMEOUT = 30.0
#: the ``on_change`` kind of a write made by another tab or process
CHANGED_ELSEWHERE = "changed-elsewhere"


def _check_limits(limits: Limits | None) -> Limits:
    if limits is None:
        return DEFAULT_LIMITS
    if not isinstance(limits, Limits):
        raise ValidationError("limits must be a chatmem.Limits", field="limits")
    return limits


class Memory:
    """Conversation memory over one ``Store``.

    ``sessions`` and ``messages`` are the API; ``session(id)`` gives a handle
    on one conversation; ``context_store`` is AIR's six-method view of the same
    data. Close it with ``await mem.close()`` or use ``async with``. ``runtime``
    (this platform's by default) gives the clock, the HTTP transport, the
    query engine, the drain lock and the rest of what depends on the platform.
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        cache_size: int = 100,
        cache_ttl: int = 3_600_000,
        cache_strategy: str = "lru",
        name: str | None = None,
        tokenizer: Tokenizer | None = None,
        embedder: Embedder | None = None,
        engine_factory: Any = None,
        runtime: Runtime | None = None,
        limits: Limits | None = None,
    ):
        self.runtime = runtime = runtime or default_runtime()
        clock = clock or runtime.clock
        self.name = name or store.kind
        self.store = store
        self.clock = clock
        #: the embedding started by ``embed_missing`` / ``embed_in_background``, if any
        self.embedding_task: asyncio.Task[int] | None = None
        ids = IdGenerator(clock)
        limits = _check_limits(limits)
        self._core = Core(
            store=store,
            clock=clock,
            ids=ids,
            outbox=Outbox(store, ids, clock, max_skew_ms=limits.max_clock_skew_ms),
            meta_cache=make_cache(cache_strategy, cache_size, cache_ttl, clock),
            page_cache=make_cache(cache_strategy, cache_size, cache_ttl, clock),
            limits=limits,
        )
        #: the bounds this memory enforces (``chatmem.records.validation.Limits``)
        self.limits = self._core.limits
        self.sessions = Sessions(self._core)
        self.messages = Messages(self._core)
        #: what chatmem knows about the person (``chatmem.facts``)
        self.facts = Facts(self._core, sleep=runtime.sleep, embedder=lambda: self.index.embedder)
        self.context_store: ContextStore = MemoryContextStore(_Api(self.sessions, self.messages))
        #: live context from modules (the original's "Active Context")
        self.context = LiveContext(clock)
        #: any module pushes its state here: ``mem.modules.set("module:discord", {...})``
        self.modules = ModuleStateProvider()
        self.context.register(self.modules)
        self.tokenizer: Tokenizer = tokenizer or EstimateTokenizer()
        self.retention = Retention(self.sessions, self.messages, store, clock, runtime.sleep)
        self.sync = Synchronizer(
            self._core,
            transport=runtime.transport,
            sleep=runtime.sleep,
            rand=runtime.rand,
            lock=runtime.drain_lock(store.name),
            online=runtime.online,
            on_online=runtime.on_online,
            cipher=runtime.cipher_suite,
        )
        self._closed = False
        #: the derived query index (DuckDB), built lazily on the first query
        cache = None if engine_factory is not None else runtime.index_cache(store)
        self.index = LiveIndex(
            self._core,
            engine_factory=engine_factory or (lambda: runtime.open_query_engine(cache)),
            embedder=embedder,
            cache=cache,
            share=_share(runtime, cache),
            early=(lambda counts: runtime.early_derivation(store, cache, counts)) if cache else None,
        )
        self._core.listeners.append(self.index.on_change)
        self._core.external_listeners.append(self.index.on_external)
        #: what ``on_change`` registered
        self._listeners: list[Callable[[str, str, Any], None]] = []
        self._core.external_listeners.append(self._on_external)
        self._builder = ContextBuilder(
            self._core, self.context, self.tokenizer, retriever=self.index.retriever
        )
        store.subscribe(self._on_remote_change)

    @cached_property
    def _transfer(self) -> Transfer:
        """Export and import: their modules (the format adapters) are read when first used."""
        from .transfer.io import Transfer

        return Transfer(self._core)

    def _on_remote_change(self, session_id: str) -> None:
        """Another tab wrote to this session: drop cached views, re-read it before the next
        query, and tell ``on_change`` listeners (``CHANGED_ELSEWHERE``)."""
        self._core.invalidate(session_id)
        self.index.on_remote(session_id)
        for fn in list(self._listeners):
            fn(CHANGED_ELSEWHERE, session_id, None)

    def _on_external(self) -> None:
        """Another process wrote to the store (found before a read): every session may differ."""
        for fn in list(self._listeners):
            fn(CHANGED_ELSEWHERE, "", None)

    #: ``OfflineResponder`` and the app use ranked search when this is true
    has_index = True

    # ------------------------------------------------------------------ query and search
    async def sql(
        self,
        query: str,
        params: list[Any] | tuple[Any, ...] | None = None,
        *,
        timeout: float | None = DEFAULT_SQL_TIMEOUT,
    ) -> list[dict[str, Any]]:
        """Read-only SQL over the query index (tables ``sessions``, ``messages``, ...).

        Parameters are bound (``?``), never formatted in. Anything but one
        read-only query raises ``ReadOnlySQLError`` and leaves the index as it was.
        The engine cannot reach files, the network or its own settings. A query
        running longer than ``timeout`` seconds (default 30; None: no limit) is
        interrupted and raises ``QueryTimeout``; cancelling the awaiting task
        interrupts it too, and the index is free for the next call at once.
        """
        return await self.index.sql(query, params, timeout=timeout)

    async def search(
        self,
        query: str,
        *,
        limit: int | None = 5,
        mode: str = "keyword",
        threshold: float | None = None,
        session_ids: Iterable[str] | None = None,
        character_ids: Iterable[str] | None = None,
        date_range: tuple[int | None, int | None] | None = None,
        roles: Iterable[str] | None = None,
        **kw: Any,
    ) -> list[SearchHit]:
        """Ranked search over every session: ``keyword`` (BM25), ``semantic``, ``hybrid``, ``substring``.

        Each ``SearchHit`` has the message, its session id, ``score`` and the
        ``breakdown`` of that score (keyword, semantic, recency).
        """
        return await self.index.search(
            query,
            limit=limit,
            mode=mode,
            threshold=threshold,
            session_ids=session_ids,
            character_ids=character_ids,
            date_range=date_range,
            roles=roles,
            **kw,
        )

    async def retrieve(
        self, session_id: str, query: str | None, config: RetrievalConfig | None = None
    ) -> list[SearchHit]:
        """The original's ``RetrievalConfig`` strategies (recent, relevant, hybrid) over one session."""
        return await self.index.retrieve(session_id, query, config)

    def set_embedder(self, embedder: Embedder) -> asyncio.Task[int]:
        """Switch the embedding model; vectors for it are computed in the background.

        Vectors are stored per model and dimension, so the old ones stay until
        the index is rebuilt; semantic queries use the new model at once (and
        embed whatever the background task has not reached yet). Returns the task.
        """
        if not callable(getattr(embedder, "embed", None)):
            raise ValidationError("embedder needs an async embed(texts)", field="embedder")
        self.index.embedder = embedder
        if self.index.query_index is not None:
            self.index.query_index.embedder = embedder

        async def embed_all() -> int:
            return await (await self.index.ready()).embed_missing(embedder)

        self.embedding_task = asyncio.ensure_future(embed_all())
        return self.embedding_task

    def embed_in_background(self, *, batch_size: int = 64) -> asyncio.Task[int]:
        """Embed every stored message for the current embedder in the background (batches
        of ``batch_size`` that yield to the page; progress in ``mem.index.embed_progress``; the
        index cache is saved as it goes and at the end, so a reload resumes). Returns the task."""
        self.embedding_task = asyncio.ensure_future(self.index.embed_in_background(batch_size=batch_size))
        return self.embedding_task

    async def rebuild_index(self) -> None:
        """Derive the query index again from the store (it is never the source of truth)."""
        await self.index.rebuild()

    def __repr__(self) -> str:
        return f"<Memory {self.name!r} store={self.store.kind}>"

    def session(self, session_id: str) -> Session:
        """A handle on one conversation (no I/O until it is used)."""
        if not isinstance(session_id, str) or not session_id:
            raise ValidationError("session_id must be a non-empty string", field="session_id")
        return Session(session_id, sessions=self.sessions, messages=self.messages, builder=self._builder)

    # ------------------------------------------------------------------ context window
    async def build_context(
        self,
        session_id: str,
        *,
        system_prompt: str | None = None,
        max_tokens: int | None = None,
        reserve_tokens: int = 0,
        retrieval: Any = None,
        summarize: Any = None,
        budget: ModelBudget | str | int | None = None,
        format: str = "openai",
        message_overhead: int | None = None,
        facts: bool = True,
        facts_budget: int | None = None,
    ) -> Any:
        """Provider-ready messages: system, context, summary, retrieved, then the recent ones that fit.

        Never more than ``max_tokens - reserve_tokens`` (or a named ``budget``
        preset); the system prompt (the session's ``system`` message at seq 0,
        or ``system_prompt=`` which overrides it for this call) and the newest
        user message are always kept (``ContextOverflow`` if even they do not
        fit); tool calls stay with their results. ``format="openai"`` (a list
        of chat messages) or ``"anthropic"`` (``{"system", "messages"}``); the
        per-message token overhead follows it unless ``message_overhead=``.
        Reads only: ``summarize=`` sends a computed summary, the store is untouched.
        """
        return await self._builder.build_context(
            session_id,
            system_prompt=system_prompt,
            max_tokens=max_tokens,
            reserve_tokens=reserve_tokens,
            retrieval=retrieval,
            summarize=summarize,
            budget=budget,
            format=format,
            message_overhead=message_overhead,
            facts=facts,
            facts_budget=facts_budget,
        )

    async def build_window(self, session_id: str, **kw: Any) -> WindowResult:
        """``build_context`` with the details: tokens per part, kept and dropped ids, summary used."""
        return await self._builder.build_window(session_id, **kw)

    # ------------------------------------------------------------------ storage
    async def storage_estimate(self) -> dict[str, Any]:
        """``{"usage", "quota", "persisted"}`` in bytes (browser); file size on SQLite."""
        return await self.runtime.storage_estimate(self.store)

    async def request_persistence(self) -> bool:
        """Ask the browser to keep this origin's data ("keep my data"). True when granted."""
        return await self.runtime.request_persistence(self.store)

    async def delete_old_sessions(self, *, older_than: int, now: int | None = None) -> list[str]:
        """Delete unpinned sessions idle for more than ``older_than`` ms (the quota remedy)."""
        return await self.retention.delete_old_sessions(older_than=older_than, now=now)

    # ------------------------------------------------------------------ export / import
    async def export(self, session_ids: Iterable[str] | None = None) -> dict[str, Any]:
        """Every session (or those named) with its messages, in the original's export shape."""
        return await self._transfer.export(session_ids)

    def export_iter(
        self, session_ids: Iterable[str] | None = None, *, batch_size: int = 500
    ) -> AsyncIterator[str]:
        """The export as JSON text chunks, read page by page (never the whole history in memory)."""
        return self._transfer.export_iter(session_ids, batch_size=batch_size)

    async def import_sessions(
        self, data: Any, *, preserve_ids: bool = False, format: str | None = None
    ) -> ImportReport:
        """Validate the whole input and write it in one transaction (all or nothing; in the
        page, new sessions are handed to that transaction in chunks while the rest is checked).

        ``data``: a dict, a list, or JSON text (``str``/``bytes``) in the chatmem,
        AIRI (``chat-sessions-index:v1``), ChatGPT or Claude format (auto-detected,
        or named by ``format``). ``preserve_ids=True`` restores a backup, idempotently.
        """
        return await self._transfer.import_sessions(data, preserve_ids=preserve_ids, format=format)

    def on_change(self, fn: Callable[[str, str, Any], None]) -> None:
        """Call ``fn(kind, session_id, payload)`` after every acknowledged write in this
        process (``kind`` names it: ``"messages-appended"``, ``"session-updated"``, ...;
        ``"session-synced"`` for what a pull applied to a session, ``"facts-synced"``
        (``session_id`` ``""``) when it changed facts), and with ``CHANGED_ELSEWHERE``
        (``"changed-elsewhere"``, payload None) when another tab wrote to ``session_id``
        or another process wrote to the store (``session_id`` ``""``: any session), so a
        page can show what arrives without a reload."""
        if not self._listeners:
            self._core.listeners.append(self._tell)
        self._listeners.append(fn)

    def _tell(self, kind: str, session_id: str, payload: Any) -> None:
        for fn in list(self._listeners):
            fn(kind, session_id, payload)

    @property
    def cache(self) -> tuple[LRUCache[Any, Any], LRUCache[Any, Any]]:
        """The (session metadata, message page) caches, for inspection."""
        return self._core.meta_cache, self._core.page_cache

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.retention.stop()
            await self.facts.close()
            await self.index.close()
            await self.sync.close()
            await self.store.close()

    async def __aenter__(self) -> Memory:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _share(runtime: Runtime, cache: str | None) -> IndexShare | None:
    """How this memory's index is shared with the other tabs of the profile (None: it is not)."""
    transport = runtime.index_share(cache) if cache else None
    return IndexShare(transport) if transport is not None else None


@dataclass(frozen=True)
class _Api:
    """The two APIs ``mem.context_store`` reads and writes through."""

    sessions: Sessions
    messages: Messages


async def open_indexeddb(
    name: str = "chatmem", *, durability: str = "relaxed", runtime: Runtime | None = None, **kwargs: Any
) -> Memory:
    """Open the IndexedDB database ``name`` (Pyodide only), migrating it if needed."""
    runtime = runtime or default_runtime()
    store = await runtime.open_indexeddb(name, durability=durability)
    return Memory(store, name=name, runtime=runtime, **kwargs)


async def open(
    name: str = "chatmem",
    *,
    persist: str | None = None,
    clock: Clock | None = None,
    durability: str = "relaxed",
    store: Store | None = None,
    cache_size: int = 100,
    cache_ttl: int = 3_600_000,
    cache_strategy: str = "lru",
    embedder: Embedder | None = None,
    tokenizer: Tokenizer | None = None,
    runtime: Runtime | None = None,
    limits: Limits | None = None,
) -> Memory:
    """Open conversation memory.

    - In Pyodide: the IndexedDB database ``name`` (created and migrated as needed).
    - On CPython: in memory, or a SQLite file when ``persist="path/to/file.db"``.
    - ``store=`` injects any ``Store`` instead.
    - ``runtime=`` injects what depends on the platform (store opener, HTTP
      transport, query engine, drain lock, online status, storage, token
      counter, clock, sleep, random); by default this platform's, chosen here once.

    ``cache_strategy`` is ``"lru"`` or ``"lfu"`` (the original's ``CacheConfig.strategy``).
    ``durability`` is ``"relaxed"`` (survives a tab or process crash) or
    ``"strict"`` (flushed to disk before a write returns; slower).
    """
    if not isinstance(name, str) or not name:
        raise ValidationError("name must be a non-empty string", field="name")
    if durability not in DURABILITIES:
        raise ValidationError(f"durability must be one of {DURABILITIES}", field="durability")
    if cache_strategy not in CACHE_STRATEGIES:
        raise ValidationError(f"cache_strategy must be one of {CACHE_STRATEGIES}", field="cache_strategy")
    if runtime is not None and not isinstance(runtime, Runtime):
        raise ValidationError("runtime must be a chatmem.Runtime", field="runtime")
    runtime = runtime or default_runtime()
    opts: dict[str, Any] = {
        "clock": clock,
        "cache_size": cache_size,
        "cache_ttl": cache_ttl,
        "cache_strategy": cache_strategy,
        "embedder": embedder,
        "tokenizer": tokenizer,
        "limits": limits,
        "runtime": runtime,
    }
    if store is None:
        store = await runtime.open_store(
            name, persist=None if persist is None else str(persist), durability=durability
        )
    return Memory(store, name=name, **opts)
