"""Learning facts from what the user said: the ``FactExtractor`` protocol and the
watermark that makes ``mem.facts.extract`` read each user message once.

The watermark is kept in the store's ``kv`` (``WATERMARK_KEY``): per session, the
order key (``ORDER_KEY``) of the last user message read, so running ``extract``
twice reads nothing new, and a reload or another device's tab goes on where it
stopped. What the user deleted or rejected is remembered (``REFUSED_KEY``): the
same value for the same slot is never proposed again from the same messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from ..records.facts import Fact, FactOp
from ..records.models import ChatMessage, for_model
from ..stores.base import ORDER_KEY
from .rules import same_value

__all__ = [
    "FactExtractor",
    "WATERMARK_KEY",
    "REFUSED_KEY",
    "BATCH",
    "unread",
    "refused_entry",
    "is_refused",
]

#: kv key: ``{session_id: order key of the last user message read}``
WATERMARK_KEY = "facts.watermark"
#: kv key: ``[{"key", "value", "sources"}]``, what the user deleted or rejected
REFUSED_KEY = "facts.refused"
#: user messages handed to an extractor at a time
BATCH = 50


@runtime_checkable
class FactExtractor(Protocol):
    """Proposes facts from user messages, knowing the facts already held (to update or
    invalidate them by ``fact_id``)."""

    async def extract(self, messages: list[ChatMessage], known: list[Fact]) -> list[FactOp]: ...


def unread(records: list[dict[str, Any]], mark: str | None) -> list[dict[str, Any]]:
    """The user's own messages among ``records`` (a session's, in order) after ``mark``:
    not the assistant's, a tool's or the system's, nor a notice the app stored."""
    out = []
    for r in records:
        if r.get("role") != "user" or (mark is not None and str(r.get(ORDER_KEY) or "") <= mark):
            continue
        if for_model(ChatMessage.from_record(r)):
            out.append(r)
    return out


def refused_entry(fact: Fact) -> dict[str, Any]:
    """What to remember of a learnt fact the user deleted or rejected."""
    return {"key": fact.key, "value": fact.value, "sources": list(fact.source_ids)}


def is_refused(op: FactOp, refused: list[Mapping[str, Any]]) -> bool:
    """Whether ``op`` proposes again what the user deleted or rejected, from one of the
    same messages."""
    if op.op == "invalidate" or not isinstance(op.value, str):
        return False
    return any(
        r.get("key") == op.key
        and same_value(str(r.get("value", "")), op.value)
        and set(r.get("sources") or ()) & set(op.source_ids)
        for r in refused
    )
