"""The standalone ``ContextStore`` implementations: each opens its own
memory on first use (nothing happens at construction) and closes it on
``close()``. Views of an open ``Memory`` are ``mem.context_store``."""

from __future__ import annotations

from ..memory import Memory, open_indexeddb
from ..stores.inprocess import MemoryStore
from ..stores.sqlite import SQLiteStore
from .context_store import MemoryContextStore

__all__ = ["InMemoryContextStore", "SQLiteContextStore", "IndexedDBContextStore"]


class InMemoryContextStore(MemoryContextStore):
    """A plain in-process store; nothing persisted, no file created."""

    async def _open(self) -> Memory:
        return Memory(MemoryStore())


class SQLiteContextStore(MemoryContextStore):
    """Backed by one ``sqlite3`` connection guarded by an ``asyncio.Lock``. Call ``close()``."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    async def _open(self) -> Memory:
        return Memory(SQLiteStore(self.path))


class IndexedDBContextStore(MemoryContextStore):
    """Backed by the IndexedDB database ``name`` (Pyodide in a browser only)."""

    def __init__(self, name: str = "chatmem"):
        super().__init__()
        self.name = name

    async def _open(self) -> Memory:
        return await open_indexeddb(self.name)
