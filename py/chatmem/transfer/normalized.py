"""``NormalizedImport``: what every import format is turned into before anything is written.

It is a list of ``(session record, message records)`` pairs: the records are
exactly ``SessionMeta.to_record()`` / ``ChatMessage.to_record()`` (all keys),
messages in ``seq`` order, ``messageCount`` equal to the number of messages.
Forks come after the session they fork (``parentId`` names it).

``RecordBuilder`` is the adapters' helper to make such records with fresh ids,
or, inside a conversation named by its source (``from_source``), with ids
derived from the source's ids, so the same conversation imported twice has the
same ids;
``assign_new_ids`` re-keys a whole import (for ``preserve_ids=False``) keeping
the fork links between imported sessions.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..records.ids import IdGenerator, derived_id
from ..records.models import ChatMessage, SessionMeta, estimate_tokens, extract_text

__all__ = [
    "NormalizedSession",
    "NormalizedImport",
    "RecordBuilder",
    "assign_new_ids",
    "count_messages",
]

NormalizedSession = tuple[dict[str, Any], list[dict[str, Any]]]
NormalizedImport = list[NormalizedSession]


def count_messages(normalized: NormalizedImport) -> int:
    """Total number of message records in an import."""
    return sum(len(msgs) for _, msgs in normalized)


class RecordBuilder:
    """Makes session and message records for one import, with ids from ``ids``."""

    def __init__(self, ids: IdGenerator | None = None):
        self.ids = ids or IdGenerator()
        self._source: str | None = None  # the current conversation's key, if it has one
        self._sessions = 0  # sessions made in the current conversation
        self._seen: dict[str, int] = {}  # message source ids met in it, and how often

    def from_source(self, source: str, conversation_id: object) -> None:
        """Records from here on belong to ``conversation_id`` of ``source`` ("chatgpt"...):
        their ids derive from it (sessions by their number in the conversation, messages
        by their ``metadata.sourceId``). Without a usable id (not a non-empty string),
        ids are fresh."""
        ok = isinstance(conversation_id, str) and conversation_id != ""
        self._source = f"{source}\x00{conversation_id}" if ok else None
        self._sessions = 0
        self._seen = {}

    def _id(self, created_at: int, *key: object) -> str:
        if self._source is None:
            return self.ids()
        return derived_id(created_at, "\x00".join([self._source, *map(str, key)]))

    def session(
        self,
        *,
        title: str,
        created_at: int,
        updated_at: int | None = None,
        user_id: str = "local",
        character_id: str = "default",
        tags: Iterable[str] = (),
        parent_id: str | None = None,
        fork_index: int | None = None,
        fork_reason: str | None = None,
        pinned: bool = False,
        archived: bool = False,
    ) -> dict[str, Any]:
        """A session record with a new id (``messageCount`` is set by ``finish``)."""
        self._sessions += 1
        return SessionMeta(
            session_id=self._id(created_at, "session", self._sessions),
            title=title,
            created_at=created_at,
            updated_at=created_at if updated_at is None else max(updated_at, created_at),
            user_id=user_id,
            character_id=character_id,
            pinned=pinned,
            archived=archived,
            tags=list(dict.fromkeys(tags)),
            parent_id=parent_id,
            fork_index=fork_index,
            fork_reason=fork_reason,
        ).to_record()

    def message(
        self, role: str, content: str | list[dict[str, Any]], created_at: int, **fields: Any
    ) -> dict[str, Any]:
        """A message record with a new id; ``sessionId`` and ``seq`` are set by ``finish``.

        ``fields`` are ``ChatMessage`` attribute names (``provider``, ``tool_calls``...).
        """
        metadata = fields.get("metadata")
        source_id = metadata.get("sourceId") if isinstance(metadata, dict) else None
        # without a source id, its place in the file; a key met twice (a broken file) is
        # told apart by how often it was met
        key = f"#{sum(self._seen.values())}" if source_id is None else str(source_id)
        seen = self._seen[key] = self._seen.get(key, 0) + 1
        msg = ChatMessage(
            id=self._id(created_at, "message", key if seen == 1 else f"{key}\x00{seen}"),
            session_id="",
            seq=0,
            role=role,  # type: ignore[arg-type]
            content=content,
            created_at=created_at,
            **fields,
        )
        msg.token_count = estimate_tokens(extract_text(content))
        return msg.to_record()

    def copy_message(self, record: dict[str, Any]) -> dict[str, Any]:
        """The same message under a new id (a fork's copy of its parent's prefix), for
        the session made next."""
        return dict(record, id=self._id(record["createdAt"], "copy", self._sessions + 1, record["id"]))

    @staticmethod
    def finish(meta: dict[str, Any], messages: list[dict[str, Any]]) -> NormalizedSession:
        """Tie messages to the session: ``sessionId``, dense ``seq`` from 0, ``messageCount``.

        ``updatedAt`` is raised to the last message's ``createdAt`` when that is later.
        """
        out = [dict(m, sessionId=meta["sessionId"], seq=i) for i, m in enumerate(messages)]
        meta = dict(meta, messageCount=len(out))
        if out:
            meta["updatedAt"] = max(meta["updatedAt"], max(m["createdAt"] for m in out))
        return meta, out


def assign_new_ids(normalized: NormalizedImport, ids: IdGenerator | None = None) -> NormalizedImport:
    """The same import under fresh session and message ids.

    ``parentId`` links between imported sessions follow their sessions; a
    ``parentId`` naming a session outside the import is kept as it is.
    """
    gen = ids or IdGenerator()
    session_map = {meta["sessionId"]: gen() for meta, _ in normalized}
    out: NormalizedImport = []
    for meta, msgs in normalized:
        new_sid = session_map[meta["sessionId"]]
        parent = meta.get("parentId")
        new_meta = dict(
            meta, sessionId=new_sid, parentId=session_map.get(parent, parent) if parent else parent
        )
        out.append((new_meta, [dict(m, id=gen(), sessionId=new_sid) for m in msgs]))
    return out
