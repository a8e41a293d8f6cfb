"""The offline responder: a ``ChatProvider`` that needs no model and no network.

It answers from memory, and says so: it looks for earlier messages (in other
sessions first) that share the user's words and quotes the best few. Use it
when no model is configured, so the app stays useful offline.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, AsyncIterator

from .models import extract_text

if TYPE_CHECKING:
    from .memory import Memory

__all__ = ["OfflineResponder", "OFFLINE_LABEL"]

OFFLINE_LABEL = "(offline — no model configured; answering from memory)"
_WORD = re.compile(r"[^\W_]{3,}", re.UNICODE)
_STOP = frozenset("the and you that for with this have what are was but not your from they".split())


class OfflineResponder:
    name = "offline"
    model = "offline-memory"

    def __init__(self, memory: Memory, *, max_quotes: int = 3, scan_sessions: int = 200):
        self.memory = memory
        self.max_quotes = max_quotes
        self.scan_sessions = scan_sessions

    async def _find(self, words: set[str], exclude_text: str) -> list[tuple[int, str, str]]:
        search = getattr(self.memory, "search", None)
        query = " ".join(sorted(words))
        if callable(search) and getattr(self.memory, "has_index", False):
            hits = await search(query, limit=self.max_quotes + 2)
            return [(int(h.score * 1000), h.session_id, h.message.text) for h in hits
                    if h.message.text.strip() != exclude_text]
        found: list[tuple[int, str, str]] = []
        for meta in await self.memory.sessions.list(limit=self.scan_sessions, archived=None):
            async for m in self.memory.messages.stream(meta.session_id, batch_size=200):
                text = extract_text(m.content)
                if m.role not in ("user", "assistant") or text.strip() == exclude_text:
                    continue
                score = len(words & {w.lower() for w in _WORD.findall(text)})
                if score:
                    found.append((score, meta.title, text))
        found.sort(key=lambda x: -x[0])
        return found

    async def reply(self, messages: list[dict[str, Any]]) -> str:
        last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        text = extract_text(last.get("content")) if last else ""
        words = {w.lower() for w in _WORD.findall(text)} - _STOP
        if not words:
            return f"{OFFLINE_LABEL} I have nothing to look up in that. Configure a model in Settings for real answers."
        found = await self._find(words, text.strip())
        if not found:
            return (f"{OFFLINE_LABEL} I found nothing earlier about {', '.join(sorted(words)[:5])}. "
                    "Configure a model in Settings for real answers.")
        lines = [f"{OFFLINE_LABEL} Here is what I remember about that:"]
        for _, where, quote in found[: self.max_quotes]:
            quote = " ".join(quote.split())
            lines.append(f"- “{quote[:200]}{'…' if len(quote) > 200 else ''}” ({where})")
        return "\n".join(lines)

    async def complete(self, messages: list[dict[str, Any]], *, model: str | None = None, **kw: Any) -> str:
        return await self.reply(messages)

    async def stream(self, messages: list[dict[str, Any]], *, model: str | None = None, **kw: Any) -> AsyncIterator[str]:
        answer = await self.reply(messages)
        for piece in re.findall(r"\S+\s*", answer):
            yield piece
