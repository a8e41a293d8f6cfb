"""``ChatmemChatMessageHistory``: a LangChain chat history stored in chatmem.

    from chatmem.integrations.langchain import ChatmemChatMessageHistory
    history = ChatmemChatMessageHistory(mem, session_id)

A ``langchain_core.chat_history.BaseChatMessageHistory`` with both the sync
(``messages``, ``add_messages``, ``clear``) and the async (``aget_messages``,
``aadd_messages``, ``aclear``) methods, so it works with
``RunnableWithMessageHistory`` in ``invoke`` and ``ainvoke``. Messages map to
chatmem roles (human→user, ai→assistant, system, tool); an AI message's
``tool_calls`` are stored as OpenAI-style ``tool_calls`` and a tool message's
``tool_call_id`` as such, so the window keeps calls with their results. What
LangChain has and chatmem has not (its message ``id``, ``additional_kwargs``,
``response_metadata``, ``usage_metadata``, ``invalid_tool_calls``, a tool
message's ``status``/``artifact``) is kept in ``metadata["langchain"]``: the
messages read back equal the ones added.

Each ``add_messages`` is one transaction (all or nothing) and durable when it
returns; the session is created on the first add. The sync methods must not be
called from inside a running event loop (use the async ones there); from other
threads they run on the loop that created the history when it is running, else
on a private one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from typing import TYPE_CHECKING, Any, Awaitable, Sequence, TypeVar

from ..errors import UnsupportedEnvironment, ValidationError, shown

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.messages import ChatMessage as LCChatMessage
except ImportError as e:  # pragma: no cover - depends on the install
    raise UnsupportedEnvironment(
        f'chatmem.integrations.langchain needs langchain-core: pip install "chatmem[langchain]" ({e})'
    ) from e
from ..conversations.sessions import DEFAULT_TITLE
from ..records.models import ChatMessage

if TYPE_CHECKING:
    from ..memory import Memory

__all__ = ["ChatmemChatMessageHistory", "to_chatmem", "from_chatmem"]

T = TypeVar("T")

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_EXTRA = ("additional_kwargs", "response_metadata")


def _content_in(content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [{"type": "text", "text": p} if isinstance(p, str) else dict(p) for p in content]


def to_chatmem(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message as a chatmem message item (``role``, ``content`` and fields)."""
    if not isinstance(message, BaseMessage):
        raise ValidationError(f"expected a LangChain message, got {type(message).__name__}", field="messages")
    kind = message.type
    role = _ROLES.get(kind)
    extra: dict[str, Any] = {k: getattr(message, k) for k in _EXTRA if getattr(message, k, None)}
    if message.id is not None:
        extra["id"] = message.id
    if isinstance(message, LCChatMessage):
        role = message.role if message.role in ("user", "assistant", "system", "tool") else "user"
        extra["chat_role"] = message.role
    if role is None:
        raise ValidationError(f"no chatmem role for a LangChain {shown(kind)} message", field="messages")
    item: dict[str, Any] = {"role": role, "content": _content_in(message.content)}
    if message.name:
        item["name"] = message.name
    if isinstance(message, AIMessage):
        if message.tool_calls:
            item["tool_calls"] = [
                {
                    "id": c.get("id"),
                    "type": "function",
                    "function": {
                        "name": c["name"],
                        "arguments": json.dumps(c.get("args") or {}, separators=(",", ":")),
                    },
                }
                for c in message.tool_calls
            ]
        if message.usage_metadata:
            extra["usage_metadata"] = dict(message.usage_metadata)
        if message.invalid_tool_calls:
            extra["invalid_tool_calls"] = [dict(c) for c in message.invalid_tool_calls]
    if isinstance(message, ToolMessage):
        item["tool_call_id"] = message.tool_call_id
        if message.status != "success":
            extra["status"] = message.status
        if message.artifact is not None:
            extra["artifact"] = message.artifact
    if extra:
        item["metadata"] = {"langchain": extra}
    return item


def from_chatmem(m: ChatMessage) -> BaseMessage:
    """A stored chatmem message as the LangChain message it was (or would be)."""
    extra: dict[str, Any] = dict((m.metadata or {}).get("langchain") or {})
    content: Any = m.content
    common: dict[str, Any] = {k: extra[k] for k in (*_EXTRA, "id") if k in extra}
    if m.name:
        common["name"] = m.name
    if "chat_role" in extra:
        return LCChatMessage(content=content, role=extra["chat_role"], **common)
    if m.role == "user":
        return HumanMessage(content=content, **common)
    if m.role == "system":
        return SystemMessage(content=content, **common)
    if m.role == "tool":
        kw: dict[str, Any] = {k: extra[k] for k in ("status", "artifact") if k in extra}
        return ToolMessage(content=content, tool_call_id=m.tool_call_id or "", **common, **kw)
    calls = []
    for c in m.tool_calls or ():
        fn = c.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except ValueError:
            args = {}
        calls.append({"name": fn.get("name"), "args": args, "id": c.get("id"), "type": "tool_call"})
    ai: dict[str, Any] = {k: extra[k] for k in ("usage_metadata", "invalid_tool_calls") if k in extra}
    return AIMessage(content=content, tool_calls=calls, **common, **ai)


class ChatmemChatMessageHistory(BaseChatMessageHistory):
    """The messages of one chatmem session as a LangChain chat history."""

    def __init__(self, mem: Memory, session_id: str):
        if not isinstance(session_id, str) or not session_id:
            raise ValidationError("session_id must be a non-empty string", field="session_id")
        self.mem = mem
        self.session_id = session_id
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    def __repr__(self) -> str:
        return f"ChatmemChatMessageHistory({self.mem!r}, {self.session_id!r})"

    # ------------------------------------------------------------------ async
    async def aget_messages(self) -> list[BaseMessage]:
        """Every message of the session, oldest first (``[]`` for an unknown session)."""
        if not await self.mem.sessions.exists(self.session_id):
            return []
        return [from_chatmem(m) for m in await self.mem.messages.list(self.session_id, limit=None)]

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append in one transaction (creating the session first if needed). Durable when it returns."""
        items = [to_chatmem(m) for m in messages]
        if not items:
            return
        if not await self.mem.sessions.exists(self.session_id):
            await self.mem.sessions.create(session_id=self.session_id, title=DEFAULT_TITLE)
        await self.mem.messages.append_many(self.session_id, items)

    async def aclear(self) -> None:
        """Delete the session's messages (the session stays). Durable when it returns."""
        if await self.mem.sessions.exists(self.session_id):
            await self.mem.sessions.clear(self.session_id)

    # ------------------------------------------------------------------ sync
    def _run(self, coro: Awaitable[T]) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            close = getattr(coro, "close", None)
            if close is not None:
                close()
            raise UnsupportedEnvironment(
                "ChatmemChatMessageHistory: inside a running event loop use the "
                "async methods (aget_messages, aadd_messages, aclear)"
            )
        if self._loop is not None and self._loop.is_running() and not self._loop.is_closed():
            return asyncio.run_coroutine_threadsafe(coro, self._loop).result()  # type: ignore[arg-type]

        async def main() -> T:
            return await coro

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, main()).result()

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        return self._run(self.aget_messages())

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        self._run(self.aadd_messages(messages))

    def clear(self) -> None:
        self._run(self.aclear())
