"""``mem.session(id)``: a handle on one conversation, the consumer of its store
(as AIR's ``Session`` is). Writes through it are durable when they return."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..records.models import ChatMessage
from .turn import reply, send

if TYPE_CHECKING:
    from ..context.builder import ContextBuilder
    from .messages import Messages
    from .sessions import Sessions

__all__ = ["Session", "history_of"]


class Session:
    """One conversation over the ``Sessions`` and ``Messages`` APIs and the window builder."""

    def __init__(self, session_id: str, *, sessions: Sessions, messages: Messages, builder: ContextBuilder):
        self.session_id = session_id
        self._sessions = sessions
        self._messages = messages
        self._builder = builder

    def __repr__(self) -> str:
        return f"Session({self.session_id!r})"

    async def meta(self) -> Any:
        return await self._sessions.get(self.session_id)

    async def append(self, role: str, content: str | list[dict[str, Any]], **fields: Any) -> ChatMessage:
        return await self._messages.append(self.session_id, role, content, **fields)

    async def messages(self, *, limit: int | None = None, offset: int = 0) -> list[ChatMessage]:
        """All messages in order (or a page of them)."""
        return await self._messages.list(self.session_id, limit=limit, offset=offset)

    async def send(
        self,
        text: str | list[dict[str, Any]],
        *,
        provider: Any,
        model: str | None = None,
        budget: Any = "gpt-4o",
        on_token: Any = None,
        **kw: Any,
    ) -> ChatMessage:
        """One chat turn: store the user message, build the window, stream the answer, store it.

        On failure the user message stays and nothing of the answer is stored.
        """
        return await send(
            self._messages,
            self._builder,
            self.session_id,
            text,
            provider=provider,
            model=model,
            budget=budget,
            on_token=on_token,
            **kw,
        )

    async def reply(
        self,
        *,
        provider: Any,
        model: str | None = None,
        budget: Any = "gpt-4o",
        on_token: Any = None,
        **kw: Any,
    ) -> ChatMessage:
        """The assistant's answer to the conversation as it stands (its last user message
        already stored): ``send`` without storing a new message. For an answer from memory
        while the model cannot be reached, then the model's own once it is back."""
        return await reply(
            self._messages,
            self._builder,
            self.session_id,
            provider=provider,
            model=model,
            budget=budget,
            on_token=on_token,
            **kw,
        )

    async def history(self) -> list[dict[str, Any]]:
        """AIR's ``get_history``: dicts with role, content, provider, model, created_at."""
        return history_of(await self.messages())


def history_of(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """AIR's history records of ``messages``: role, content, provider, model, created_at."""
    return [
        {
            "role": m.role,
            "content": m.content,
            "provider": m.provider,
            "model": m.model,
            "created_at": m.created_at,
        }
        for m in messages
    ]
