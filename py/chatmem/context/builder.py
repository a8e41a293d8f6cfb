"""``mem.build_context``: the provider-ready messages for the next model call.

Order, as the original injects them: the system prompt, the context message
("Module X: {json}" lines from ``mem.context``), the summary of older
history (if any), retrieved older messages (if a retrieval config asks), then
the most recent messages that fit ``max_tokens - reserve_tokens``.

The system prompt is the session's own (a ``system`` message at ``seq`` 0,
the original's ``messages[0]``) unless ``system_prompt=`` overrides it for the
call; either way exactly one system prompt is sent, first, and it is always
kept. It reads only what it needs: the first message, pages of the newest
messages until their stored token counts exceed the budget (and a user
message has been seen), plus the session's latest stored summary message,
whose id is kept in the kv store.

Nothing here writes to the store. ``summarize=`` computes a summary of the
older messages the policy would fold (incrementally, kept in process memory
as derived data) and sends it in their place; the stored conversation is
untouched (``mem.retention.apply_messages`` is the call that rewrites it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

from ..chat.formats import FORMATS, to_anthropic
from ..errors import SessionNotFound, ValidationError
from ..facts.rank import FACTS_SHARE, MAX_FACTS_BUDGET, choose, rank
from ..index.retrieve import RetrievalConfig
from ..records.models import NOT_FOR_MODEL, ChatMessage, for_model
from .providers import LiveContext
from .render import render_context_message
from .summaries import (
    ExtractiveSummarizer,
    MessageRetentionPolicy,
    Summarizer,
    is_summary_message,
    is_system_prompt,
    plan_message_retention,
    summary_key,
    summary_text,
)
from .tokens import EstimateTokenizer, Tokenizer, for_format
from .window import ModelBudget, WindowResult, fit_window, preset

if TYPE_CHECKING:
    from ..stores.shared import Core

__all__ = ["ContextBuilder", "NOT_FOR_MODEL", "Retriever", "for_model", "summary_key"]

#: the context entry the person's facts go into (beside a ``UserProfileProvider``'s settings)
USER_PROFILE = "module:user-profile"

#: ``retriever(session_id, query, config, exclude_ids) -> older messages`` (search plugs in here)
Retriever = Callable[[str, str, Any, set[str]], Awaitable[list[ChatMessage]]]

PAGE = 200


def resolve_budget(
    budget: ModelBudget | str | int | None, max_tokens: int | None, reserve_tokens: int
) -> tuple[int, int]:
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
    """Builds windows from the store; ``retriever`` serves retrieval strategies other
    than ``recent`` (optional). ``summarize=`` summaries are computed, never stored."""

    def __init__(
        self,
        core: Core,
        context: LiveContext,
        tokenizer: Tokenizer | None = None,
        *,
        retriever: Retriever | None = None,
    ):
        self._core = core
        self.context = context
        self.tokenizer: Tokenizer = tokenizer or EstimateTokenizer()
        self.retriever = retriever
        #: computed summaries (derived data, process memory): session id -> (summarizer, ids covered, text)
        self._summaries: dict[str, tuple[Any, tuple[str, ...], str]] = {}
        self._default_summarizer = ExtractiveSummarizer()

    async def system_prompt(self, session_id: str) -> ChatMessage | None:
        """The session's stored system prompt (a ``system`` message at ``seq`` 0), if any."""
        page = await self._core.store.list_messages(session_id, 0, 1, False)
        if page:
            m = ChatMessage.from_record(page[0])
            if is_system_prompt(m):
                return m
        return None

    async def _recent(self, session_id: str, budget: int, tk: Tokenizer, skip: set[str]) -> list[ChatMessage]:
        """Newest messages (oldest first) covering at least ``budget`` tokens and one user message."""
        store = self._core.store
        out: list[ChatMessage] = []
        tokens, offset, seen_user = 0, 0, False
        while True:
            page = await store.list_messages(session_id, offset, PAGE, True)
            for rec in page:
                m = ChatMessage.from_record(rec)
                if is_summary_message(m) or m.id in skip or is_system_prompt(m) or not for_model(m):
                    continue
                out.append(m)
                tokens += tk.count_message(m)
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
        system_prompt: str | None = None,
        max_tokens: int | None = None,
        reserve_tokens: int = 0,
        budget: ModelBudget | str | int | None = None,
        retrieval: RetrievalConfig | None = None,
        summarize: Summarizer | MessageRetentionPolicy | bool | None = None,
        query: str | None = None,
        format: str = "openai",
        message_overhead: int | None = None,
        facts: bool = True,
        facts_budget: int | None = None,
    ) -> WindowResult:
        """Like ``build_context`` but returns the whole ``WindowResult`` (what was kept, dropped, summarized).

        ``facts``: the active facts of the session's user (known to its character) go into
        the ``module:user-profile`` context entry, best first (``chatmem.facts.rank``), within
        ``facts_budget`` tokens (default: a tenth of the window, at most 300); ``facts=False``
        leaves them out. ``WindowResult.facts`` lists the ones sent, with their scores."""
        if not isinstance(facts, bool):
            raise ValidationError("facts must be true or false", field="facts")
        if facts_budget is not None and (
            not isinstance(facts_budget, int) or isinstance(facts_budget, bool) or facts_budget < 0
        ):
            raise ValidationError("facts_budget must be a number of tokens (0 or more)", field="facts_budget")
        max_tokens, reserve_tokens = resolve_budget(budget, max_tokens, reserve_tokens)
        if format not in FORMATS:
            raise ValidationError(f"format must be one of {FORMATS}", field="format")
        if retrieval is not None and not isinstance(retrieval, RetrievalConfig):
            raise ValidationError("retrieval must be a RetrievalConfig or None", field="retrieval")
        tk = for_format(self.tokenizer, format, message_overhead)
        meta = await self._core.store.get_session(session_id)
        if meta is None:
            raise SessionNotFound(session_id)
        stored_prompt = await self.system_prompt(session_id)
        if system_prompt is None and stored_prompt is not None:
            system_prompt = stored_prompt.text
        summary: str | ChatMessage | None = await self._summary(session_id)
        folded: set[str] = set()
        if summarize:
            computed = await self._summarize(
                session_id, summarize, summary if isinstance(summary, ChatMessage) else None
            )
            if computed is not None:
                summary, folded = computed
        await self.context.refresh()
        snapshot = self.context.snapshot()
        recent = await self._recent(session_id, max_tokens - reserve_tokens, tk, folded)
        sent: list[dict[str, Any]] = []
        if facts:
            share = min(MAX_FACTS_BUDGET, int((max_tokens - reserve_tokens) * FACTS_SHARE))
            newest = (
                query
                if query is not None
                else next((m.text for m in reversed(recent) if m.role == "user"), "")
            )
            sent = await self._facts(meta, newest, share if facts_budget is None else facts_budget, tk.count)
            if sent:
                profile = snapshot.get(USER_PROFILE)
                lines = [f["text"] for f in sent]
                snapshot[USER_PROFILE] = (
                    dict(profile, facts=lines) if isinstance(profile, dict) else {"facts": lines}
                )
        ctx = render_context_message(snapshot)
        if retrieval is not None and retrieval.strategy == "recent":
            count = retrieval.recent_count
            if isinstance(count, int) and count >= 0:
                recent = _last_n_keeping_user(recent, count)
        retrieved: list[ChatMessage] = []
        # ``recent`` retrieves only when its scope reaches other sessions (their relevant messages)
        if retrieval is not None and (retrieval.strategy != "recent" or retrieval.scope != "session"):
            if self.retriever is None:
                raise ValidationError(
                    "retrieval strategy needs the search index; only 'recent' works without it",
                    field="retrieval",
                )
            if query is None:
                query = next((m.text for m in reversed(recent) if m.role == "user"), "")
            if query.strip():
                # the window sends a message once even if it is both retrieved and recent
                skip = set(folded) | ({stored_prompt.id} if stored_prompt else set())
                retrieved = [
                    m
                    for m in await self.retriever(session_id, query, retrieval, skip)
                    if m.id not in skip and for_model(m)
                ]
        result = fit_window(
            system_prompt,
            ctx,
            summary,
            retrieved,
            recent,
            max_tokens=max_tokens,
            reserve_tokens=reserve_tokens,
            tokenizer=tk,
        )
        result.facts = [] if "context" in result.dropped_parts else sent
        return result

    async def _facts(
        self, meta: dict[str, Any], query: str, budget: int, count: Callable[[str], int]
    ) -> list[dict[str, Any]]:
        """The active facts of the session's user known to its character, best first, within ``budget``."""
        if budget <= 0:
            return []
        character = meta.get("characterId")
        held = [
            r
            for r in await self._core.store.list_facts(meta.get("userId") or "local")
            if r.get("status") == "active" and r.get("characterId") in (None, character)
        ]
        return choose(rank(held, query, self._core.now()), budget, count) if held else []

    async def build_context(self, session_id: str, **kw: Any) -> list[dict[str, Any]] | dict[str, Any]:
        messages = (await self.build_window(session_id, **kw)).messages
        return to_anthropic(messages) if kw.get("format") == "anthropic" else messages

    async def _summarize(
        self,
        session_id: str,
        summarize: Summarizer | MessageRetentionPolicy | bool,
        stored: ChatMessage | None,
    ) -> tuple[str, set[str]] | None:
        """The summary the message-level policy would store, computed without storing it:
        ``(text, ids it covers)``, or ``None`` while the session is within its cap."""
        policy = summarize if isinstance(summarize, MessageRetentionPolicy) else MessageRetentionPolicy()
        summarizer: Any = summarize if hasattr(summarize, "summarize") else self._default_summarizer
        store = self._core.store
        if await store.count_messages(session_id) <= policy.max_messages_per_session:
            return None
        records = await store.list_messages(session_id, 0, None, False)
        plan = plan_message_retention(records, policy)
        if not plan.summarize:
            return None
        ids = tuple(plan.summarize)
        by_id = {r["id"]: ChatMessage.from_record(r) for r in records}
        cached = self._summaries.get(session_id)
        previous: str | None
        if cached is not None and cached[0] is summarizer and ids[: len(cached[1])] == cached[1]:
            new, previous = ids[len(cached[1]) :], cached[2]
        else:
            new, previous = ids, (summary_text(stored) if stored is not None else None)
        text: str = previous or ""
        if new:
            text = str(await summarizer.summarize([by_id[i] for i in new], previous_summary=previous))
        self._summaries[session_id] = (summarizer, ids, text)
        if not text:
            return None
        return text, set(ids) | {m.id for m in by_id.values() if is_summary_message(m)}


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
