"""``LLMFactExtractor``: facts proposed by a chat model (any ``ChatProvider``:
OpenAI-compatible or Anthropic).

It sends the new user turns (with their ids) and the facts already known (with
theirs), and expects the reply to be one JSON object
``{"operations": [{"op", "key", "value", "text", "fact_id", "source_ids",
"importance"}]}`` (in a Markdown code fence is fine). A reply that is not that
object raises ``ProviderError``, like a provider failure: ``mem.facts.extract``
then writes nothing and leaves those messages for the next run. Operations are
handed over as the model wrote them; the rules (``chatmem.facts.rules``) drop
and report one that names an unknown fact or a message not in the batch, or
whose key or value is not a short string.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..chat.providers import ChatProvider
from ..errors import ProviderError, ValidationError, shown
from ..records.facts import MULTI_VALUED, SINGLE_VALUED, Fact, FactOp
from ..records.models import ChatMessage

__all__ = ["LLMFactExtractor", "SYSTEM_PROMPT", "parse_operations"]

SYSTEM_PROMPT = f"""You keep a short, correct record of facts about the user of a chat app.
Read the user's new messages and propose changes to what is known, as JSON only:
{{"operations": [{{"op": "add" | "update" | "invalidate", "key": "...", "value": "...", "text": "...",
"fact_id": "... or null", "source_ids": ["message ids"], "importance": 0.0-1.0}}]}}
Keys with one value at a time: {", ".join(sorted(SINGLE_VALUED))}. Keys with several values:
{", ".join(sorted(MULTI_VALUED))}, and family.<relation> (e.g. family.sister: her name).
Rules: only what the user says about themselves, plainly, as true now. Never from questions,
conditions, wishes, plans, jokes or what someone else said. "value" is short and normalised
("Porto", "nurse", "peanuts"); "text" one sentence ("Lives in Porto"). Use "update" or
"invalidate" with the fact_id of a known fact when the user corrects or ends it. Every operation
names the ids of the messages it comes from. Nothing to record: {{"operations": []}}."""

_FENCE = re.compile(r"^\s*```[\w-]*\s*\n(.*?)\n?```\s*$", re.S)


def _prompt(messages: list[ChatMessage], known: list[Fact]) -> str:
    facts = [
        {"fact_id": f.fact_id, "key": f.key, "value": f.value, "text": f.text, "status": f.status}
        for f in known
    ]
    turns = [{"id": m.id, "text": m.text} for m in messages if m.role == "user"]
    return json.dumps({"known_facts": facts, "new_user_messages": turns}, ensure_ascii=False)


def parse_operations(reply: str) -> list[FactOp]:
    """The operations of a model's reply, as written; ``ProviderError`` if the reply is not
    the JSON object asked for."""
    text = reply.strip() if isinstance(reply, str) else ""
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("operations"), list):
        raise ProviderError(f"the model did not answer with the JSON object asked for: {shown(reply)}")
    out = []
    for raw in doc["operations"]:
        if not isinstance(raw, dict):
            raw = {}
        sources = raw.get("source_ids")
        out.append(
            FactOp(
                op=raw.get("op"),  # type: ignore[arg-type]
                key=raw.get("key"),  # type: ignore[arg-type]
                value=raw.get("value"),  # type: ignore[arg-type]
                text=raw.get("text") or "",
                fact_id=raw.get("fact_id"),
                # anything but a list of ids names no message of the batch: refused by the rules
                source_ids=tuple(sources)
                if isinstance(sources, list) and all(isinstance(s, str) for s in sources)
                else ("",),
                importance=raw.get("importance"),
            )
        )
    return out


class LLMFactExtractor:
    """A ``FactExtractor`` that asks ``provider`` (``model``: its default if None)."""

    def __init__(self, provider: ChatProvider, *, model: str | None = None, **options: Any):
        if not callable(getattr(provider, "complete", None)):
            raise ValidationError(
                "provider needs an async complete(messages, *, model=None)", field="provider"
            )
        self.provider = provider
        self.model = model
        self.options = options

    async def extract(self, messages: list[ChatMessage], known: list[Fact]) -> list[FactOp]:
        if not any(m.role == "user" for m in messages):
            return []
        reply = await self.provider.complete(
            [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": _prompt(messages, known)},
            ],
            model=self.model,
            **self.options,
        )
        return parse_operations(reply)
