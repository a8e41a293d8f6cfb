"""``mem.session(id)``: a handle on one conversation, the consumer of its store
(as AIR's ``Session`` is). Writes through it are durable when they return."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .models import ChatMessage

if TYPE_CHECKING:
    from .memory import Memory

__all__ = ["Session"]


class Session:
    def __init__(self, memory: Memory, session_id: str):
        self.memory = memory
        self.session_id = session_id

    def __repr__(self) -> str:
        return f"Session({self.session_id!r})"

    async def meta(self) -> Any:
        return await self.memory.sessions.get(self.session_id)

    async def append(self, role: str, content: str | list[dict[str, Any]], **fields: Any) -> ChatMessage:
        return await self.memory.messages.append(self.session_id, role, content, **fields)

    async def messages(self, *, limit: int | None = None, offset: int = 0) -> list[ChatMessage]:
        """All messages in order (or a page of them)."""
        return await self.memory.messages.list(self.session_id, limit=limit, offset=offset)

    async def send(self, text: str | list[dict[str, Any]], *, provider: Any, model: str | None = None,
                   budget: Any = "gpt-4o", on_token: Any = None, **kw: Any) -> ChatMessage:
        """One chat turn: store the user message, build the window, stream the answer, store it.

        On failure the user message stays and nothing of the answer is stored.
        """
        from .chat import send

        return await send(self.memory, self.session_id, text, provider=provider, model=model,
                          budget=budget, on_token=on_token, **kw)

    async def history(self) -> list[dict[str, Any]]:
        """AIR's ``get_history``: dicts with role, content, provider, model, created_at."""
        return [
            {
                "role": m.role,
                "content": m.content,
                "provider": m.provider,
                "model": m.model,
                "created_at": m.created_at,
            }
            for m in await self.messages()
        ]
