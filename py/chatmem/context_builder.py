"""``mem.build_context``: the provider-ready messages for the next model call.

Order, as the original injects them: the system prompt, the context message
("Module X: {json}" lines from ``mem.context``), the stored summary of older
history (if any), retrieved older messages (if a retrieval config asks), then
the most recent messages that fit ``max_tokens - reserve_tokens``.

It reads only what it needs: pages of the newest messages until their stored
token counts exceed the budget (and a user message has been seen), plus the
session's latest summary message, whose id is kept in the kv store.
Nothing here writes, except ``summarize=`` which first applies the
message-level retention policy (storing a new summary, incrementally).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

from .errors import SessionNotFound, ValidationError
from .live_context import ContextManager
from .models import ChatMessage
from .retention import MessageRetentionPolicy, Retention, summary_key
from .summarize import ExtractiveSummarizer, Summarizer, is_summary_message
from .token_count import EstimateTokenizer, Tokenizer
from .window import ModelBudget, WindowResult, fit_window, preset

if TYPE_CHECKING:
    from .core import Core

__all__ = ["ContextBuilder", "summary_key", "Retriever"]

#: ``retriever(session_id, query, config, exclude_ids) -> older messages`` (search plugs in here)
Retriever = Callable[[str, str, Any, set[str]], Awaitable[list[ChatMessage]]]

PAGE = 200


def resolve_budget(budget: ModelBudget | str | int | None, max_tokens: int | None, reserve_tokens: int) -> tuple[int, int]:
    if isinstance(budget, str):
        budget = preset(budget)
    if isinstance(budget, ModelBudget):
        return budget.max_tokens, budget.reserve_tokens
    if isinstance(budget, int) and not isinstance(budget, bool):
        return budget, reserve_tokens
    if max_tokens is None:
        raise ValidationError("give max_tokens (or a budget preset)", field="max_tokens")
    return max_tokens, reserve_tokens


class ContextBuilder:
    """Builds windows from the store; ``retention`` applies ``summarize=``, ``retriever``
    serves retrieval strategies other than ``recent`` (both optional)."""

    def __init__(
        self,
        core: Core,
        context: ContextManager,
        tokenizer: Tokenizer | None = None,
        *,
        retention: Retention | None = None,
        retriever: Retriever | None = None,
    ):
        self._core = core
        self.context = context
        self.tokenizer: Tokenizer = tokenizer or EstimateTokenizer()
        self.retriever = retriever
        self.retention = retention

    async def _recent(self, session_id: str, budget: int) -> list[ChatMessage]:
        """Newest messages (oldest first) covering at least ``budget`` tokens and one user message."""
        store = self._core.store
        out: list[ChatMessage] = []
        tokens, offset, seen_user = 0, 0, False
        while True:
            page = await store.list_messages(session_id, offset, PAGE, True)
            for rec in page:
                m = ChatMessage.from_record(rec)
                if is_summary_message(m):
                    continue
                out.append(m)
                tokens += self.tokenizer.count_message(m)
                seen_user = seen_user or m.role == "user"
            offset += len(page)
            # one page past the budget keeps tool groups at the edge whole
            if len(page) < PAGE or (tokens > budget * 2 and seen_user):
                break
        out.reverse()
        return out

    async def _summary(self, session_id: str) -> ChatMessage | None:
        mid = await self._core.store.kv_get(summary_key(session_id))
        if not mid:
            return None
        rec = await self._core.store.get_message(mid)
        return ChatMessage.from_record(rec) if rec else None

    async def build_window(
        self,
        session_id: str,
        *,
        system_prompt: str | None,
        max_tokens: int | None = None,
        reserve_tokens: int = 0,
        budget: ModelBudget | str | int | None = None,
        retrieval: Any = None,
        summarize: Summarizer | MessageRetentionPolicy | bool | None = None,
        query: str | None = None,
    ) -> WindowResult:
        """Like ``build_context`` but returns the whole ``WindowResult`` (what was kept, dropped, summarized)."""
        max_tokens, reserve_tokens = resolve_budget(budget, max_tokens, reserve_tokens)
        if await self._core.store.get_session(session_id) is None:
            raise SessionNotFound(session_id)
        if summarize:
            await self._summarize(session_id, summarize)
        await self.context.refresh()
        ctx = self.context.render()
        recent = await self._recent(session_id, max_tokens - reserve_tokens)
        if retrieval is not None and getattr(retrieval, "strategy", "recent") == "recent":
            count = getattr(retrieval, "recent_count", None)
            if isinstance(count, int) and count >= 0:
                recent = _last_n_keeping_user(recent, count)
        retrieved: list[ChatMessage] = []
        if retrieval is not None and getattr(retrieval, "strategy", "recent") != "recent":
            if self.retriever is None:
                raise ValidationError(
                    "retrieval strategy needs the search index; only 'recent' works without it",
                    field="retrieval")
            if query is None:
                query = next((m.text for m in reversed(recent) if m.role == "user"), "")
            if query.strip():
                # the window sends a message once even if it is both retrieved and recent
                retrieved = await self.retriever(session_id, query, retrieval, set())
        summary = await self._summary(session_id)
        return fit_window(
            system_prompt, ctx, summary, retrieved, recent,
            max_tokens=max_tokens, reserve_tokens=reserve_tokens, tokenizer=self.tokenizer,
        )

    async def build_context(self, session_id: str, **kw: Any) -> list[dict[str, Any]]:
        return (await self.build_window(session_id, **kw)).messages

    async def _summarize(self, session_id: str, summarize: Summarizer | MessageRetentionPolicy | bool) -> None:
        """Apply the message-level policy when the session has outgrown its cap."""
        if self.retention is None:
            return
        policy = summarize if isinstance(summarize, MessageRetentionPolicy) else MessageRetentionPolicy()
        summarizer = summarize if hasattr(summarize, "summarize") else ExtractiveSummarizer()
        count = await self._core.store.count_messages(session_id)
        if count > policy.max_messages_per_session:
            await self.retention.apply_messages(session_id, policy, summarizer=summarizer)


def _last_n_keeping_user(msgs: Sequence[ChatMessage], n: int) -> list[ChatMessage]:
    """The original's ``recent`` strategy: the last ``n`` messages (never dropping the newest user one)."""
    tail = list(msgs[-n:]) if n else []
    if not any(m.role == "user" for m in tail):
        last_user = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].role == "user"), None)
        if last_user is not None:
            tail = list(msgs[last_user:])
    # never start on tool results whose call was cut off
    while tail and tail[0].role == "tool":
        tail.pop(0)
    return tail
