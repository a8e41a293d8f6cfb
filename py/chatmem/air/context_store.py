"""AIR's six-method ``ContextStore`` contract and its three implementations.

``MemoryContextStore`` is a thin view over the ``sessions`` and ``messages``
APIs (so ``mem.context_store`` and ``mem.sessions`` see the same data); the
three standalone implementations (``contextstore_backends``) open their own
memory on first use. None of them stores API keys or
provider objects: only session id, role, content, provider name, model and a
timestamp. ``add_message`` creates the session when it does not exist yet.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, Protocol

from ..conversations.session import history_of
from ..errors import SessionNotFound
from ..records.models import Message

if TYPE_CHECKING:
    from ..conversations.messages import Messages
    from ..conversations.sessions import Sessions

__all__ = ["ContextStore", "MemoryContextStore", "SessionsAndMessages"]


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


class SessionsAndMessages(Protocol):
    """What the view reads and writes through (a ``Memory`` is one)."""

    @property
    def sessions(self) -> Sessions: ...

    @property
    def messages(self) -> Messages: ...


class MemoryContextStore(ContextStore):
    """``ContextStore`` over a ``Memory`` (or anything with ``sessions`` and
    ``messages``); subclasses open theirs lazily (``_open``) and own it."""

    def __init__(self, memory: SessionsAndMessages | None = None):
        self._memory = memory

    async def _open(self) -> SessionsAndMessages:
        raise NotImplementedError  # pragma: no cover - subclasses that open lazily override

    async def memory(self) -> SessionsAndMessages:
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
            return history_of(await mem.messages.list(session_id))
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
        close = getattr(self._memory, "close", None)
        if close is not None:
            await close()
