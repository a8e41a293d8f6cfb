"""``Memory``: the facade over one store, and ``open()`` which picks the store.

In Pyodide ``open(name)`` opens (and migrates) the IndexedDB database ``name``;
on CPython it gives an in-memory store, or SQLite when ``persist`` names a file.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

from .cache import LRUCache
from .contextstore import ContextStore, MemoryContextStore
from .core import Core
from .errors import UnsupportedEnvironment, ValidationError
from .ids import Clock, IdGenerator, system_clock
from .messages import Messages
from .outbox import Outbox
from .session import Session
from .sessions import Sessions
from .stores.base import Store
from .stores.memory import MemoryStore
from .sync.engine import SyncEngine

__all__ = ["Memory", "open", "open_indexeddb", "IN_BROWSER"]

#: True when running in Pyodide (a browser page or worker)
IN_BROWSER = sys.platform == "emscripten"

DURABILITIES = ("relaxed", "strict")


class Memory:
    """Conversation memory over one ``Store``.

    ``sessions`` and ``messages`` are the API; ``session(id)`` gives a handle
    on one conversation; ``context_store`` is AIR's six-method view of the same
    data. Close it with ``await mem.close()`` or use ``async with``.
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        cache_size: int = 100,
        cache_ttl: int = 3_600_000,
        name: str | None = None,
    ):
        clock = clock or system_clock
        self.name = name or store.kind
        self.store = store
        self.clock = clock
        ids = IdGenerator(clock)
        self._core = Core(
            store=store,
            clock=clock,
            ids=ids,
            outbox=Outbox(store, ids, clock),
            meta_cache=LRUCache(cache_size, cache_ttl, clock),
            page_cache=LRUCache(cache_size, cache_ttl, clock),
        )
        self.sessions = Sessions(self._core)
        self.messages = Messages(self._core)
        self.context_store: ContextStore = MemoryContextStore(self)
        self.sync = SyncEngine(self._core)
        self._closed = False
        subscribe = getattr(store, "subscribe", None)
        if subscribe is not None:
            # another tab wrote: forget what we cached about that session
            subscribe(lambda session_id: self._core.invalidate(session_id))

    def __repr__(self) -> str:
        return f"<Memory {self.name!r} store={self.store.kind}>"

    def session(self, session_id: str) -> Session:
        """A handle on one conversation (no I/O until it is used)."""
        if not isinstance(session_id, str) or not session_id:
            raise ValidationError("session_id must be a non-empty string", field="session_id")
        return Session(self, session_id)

    def on_change(self, fn: Any) -> None:
        """Call ``fn(kind, session_id, payload)`` after every acknowledged write in this process."""
        self._core.listeners.append(fn)

    @property
    def cache(self) -> tuple[LRUCache[Any, Any], LRUCache[Any, Any]]:
        """The (session metadata, message page) caches, for inspection."""
        return self._core.meta_cache, self._core.page_cache

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
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


async def open_indexeddb(name: str = "chatmem", *, durability: str = "relaxed", **kwargs: Any) -> Memory:
    """Open the IndexedDB database ``name`` (Pyodide only), migrating it if needed."""
    if not IN_BROWSER:
        raise UnsupportedEnvironment("IndexedDB needs Pyodide in a browser; use persist= on CPython")
    from .stores.indexeddb import IndexedDBStore

    store = await IndexedDBStore.open(name, durability=durability)
    return Memory(store, name=name, **kwargs)


async def open(
    name: str = "chatmem",
    *,
    persist: str | None = None,
    clock: Clock | None = None,
    durability: str = "relaxed",
    store: Store | None = None,
    cache_size: int = 100,
    cache_ttl: int = 3_600_000,
) -> Memory:
    """Open conversation memory.

    - In Pyodide: the IndexedDB database ``name`` (created and migrated as needed).
    - On CPython: in memory, or a SQLite file when ``persist="path/to/file.db"``.
    - ``store=`` injects any ``Store`` instead.

    ``durability`` is ``"relaxed"`` (survives a tab or process crash) or
    ``"strict"`` (flushed to disk before a write returns; slower).
    """
    if not isinstance(name, str) or not name:
        raise ValidationError("name must be a non-empty string", field="name")
    if durability not in DURABILITIES:
        raise ValidationError(f"durability must be one of {DURABILITIES}", field="durability")
    opts: dict[str, Any] = {"clock": clock, "cache_size": cache_size, "cache_ttl": cache_ttl}
    if store is not None:
        return Memory(store, name=name, **opts)
    if IN_BROWSER:
        if persist is not None:
            raise ValidationError("persist= is for CPython; in the browser data lives in IndexedDB",
                                  field="persist")
        return await open_indexeddb(name, durability=durability, **opts)
    if persist is not None:
        from .stores.sqlite import SQLiteStore

        return Memory(SQLiteStore(str(persist), durability=durability), name=name, **opts)
    return Memory(MemoryStore(), name=name, **opts)
