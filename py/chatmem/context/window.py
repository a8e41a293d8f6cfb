"""The context window: which messages go to the model, within its token budget.

``fit_window`` is pure: it reads nothing and writes nothing. It returns
provider-ready message dicts in the original's order::

    system prompt, context message, summary, retrieved older messages, recent messages

Guarantees (each one tested by property tests in ``tests/unit/test_window.py``):

* the total, as counted by the tokenizer, never exceeds ``max_tokens - reserve_tokens``;
* the system prompt is always kept;
* the newest ``user`` message is always kept; when even the system prompt plus
  that message do not fit, ``ContextOverflow`` (a ``ValidationError``) is raised;
* an assistant message with tool calls (``tool_calls``, or ``tool-call``
  slices) and the ``tool`` messages answering it are kept together or dropped
  together; a ``tool`` message whose call is not in the input is never sent;
* messages keep their relative order.

How the budget is spent, in this order of precedence (so, when space is
short, the parts are given up from the bottom of this list upwards; a part
that does not fit is skipped, and a later, smaller part may still use what
is left):

1. system prompt and newest user message (mandatory);
2. the context message (live module state: small, and about *now*);
3. the summary of older history;
4. retrieved older messages, in the order given (most relevant first), each
   tool group whole; one that does not fit is skipped, the next may still
   fit; at most ``retrieved_max_tokens`` in all when given;
5. recent messages, walking from the newest end (the original's
   ``pruneMessages``): a message (or tool group) that does not fit ends the
   walk, so recent history is always a contiguous tail (plus the newest user
   message, which is kept even when the walk stopped after it).

A retrieved message that also ends up among the recent messages is sent only
once, in its recent place; the tokens it freed go to the recent walk.

The walk only visits messages from the newest end until the budget is spent,
and for the default tokenizer it uses each stored ``token_count``: a window of
an 8k budget over a 10,000-message session costs well under a millisecond.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import ContextOverflow, ValidationError, shown
from ..records.models import ChatMessage
from .summaries import SUMMARY_PREFIX
from .tokens import EstimateTokenizer, Tokenizer

__all__ = [
    "ModelBudget",
    "PRESETS",
    "preset",
    "WindowResult",
    "fit_window",
    "tool_call_ids",
]

MessageLike = ChatMessage | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ModelBudget:
    """A model's context size and the tokens reserved for its answer."""

    name: str
    max_tokens: int
    reserve_tokens: int

    @property
    def budget(self) -> int:
        """Tokens available for the prompt: ``max_tokens - reserve_tokens``."""
        return self.max_tokens - self.reserve_tokens


#: the original's defaults ("GPT-4o: 120k tokens, 8k for the response"; "Claude
#: 3.5: 180k, 20k for the response"; "local models: typically 4k-8k"; for
#: those we reserve an eighth for the answer).
PRESETS: dict[str, ModelBudget] = {
    "gpt-4o": ModelBudget("gpt-4o", 120_000, 8_000),
    "claude-3.5": ModelBudget("claude-3.5", 180_000, 20_000),
    "local-4k": ModelBudget("local-4k", 4_096, 512),
    "local-8k": ModelBudget("local-8k", 8_192, 1_024),
}


def preset(name: str) -> ModelBudget:
    """The named preset; ``ValidationError`` for an unknown name."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValidationError(
            f"unknown model budget {shown(name)}; known: {sorted(PRESETS)}", field="name"
        ) from None


@dataclass
class WindowResult:
    """What ``fit_window`` chose, with enough detail for a UI to show it."""

    #: provider-ready message dicts, in order
    messages: list[dict[str, Any]]
    #: tokens of ``messages`` as counted by the tokenizer
    tokens: int
    #: ``max_tokens - reserve_tokens``
    budget: int
    #: tokens per part: system, context, summary, retrieved, recent
    parts: dict[str, int]
    #: ids of the recent messages kept, oldest first
    kept_ids: list[str]
    #: ids of the retrieved messages sent (in the order sent)
    retrieved_ids: list[str]
    #: ids of retrieved messages that did not fit (or were already recent)
    dropped_retrieved_ids: list[str]
    #: optional parts given up for lack of space: "context", "summary", "retrieved"
    dropped_parts: list[str]
    #: id of the stored summary message used (None for a plain-text summary or none)
    summary_id: str | None = None
    #: what the summary covers, from its ``metadata["summaryOf"]`` when stored
    summary_covers: Any = None
    #: the facts sent in the context entry, best first: ``{"fact_id", "text", "score",
    #: "parts", "pinned"}`` each (``chatmem.facts.rank``)
    facts: list[dict[str, Any]] = field(default_factory=list)
    _recent: Sequence[MessageLike] = field(default=(), repr=False)
    _kept: frozenset[int] = field(default=frozenset(), repr=False)

    @property
    def dropped_ids(self) -> list[str]:
        """Ids of the recent messages not sent, oldest first (computed on demand)."""
        return [_id(m) for i, m in enumerate(self._recent) if i not in self._kept]

    @property
    def dropped_count(self) -> int:
        return len(self._recent) - len(self._kept)


# ------------------------------------------------------------------ message access


def _msg(m: MessageLike) -> ChatMessage:
    if isinstance(m, ChatMessage):
        return m
    if isinstance(m, Mapping):
        return ChatMessage.from_record(m)
    raise ValidationError(
        f"expected a ChatMessage or a message record, got {type(m).__name__}", field="messages"
    )


def _id(m: MessageLike) -> str:
    return m.id if isinstance(m, ChatMessage) else m["id"]


def _role(m: MessageLike) -> str:
    return m.role if isinstance(m, ChatMessage) else m["role"]


def tool_call_ids(m: ChatMessage) -> set[str | None] | None:
    """The ids of the tool calls an assistant message makes, or ``None`` when it
    makes none. A call without an id is represented by ``None`` in the set."""
    if m.role != "assistant":
        return None
    ids: set[str | None] = set()
    found = False
    for call in m.tool_calls or ():
        found = True
        ids.add(call.get("id"))
    for s in m.slices or ():
        if s.get("type") == "tool-call":
            found = True
            inner: Mapping[str, Any] = s["toolCall"] if isinstance(s.get("toolCall"), Mapping) else {}
            ids.add(s.get("toolCallId") or s.get("id") or inner.get("toolCallId") or inner.get("id"))
    return ids if found else None


# ------------------------------------------------------------------ recent walk


class _Walk:
    """Resumable newest-to-oldest walk over the recent messages."""

    __slots__ = ("msgs", "tk", "u", "i", "used", "kept", "pending", "_cache")

    def __init__(self, msgs: Sequence[MessageLike], tk: Tokenizer, u: int | None):
        self.msgs = msgs
        self.tk = tk
        self.u = u
        self.i = len(msgs) - 1
        self.used = 0  # tokens of kept messages other than the newest user message
        self.kept: set[int] = {u} if u is not None else set()
        #: tool messages seen but not yet claimed: (index, call id, tokens)
        self.pending: list[tuple[int, str | None, int]] = []
        self._cache: dict[int, ChatMessage] = {}

    def get(self, i: int) -> ChatMessage:
        m = self._cache.get(i)
        if m is None:
            m = self._cache[i] = _msg(self.msgs[i])
        return m

    def extend(self, limit: int) -> None:
        """Keep walking while the next message (or group) fits in ``limit``."""
        tk = self.tk
        while self.i >= 0:
            i = self.i
            if i == self.u:
                self.kept.add(i)
                self.i -= 1
                continue
            m = self.get(i)
            if m.role == "tool":
                self.pending.append((i, m.tool_call_id, tk.count_message(m)))
                self.i -= 1
                continue
            cost = tk.count_message(m)
            calls = tool_call_ids(m)
            claimed: list[int] = []
            if calls is not None and self.pending:
                for j, (_idx, cid, t) in enumerate(self.pending):
                    if cid is None or cid in calls:
                        claimed.append(j)
                        cost += t
            if self.used + cost > limit:
                return
            self.used += cost
            self.kept.add(i)
            for j in reversed(claimed):
                self.kept.add(self.pending.pop(j)[0])
            self.i -= 1


# ------------------------------------------------------------------ retrieved groups


def _groups(msgs: Sequence[ChatMessage]) -> tuple[list[list[int]], list[int]]:
    """Split retrieved messages into groups (a tool-calling assistant with the
    tool messages answering it, or a single message); returns the groups in
    order of their first member and the indices of orphan tool messages."""
    groups: list[list[int]] = []
    owner: list[tuple[set[str | None], int]] = []  # (call ids, group index), newest last
    orphans: list[int] = []
    for i, m in enumerate(msgs):
        if m.role == "tool":
            for calls, g in reversed(owner):
                if m.tool_call_id is None or m.tool_call_id in calls:
                    groups[g].append(i)
                    break
            else:
                orphans.append(i)
            continue
        groups.append([i])
        made = tool_call_ids(m)
        if made is not None:
            owner.append((made, len(groups) - 1))
    return groups, orphans


def _check_int(v: Any, name: str, minimum: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValidationError(f"{name} must be an int >= {minimum}", field=name)


_DEFAULT_TOKENIZER = EstimateTokenizer()


def fit_window(
    system_prompt: str | None,
    context_message: Mapping[str, Any] | None,
    summary: str | MessageLike | None,
    retrieved: Sequence[MessageLike] | None,
    recent_messages: Sequence[MessageLike],
    *,
    max_tokens: int,
    reserve_tokens: int = 0,
    tokenizer: Tokenizer | None = None,
    retrieved_max_tokens: int | None = None,
) -> WindowResult:
    """Fit a prompt into ``max_tokens - reserve_tokens`` (see the module docstring).

    ``recent_messages`` are the session's messages in ``seq`` order (oldest
    first; ``ChatMessage`` objects or stored records); ``retrieved`` are older
    messages chosen by a retrieval strategy; ``summary`` is the summary text
    (sent as a system message ``"Previous conversation summary: ..."``) or the
    stored summary message itself; ``context_message`` is the output of
    ``render_context_message``.
    """
    _check_int(max_tokens, "max_tokens", 1)
    _check_int(reserve_tokens, "reserve_tokens", 0)
    if retrieved_max_tokens is not None:
        _check_int(retrieved_max_tokens, "retrieved_max_tokens", 0)
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise ValidationError("system_prompt must be a string or None", field="system_prompt")
    budget = max_tokens - reserve_tokens
    if budget <= 0:
        raise ValidationError("reserve_tokens must be smaller than max_tokens", field="reserve_tokens")
    tk = tokenizer if tokenizer is not None else _DEFAULT_TOKENIZER

    # 1. mandatory: system prompt + newest user message
    sys_msg = {"role": "system", "content": system_prompt} if system_prompt is not None else None
    sys_t = tk.count_message(sys_msg) if sys_msg else 0
    u = next(
        (i for i in range(len(recent_messages) - 1, -1, -1) if _role(recent_messages[i]) == "user"), None
    )
    walk = _Walk(recent_messages, tk, u)
    u_t = tk.count_message(walk.get(u)) if u is not None else 0
    if sys_t + u_t > budget:
        raise ContextOverflow(sys_t + u_t, budget)
    left = budget - sys_t - u_t
    dropped_parts: list[str] = []

    # 2. context message
    ctx_msg = dict(context_message) if context_message else None
    ctx_t = 0
    if ctx_msg is not None:
        ctx_t = tk.count_message(ctx_msg)
        if ctx_t > left:
            ctx_msg, ctx_t = None, 0
            dropped_parts.append("context")
        left -= ctx_t

    # 3. summary
    sum_msg: dict[str, Any] | None = None
    summary_id = summary_covers = None
    if summary is not None and summary != "":
        if isinstance(summary, str):
            sum_msg = {"role": "system", "content": SUMMARY_PREFIX + summary}
        else:
            sm = _msg(summary)
            sum_msg = sm.to_provider()
            summary_id = sm.id
            summary_covers = (sm.metadata or {}).get("summaryOf")
        sum_t = tk.count_message(sum_msg)
        if sum_t > left:
            sum_msg, sum_t, summary_id, summary_covers = None, 0, None, None
            dropped_parts.append("summary")
        left -= sum_t
    else:
        sum_t = 0

    # 4. retrieved groups, most relevant first
    ret_msgs = [_msg(m) for m in (retrieved or ())]
    groups, orphans = _groups(ret_msgs)
    cap = left if retrieved_max_tokens is None else min(left, retrieved_max_tokens)
    admitted: list[tuple[list[int], int]] = []
    ret_t = 0
    refused = False
    for g in groups:
        t = sum(tk.count_message(ret_msgs[j]) for j in g)
        if ret_t + t <= cap:
            admitted.append((g, t))
            ret_t += t
        else:
            refused = True
    if refused or orphans:
        dropped_parts.append("retrieved")

    # 5. recent tail; retrieved messages that end up recent are sent once
    walk.extend(left - ret_t)
    while admitted:
        recent_ids = {_id(recent_messages[k]) for k in walk.kept}
        dup = [(g, t) for g, t in admitted if any(ret_msgs[j].id in recent_ids for j in g)]
        if not dup:
            break
        admitted = [a for a in admitted if a not in dup]
        ret_t -= sum(t for _, t in dup)
        walk.extend(left - ret_t)

    # assemble
    kept = sorted(walk.kept)
    out: list[dict[str, Any]] = []
    if sys_msg:
        out.append(sys_msg)
    if ctx_msg:
        out.append(ctx_msg)
    if sum_msg:
        out.append(sum_msg)
    sent_ret = sorted(j for g, _ in admitted for j in g)
    out.extend(ret_msgs[j].to_provider() for j in sent_ret)
    out.extend(walk.get(k).to_provider() for k in kept)
    sent_set = set(sent_ret)
    recent_t = walk.used + u_t
    return WindowResult(
        messages=out,
        tokens=sys_t + ctx_t + sum_t + ret_t + recent_t,
        budget=budget,
        parts={"system": sys_t, "context": ctx_t, "summary": sum_t, "retrieved": ret_t, "recent": recent_t},
        kept_ids=[_id(recent_messages[k]) for k in kept],
        retrieved_ids=[ret_msgs[j].id for j in sent_ret],
        dropped_retrieved_ids=[m.id for j, m in enumerate(ret_msgs) if j not in sent_set],
        dropped_parts=dropped_parts,
        summary_id=summary_id,
        summary_covers=summary_covers,
        _recent=recent_messages,
        _kept=frozenset(kept),
    )
