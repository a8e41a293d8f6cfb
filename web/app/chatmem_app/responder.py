"""Replies: from a configured OpenAI-compatible model (streamed), or, with no
model configured, the offline responder that answers from memory.

The user's message is stored before any reply is attempted; a reply is stored
only once it is complete, so a failed call leaves the user message in place
and nothing half-written.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable


__all__ = ["OFFLINE_LABEL", "keywords", "offline_reply", "find_mentions", "chat_stream",
           "ProviderError"]

OFFLINE_LABEL = "Offline — answering from memory"

_STOP = set("""a an and are as at be but by can could did do does for from had has have how i if in into is it
its just me my no not of on or our so than that the their them then there these they this to too us was we
were what when where which who why will with would you your yours about after again all also am any because
been before being both each few more most much must only other over same should some such very can't don't
i'm it's tell know think like want need please hello thanks thank yes say said remember
mentioned earlier""".split())

Token = Callable[[str], Any]


def keywords(text: str, limit: int = 8) -> list[str]:
    """The distinctive words of ``text`` (lower case, no stop words), in order."""
    words = re.findall(r"[^\W_]{3,}", text.lower())
    out: list[str] = []
    for w in words:
        if w not in _STOP and w not in out:
            out.append(w)
    return out[:limit]


async def find_mentions(mem: Any, text: str, *, exclude_ids: set[str], limit: int = 3,
                        scan_limit: int = 5000) -> tuple[list[str], list[tuple[Any, Any, int]]]:
    """Earlier messages mentioning the words of ``text``: (words, [(message, session, score)])."""
    words = keywords(text)
    if not words:
        return words, []
    found: list[tuple[Any, Any, int]] = []
    if hasattr(mem, "search"):  # features: search
        hits = await mem.search(" ".join(words), limit=limit + len(exclude_ids))
        for hit in hits:
            msg = getattr(hit, "message", None)
            if msg is None or msg.id in exclude_ids:
                continue
            found.append((msg, await mem.sessions.get(msg.session_id), 1))
        return words, found[:limit]
    scanned = 0
    for s in await mem.sessions.list(limit=None, archived=None):
        for m in await mem.messages.list(s.session_id, limit=None):
            scanned += 1
            if m.id in exclude_ids or m.role not in ("user", "assistant") or (m.metadata or {}).get("offline"):
                continue
            low = m.text.lower()
            score = sum(1 for w in words if w in low)
            if score:
                found.append((m, s, score))
        if scanned >= scan_limit:
            break
    found.sort(key=lambda t: (-t[2], -t[0].created_at))
    return words, found[:limit]


def _quote(text: str, width: int = 240) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


async def offline_reply(mem: Any, text: str, *, exclude_ids: set[str]) -> str:
    """A reply built only from what is already stored, and saying so."""
    words, found = await find_mentions(mem, text, exclude_ids=exclude_ids)
    shown = ", ".join(f"“{w}”" for w in words[:5])
    if not words:
        return (f"*{OFFLINE_LABEL}.* No model is configured, and your message has no words I can look up. "
                "Add a model in **Settings** for real answers.")
    if not found:
        return (f"*{OFFLINE_LABEL}.* No model is configured. I looked for {shown} in your earlier "
                "conversations and found nothing yet. Add a model in **Settings** for real answers.")
    lines = [f"*{OFFLINE_LABEL}.* No model is configured, so here is what I remember about {shown}:", ""]
    for m, s, _ in found:
        who = "You" if m.role == "user" else "Assistant"
        lines.append(f"> {who}, in “{s.title}”: {_quote(m.text)}")
        lines.append("")
    return "\n".join(lines).rstrip()


class ProviderError(Exception):
    """The model provider failed (network, HTTP status or a malformed stream)."""


async def chat_stream(transport: Any, base_url: str, api_key: str, model: str,
                      messages: list[dict[str, Any]], on_token: Token) -> str:
    """Stream a chat completion from an OpenAI-compatible ``/chat/completions``; the full text."""
    url = base_url.rstrip("/") + "/chat/completions"
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    body = json.dumps({"model": model, "messages": messages, "stream": True}).encode()
    out: list[str] = []
    status = None
    error_lines: list[str] = []
    try:
        async for item in transport.stream_lines("POST", url, headers=headers, body=body, timeout=120.0):
            if status is None:
                status = item.status
                continue
            if status != 200:
                error_lines.append(item)
                continue
            if not item.startswith("data:"):
                continue
            data = item[5:].strip()
            if data == "[DONE]":
                break
            try:
                chunk = json.loads(data)
                delta = chunk["choices"][0].get("delta") or {}
            except (ValueError, KeyError, IndexError, TypeError) as e:
                raise ProviderError(f"the provider sent a malformed stream line: {data[:80]}") from e
            piece = delta.get("content") or ""
            if piece:
                out.append(piece)
                on_token(piece)
    except ProviderError:
        raise
    except Exception as e:  # TransportError / TransportTimeout
        raise ProviderError(f"could not reach the provider at {base_url}: {e}") from e
    if status != 200:
        detail = " ".join(error_lines)[:200]
        raise ProviderError(f"the provider answered HTTP {status}{': ' + detail if detail else ''}")
    return "".join(out)
