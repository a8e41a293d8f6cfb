"""AIR's six-method ``ContextStore`` contract and its three implementations.

Each implementation is a thin view over a ``Memory`` (so ``mem.context_store``
and ``mem.sessions`` see the same data). None of them stores API keys or
provider objects: only session id, role, content, provider name, model and a
timestamp. ``add_message`` creates the session when it does not exist yet.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

from .errors import SessionNotFound
from .models import Message

if TYPE_CHECKING:
    from .memory import Memory

__all__ = [
    "ContextStore",
    "MemoryContextStore",
    "InMemoryContextStore",
    "SQLiteContextStore",
    "IndexedDBContextStore",
]


class ContextStore(abc.ABC):
    """The storage contract: six async methods keyed by a session id string."""

    @abc.abstractmethod
    async def add_message(
        self,
        session_id: str,
        role: str,
        content: str | list[dict[str, Any]],
        provider: str | None = None,
        model: str | None = None,
    ) -> None: ...

    @abc.abstractmethod
    async def get_messages(self, session_id: str) -> list[Message]: ...

    @abc.abstractmethod
    async def get_history(self, session_id: str) -> list[dict[str, Any]]: ...

    @abc.abstractmethod
    async def clear_session(self, session_id: str) -> None: ...

    @abc.abstractmethod
    async def delete_session(self, session_id: str) -> None: ...

    @abc.abstractmethod
    async def list_sessions(self) -> list[str]: ...


class MemoryContextStore(ContextStore):
    """``ContextStore`` over a ``Memory``; opens it lazily when given a factory."""

    def __init__(self, memory: Memory | None = None):
        self._memory = memory

    async def _open(self) -> Memory:
        raise NotImplementedError  # pragma: no cover - subclasses that open lazily override

    async def memory(self) -> Memory:
        if self._memory is None:
            self._memory = await self._open()
        return self._memory

    async def add_message(
        self,
        session_id: str,
        role: str,
        content: str | list[dict[str, Any]],
        provider: str | None = None,
        model: str | None = None,
    ) -> None:
        mem = await self.memory()
        await mem.messages.add(session_id, role, content, provider=provider, model=model)

    async def get_messages(self, session_id: str) -> list[Message]:
        return [Message(h["role"], h["content"]) for h in await self.get_history(session_id)]

    async def get_history(self, session_id: str) -> list[dict[str, Any]]:
        mem = await self.memory()
        try:
            return await mem.session(session_id).history()
        except SessionNotFound:
            return []

    async def clear_session(self, session_id: str) -> None:
        mem = await self.memory()
        try:
            await mem.sessions.clear(session_id)
        except SessionNotFound:
            pass

    async def delete_session(self, session_id: str) -> None:
        mem = await self.memory()
        try:
            await mem.sessions.delete(session_id)
        except SessionNotFound:
            pass

    async def list_sessions(self) -> list[str]:
        mem = await self.memory()
        metas = await mem.sessions.list(limit=None, archived=None, pinned_first=False)
        metas.sort(key=lambda m: (m.created_at, m.session_id))
        return [m.session_id for m in metas]

    async def close(self) -> None:
        if self._memory is not None:
            await self._memory.close()


class InMemoryContextStore(MemoryContextStore):
    """A plain in-process store; nothing persisted, no file created."""

    async def _open(self) -> Memory:
        from .memory import Memory
        from .stores.inprocess import MemoryStore

        return Memory(MemoryStore())


class SQLiteContextStore(MemoryContextStore):
    """Backed by one ``sqlite3`` connection guarded by an ``asyncio.Lock``. Call ``close()``."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    async def _open(self) -> Memory:
        from .memory import Memory
        from .stores.sqlite import SQLiteStore

        return Memory(SQLiteStore(self.path))


class IndexedDBContextStore(MemoryContextStore):
    """Backed by the IndexedDB database ``name`` (Pyodide in a browser only)."""

    def __init__(self, name: str = "chatmem"):
        super().__init__()
        self.name = name

    async def _open(self) -> Memory:
        from .memory import open_indexeddb

        return await open_indexeddb(self.name)
