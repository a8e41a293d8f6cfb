"""Summaries of older history (the original's "Context Summarization").

A ``Summarizer`` turns messages (plus the previous summary, if any) into a
short text. Summaries are incremental: the caller passes only the messages
not yet summarized and the previous summary, which is folded in, so history
is never re-summarized from the start.

* ``LLMSummarizer`` asks a model through a ``ChatProvider`` with the
  original's prompt (``Summarize this conversation concisely:`` followed by
  ``role: content`` lines; the previous summary, when there is one, comes
  first as a ``Previous conversation summary: ...`` line).
* ``ExtractiveSummarizer`` needs no model: it keeps the most informative
  sentences (word-frequency scoring), in their original order, within a
  character bound, folding the previous summary's lines in as candidates.

Nothing here writes: storing the summary message is the caller's job (see
``summary_message_fields``). A stored summary message is a
``system`` message whose content is ``SUMMARY_PREFIX + text`` and whose
``metadata`` holds ``{"summary": true, "summaryOf": {...}}``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Protocol, Sequence, runtime_checkable

from ..chat.providers import ChatProvider
from ..errors import ChatmemError, ValidationError
from ..records.models import ChatMessage
from ..records.validation import check_nonneg_int

__all__ = [
    "SUMMARY_PREFIX",
    "SUMMARY_PROMPT",
    "ChatProvider",
    "Summarizer",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "is_summary_message",
    "is_system_prompt",
    "summary_text",
    "build_summary_prompt",
    "MessageRetentionPolicy",
    "MessagePlan",
    "plan_message_retention",
    "summary_message_fields",
    "summary_key",
]

#: how a summary is shown to the model (the original's summary message)
SUMMARY_PREFIX = "Previous conversation summary: "
#: the original's summarization prompt (first line)
SUMMARY_PROMPT = "Summarize this conversation concisely:"


@runtime_checkable
class Summarizer(Protocol):
    """Folds messages (and the previous summary, if any) into one short text."""

    async def summarize(
        self, messages: Sequence[ChatMessage], previous_summary: str | None = None
    ) -> str: ...


def _as_message(m: ChatMessage | Mapping[str, Any]) -> ChatMessage:
    if isinstance(m, ChatMessage):
        return m
    if isinstance(m, Mapping):
        return ChatMessage.from_record(m)
    raise ValidationError(f"expected a ChatMessage or a record, got {type(m).__name__}", field="messages")


def is_summary_message(m: ChatMessage | Mapping[str, Any]) -> bool:
    """True for a stored summary message (``metadata["summary"]`` is true)."""
    meta = m.metadata if isinstance(m, ChatMessage) else m.get("metadata")
    return bool(isinstance(meta, Mapping) and meta.get("summary"))


def is_system_prompt(m: ChatMessage | Mapping[str, Any]) -> bool:
    """True for a session's system prompt: a ``system`` message at ``seq`` 0 (not a summary).
    It is always sent, never summarized and never removed by retention."""
    msg = _as_message(m)
    return msg.seq == 0 and msg.role == "system" and not is_summary_message(msg)


def summary_text(m: ChatMessage | Mapping[str, Any]) -> str:
    """The summary text of a stored summary message (without ``SUMMARY_PREFIX``)."""
    text = _as_message(m).text
    return text[len(SUMMARY_PREFIX) :] if text.startswith(SUMMARY_PREFIX) else text


def build_summary_prompt(messages: Sequence[ChatMessage], previous_summary: str | None = None) -> str:
    """``Summarize this conversation concisely:\\n`` + ``role: content`` lines."""
    lines = [SUMMARY_PROMPT]
    if previous_summary:
        lines.append(SUMMARY_PREFIX + previous_summary)
    for m in messages:
        m = _as_message(m)
        lines.append(f"{m.role}: {m.text}")
    return "\n".join(lines)


class LLMSummarizer:
    """Summaries written by a model (default ``gpt-4o-mini``, as the original)."""

    def __init__(self, provider: ChatProvider, model: str | None = "gpt-4o-mini", **options: Any):
        if not callable(getattr(provider, "complete", None)):
            raise ValidationError(
                "provider needs an async complete(messages, *, model=None)", field="provider"
            )
        self.provider = provider
        self.model = model
        self.options = options

    async def summarize(self, messages: Sequence[ChatMessage], previous_summary: str | None = None) -> str:
        if not messages:
            return previous_summary or ""
        prompt = build_summary_prompt(messages, previous_summary)
        out = await self.provider.complete(
            [{"role": "user", "content": prompt}], model=self.model, **self.options
        )
        text = (out or "").strip()
        if not text:
            raise ChatmemError("the summarizer model returned an empty summary; nothing was summarized")
        return text


_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)
_STOP = frozenset(
    """a an the and or but if then so of to in on at by for with from as is are was were be been
    being it its this that these those i you he she we they me him her us them my your our their
    do does did have has had not no yes can could would should will shall may might must just
    about into than too very also what which who whom how when where why there here all any some
    ok okay please thanks thank hi hello hey im i'm it's don't""".split()
)


class ExtractiveSummarizer:
    """Offline summaries: the most informative sentences, at most ``max_chars``.

    Each sentence is scored by the summed frequency (across the batch and the
    previous summary) of its content words, divided by the square root of its
    word count; lines of the previous summary get a ``carry_weight`` bonus so
    that established facts are not pushed out by chatter. The chosen lines
    keep their order (previous summary first), each as ``role: sentence``.
    """

    def __init__(self, max_chars: int = 1200, *, max_sentence_chars: int = 300, carry_weight: float = 1.5):
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 20:
            raise ValidationError("max_chars must be an int >= 20", field="max_chars")
        self.max_chars = max_chars
        self.max_sentence_chars = max(10, min(max_sentence_chars, max_chars))
        self.carry_weight = carry_weight

    def _clip(self, s: str) -> str:
        return s if len(s) <= self.max_sentence_chars else s[: self.max_sentence_chars - 1].rstrip() + "…"

    async def summarize(self, messages: Sequence[ChatMessage], previous_summary: str | None = None) -> str:
        return self.summarize_sync(messages, previous_summary)

    def summarize_sync(self, messages: Sequence[ChatMessage], previous_summary: str | None = None) -> str:
        """The same, without the event loop (it does no I/O)."""
        cands: list[tuple[str, list[str], float]] = []  # (line, content words, weight)
        seen: set[str] = set()

        def add(line: str, body: str, weight: float) -> None:
            key = " ".join(body.lower().split())
            if not key or key in seen:
                return
            words = [w for w in _WORD.findall(body.lower()) if w not in _STOP]
            if not words:
                return
            seen.add(key)
            cands.append((self._clip(line), words, weight))

        for line in (previous_summary or "").splitlines():
            line = line.strip()
            if line:
                body = line.split(": ", 1)[1] if re.match(r"^(user|assistant|system|tool): ", line) else line
                add(line, body, self.carry_weight)
        for m in messages:
            m = _as_message(m)
            if is_summary_message(m):
                continue
            for sent in _SENTENCE_SPLIT.split(m.text):
                sent = sent.strip()
                if sent:
                    add(f"{m.role}: {sent}", sent, 1.1 if m.role == "user" else 1.0)
        if not cands:
            return (previous_summary or "")[: self.max_chars]
        freq = Counter(w for _, words, _ in cands for w in set(words))
        scored = []
        for pos, (line, words, weight) in enumerate(cands):
            uniq = set(words)
            score = weight * sum(freq[w] for w in uniq) / math.sqrt(len(words))
            if any(ch.isdigit() for ch in line):
                score *= 1.2  # numbers, dates, amounts are usually worth keeping
            scored.append((score, pos))
        scored.sort(key=lambda t: (-t[0], t[1]))
        chosen: list[int] = []
        size = 0
        for _, pos in scored:
            n = len(cands[pos][0]) + (1 if chosen else 0)
            if size + n <= self.max_chars:
                chosen.append(pos)
                size += n
        return "\n".join(cands[p][0] for p in sorted(chosen))


# ---------------------------------------------------------------------- what a summary replaces


def summary_key(session_id: str) -> str:
    """kv key holding the id of the session's latest summary message."""
    return f"summary.{session_id}"


@dataclass(frozen=True, slots=True)
class MessageRetentionPolicy:
    """The original's ``MessageRetentionPolicy`` with its defaults.

    ``archive_originals`` (not in the original) says what happens to the
    messages a summary replaces: archived (kept in the store, hidden from
    windows) when true, deleted when false.
    """

    keep_system_messages: bool = True
    max_messages_per_session: int = 200
    summarize_old: bool = True
    summary_threshold: int = 50
    archive_originals: bool = True

    def __post_init__(self) -> None:
        check_nonneg_int(self.max_messages_per_session, "max_messages_per_session")
        check_nonneg_int(self.summary_threshold, "summary_threshold")
        for name in ("keep_system_messages", "summarize_old", "archive_originals"):
            if not isinstance(getattr(self, name), bool):
                raise ValidationError(f"{name} must be a bool", field=name)


@dataclass(slots=True)
class MessagePlan:
    """What to do with one session's messages.

    * ``summarize``: ids of the messages to fold into one new summary (oldest
      first); empty when no summary is due.
    * ``previous_summary_id``: the newest existing summary message, whose text
      is passed to the summarizer as ``previous_summary``.
    * ``remove``: ids to archive or delete once the summary is stored (the
      summarized messages and the summaries the new one supersedes; or, with
      ``summarize_old`` off, the messages beyond the cap).
    * ``action``: ``"archive"`` or ``"delete"`` for ``remove``.
    * ``covers``: ``{"fromSeq", "toSeq", "count"}`` of the summarized range.
    * ``keep``: ids left in place.
    """

    summarize: list[str] = field(default_factory=list)
    previous_summary_id: str | None = None
    remove: list[str] = field(default_factory=list)
    action: Literal["archive", "delete"] = "archive"
    covers: dict[str, int] | None = None
    keep: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.summarize or self.remove)


def plan_message_retention(
    messages: Sequence[ChatMessage | Mapping[str, Any]], policy: MessageRetentionPolicy
) -> MessagePlan:
    """Plan the message-level policy for one session's messages (``seq`` order). Pure.

    The session's system prompt (a ``system`` message at ``seq`` 0) is always
    kept; other system messages are kept when ``keep_system_messages`` (stored
    summaries excepted: a new summary supersedes them). Of the other messages the newest
    ``min(summary_threshold, max_messages_per_session)`` are kept when
    ``summarize_old``, the newest ``max_messages_per_session`` otherwise; the
    older ones are summarized (or just removed). The cut never leaves a
    ``tool`` message without the assistant message that called it: such
    results go with their call into the summary.
    """
    if not isinstance(policy, MessageRetentionPolicy):
        raise ValidationError("policy must be a MessageRetentionPolicy", field="policy")
    msgs = [m if isinstance(m, ChatMessage) else ChatMessage.from_record(m) for m in messages]
    action: Literal["archive", "delete"] = "archive" if policy.archive_originals else "delete"
    summaries = [m for m in msgs if is_summary_message(m)]
    fixed = [
        m
        for m in msgs
        if not is_summary_message(m)
        and m.role == "system"
        and (policy.keep_system_messages or is_system_prompt(m))
    ]
    fixed_ids = {m.id for m in fixed}
    convo = [m for m in msgs if m.id not in fixed_ids and not is_summary_message(m)]
    keep_n = (
        min(policy.summary_threshold, policy.max_messages_per_session)
        if policy.summarize_old
        else policy.max_messages_per_session
    )
    if len(convo) <= keep_n:
        return MessagePlan(action=action, keep=[m.id for m in msgs])
    cut = len(convo) - keep_n
    while cut < len(convo) and convo[cut].role == "tool":
        cut += 1  # do not orphan tool results: summarize them with their call
    old = convo[:cut]
    old_ids = [m.id for m in old]
    if policy.summarize_old:
        prev = summaries[-1] if summaries else None
        remove = old_ids + [m.id for m in summaries]
        removed = set(remove)
        return MessagePlan(
            summarize=old_ids,
            previous_summary_id=prev.id if prev else None,
            remove=remove,
            action=action,
            covers={"fromSeq": old[0].seq, "toSeq": old[-1].seq, "count": len(old)},
            keep=[m.id for m in msgs if m.id not in removed],
        )
    removed = set(old_ids)
    return MessagePlan(
        remove=old_ids,
        action=action,
        covers=None,
        keep=[m.id for m in msgs if m.id not in removed],
    )


def summary_message_fields(text: str, plan: MessagePlan) -> dict[str, Any]:
    """``role``, ``content`` and ``metadata`` of the summary message to append
    for ``plan`` (``mem.messages.append(sid, **fields)``): a system message
    ``SUMMARY_PREFIX + text``, marked ``{"summary": true}`` and linked to the
    range it covers and to the summary it supersedes."""
    if not isinstance(text, str) or not text:
        raise ValidationError("summary text must be a non-empty string", field="text")
    summary_of: dict[str, Any] = dict(plan.covers or {})
    summary_of["ids"] = list(plan.summarize)
    if plan.previous_summary_id:
        summary_of["previousSummaryId"] = plan.previous_summary_id
    return {
        "role": "system",
        "content": SUMMARY_PREFIX + text,
        "metadata": {"summary": True, "summaryOf": summary_of},
    }
