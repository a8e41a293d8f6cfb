"""The offline responder: a ``ChatProvider`` that needs no model and no network.

It answers from memory, and says so: every reply starts with
``OFFLINE_LABEL``. It takes the distinctive words of the user's message
(stop words dropped), finds earlier messages that use them — ranked search
over the query index, or a scan of the store where there is no index — and
quotes the best few with who said them and in which conversation. The
message being answered, other messages with the same text and earlier
offline replies (quotes of quotes) are never quoted. It reads only; the chat
turn (``session.send``) stores its reply like any model's.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import UnsupportedEnvironment
from ..records.models import ChatMessage, extract_text

if TYPE_CHECKING:
    from ..facts.api import Facts
    from ..index.search import SearchHit
    from .messages import Messages
    from .sessions import Sessions

__all__ = ["OFFLINE_LABEL", "MemoryReader", "OfflineResponder", "keywords"]


class MemoryReader(Protocol):
    """What the responder reads of a memory: a ``Memory`` is one."""

    @property
    def sessions(self) -> Sessions: ...

    @property
    def messages(self) -> Messages: ...

    @property
    def facts(self) -> Facts: ...

    async def search(self, query: str, *, limit: int | None = ...) -> list[SearchHit]: ...


#: the start of every offline reply
OFFLINE_LABEL = "Offline — answering from memory."

_WORD = re.compile(r"[^\W_]{3,}", re.UNICODE)
_STOP_WORDS = """a an and are as at be but by can could did do does for from had has have how i if in into is it
its just me my no not of on or our so than that the their them then there these they this to too us was we were what
when where which who why will with would you your yours about after again all also am any because been before being
both each few more most much must only other over same should some such very can't don't i'm it's tell know think
like want need please hello thanks thank yes say said remember mentioned earlier"""
_STOP = frozenset(_STOP_WORDS.split())


def keywords(text: str, limit: int = 8) -> list[str]:
    """The distinctive words of ``text``: lower case, no stop words, first use order."""
    out: list[str] = []
    for w in _WORD.findall(text.lower()):
        if w not in _STOP and w not in out:
            out.append(w)
    return out[:limit]


def _quote(text: str, width: int = 240) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class OfflineResponder:
    """Replies built only from what is already stored, and saying so."""

    name = "offline"
    model = "offline-memory"
    #: its answers are stored as from memory, never sent to a model as the model's turns
    origin = "offline"

    def __init__(self, memory: MemoryReader, *, max_quotes: int = 3, scan_sessions: int = 200):
        self.memory = memory
        self.max_quotes = max_quotes
        self.scan_sessions = scan_sessions

    def _quotable(self, m: ChatMessage, current: str) -> bool:
        return (
            m.role in ("user", "assistant")
            and m.provider != self.name
            and m.text.strip() != current
            and bool(m.text.strip())
        )

    async def _search(self, words: list[str], current: str) -> list[ChatMessage]:
        hits = await self.memory.search(" ".join(words), limit=self.max_quotes * 3 + 2)
        return [h.message for h in hits if self._quotable(h.message, current)]

    async def _scan(self, words: list[str], current: str) -> list[ChatMessage]:
        """No query index here (CPython without duckdb): count shared words, newest first on ties."""
        found: list[tuple[int, int, ChatMessage]] = []
        for meta in await self.memory.sessions.list(limit=self.scan_sessions, archived=None):
            async for m in self.memory.messages.stream(meta.session_id, batch_size=200):
                if not self._quotable(m, current):
                    continue
                have = {w.lower() for w in _WORD.findall(m.text)}
                score = sum(1 for w in words if w in have)
                if score:
                    found.append((score, m.created_at, m))
        found.sort(key=lambda t: (-t[0], -t[1]))
        return [m for _, _, m in found]

    async def find(self, text: str) -> tuple[list[str], list[ChatMessage]]:
        """The keywords of ``text`` and the earlier messages to quote (best first)."""
        words = keywords(text)
        if not words:
            return words, []
        current = text.strip()
        try:
            found = await self._search(words, current)
        except UnsupportedEnvironment:
            found = await self._scan(words, current)
        return words, found[: self.max_quotes]

    async def reply(self, messages: list[dict[str, Any]]) -> str:
        """The answer to the last user message of ``messages``."""
        last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        text = extract_text(last.get("content")) if last else ""
        known = await self._facts(text)
        words, found = await self.find(text)
        shown = ", ".join(f"“{w}”" for w in words[:5])
        if known:
            lines = [f"{OFFLINE_LABEL} No model is configured, but here is what I know about you:", ""]
            lines += known
            if found:
                lines += ["", f"And what I remember about {shown}:", ""] + await self._quotes(found)
            return "\n".join(lines).rstrip()
        if not words:
            return (
                f"{OFFLINE_LABEL} No model is configured, and your message has no words I can look up. "
                "Add a model in **Settings** for real answers."
            )
        if not found:
            return (
                f"{OFFLINE_LABEL} No model is configured. I looked for {shown} in your earlier "
                "conversations and found nothing yet. Add a model in **Settings** for real answers."
            )
        lines = [f"{OFFLINE_LABEL} No model is configured, so here is what I remember about {shown}:", ""]
        return "\n".join(lines + await self._quotes(found)).rstrip()

    async def _quotes(self, found: list[ChatMessage]) -> list[str]:
        """Each earlier message as a quote naming who said it and in which conversation."""
        lines: list[str] = []
        for m in found:
            meta = await self.memory.sessions.get(m.session_id)
            who = "You" if m.role == "user" else "Assistant"
            lines += [f"> {who}, in “{meta.title}”: {_quote(m.text)}", ""]
        return lines

    async def _facts(self, text: str) -> list[str]:
        """What the learnt facts say to ``text``: a line each, with where it was said."""
        if not text.strip():
            return []
        lines = []
        for hit in await self.memory.facts.search(text, k=3, semantic=False):
            if hit.keyword <= 0:
                continue  # a fact only near in meaning is not an answer
            where = ""
            said = await self.memory.facts.sources(hit.fact.fact_id)
            if said:
                meta = await self.memory.sessions.get(said[-1].session_id)
                where = f" (you said so in “{meta.title}”)"
            lines.append(f"- {hit.fact.text}{where}")
        return lines

    async def complete(self, messages: list[dict[str, Any]], *, model: str | None = None, **kw: Any) -> str:
        return await self.reply(messages)

    async def stream(
        self, messages: list[dict[str, Any]], *, model: str | None = None, **kw: Any
    ) -> AsyncIterator[str]:
        answer = await self.reply(messages)
        for piece in re.findall(r"\S+\s*|\s+", answer):
            yield piece
