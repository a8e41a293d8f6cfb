"""In-process store: plain dicts, nothing persisted. Writes are atomic because
each method validates everything before it mutates anything, with no await in
between."""

from __future__ import annotations

import copy
from typing import Any

from ..errors import DuplicateId, SessionNotFound

__all__ = ["MemoryStore"]


class MemoryStore:
    kind = "memory"

    def __init__(self) -> None:
        self._sessions: dict[str, dict[str, Any]] = {}
        self._messages: dict[str, dict[str, Any]] = {}
        self._by_session: dict[str, list[dict[str, Any]]] = {}
        self._kv: dict[str, Any] = {}

    # ------------------------------------------------------------------ sessions
    async def create_session(self, record: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        sid = record["sessionId"]
        if sid in self._sessions:
            raise DuplicateId(f"session id exists: {sid!r}")
        self._check_new_ids(messages)
        rec = copy.deepcopy(record)
        rec["nextSeq"] = len(messages)
        rec["messageCount"] = len(messages)
        self._sessions[sid] = rec
        self._by_session[sid] = []
        self._insert(messages)

    async def get_session(self, session_id: str) -> dict[str, Any] | None:
        rec = self._sessions.get(session_id)
        return copy.deepcopy(rec) if rec is not None else None

    async def all_sessions(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(r) for r in self._sessions.values()]

    async def update_session(self, session_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        rec = self._sessions.get(session_id)
        if rec is None:
            raise SessionNotFound(session_id)
        rec.update(copy.deepcopy(changes))
        return copy.deepcopy(rec)

    async def delete_session(self, session_id: str) -> bool:
        if self._sessions.pop(session_id, None) is None:
            return False
        for m in self._by_session.pop(session_id, []):
            self._messages.pop(m["id"], None)
        return True

    async def clear_session(self, session_id: str, now: int) -> dict[str, Any]:
        rec = self._sessions.get(session_id)
        if rec is None:
            raise SessionNotFound(session_id)
        for m in self._by_session.get(session_id, []):
            self._messages.pop(m["id"], None)
        self._by_session[session_id] = []
        rec.update(messageCount=0, nextSeq=0, updatedAt=now)
        return copy.deepcopy(rec)

    # ------------------------------------------------------------------ messages
    def _check_new_ids(self, messages: list[dict[str, Any]]) -> None:
        seen: set[str] = set()
        for m in messages:
            mid = m["id"]
            if mid in self._messages or mid in seen:
                raise DuplicateId(f"message id exists: {mid!r}")
            seen.add(mid)

    def _insert(self, messages: list[dict[str, Any]]) -> None:
        for m in messages:
            rec = copy.deepcopy(m)
            self._messages[rec["id"]] = rec
            self._by_session[rec["sessionId"]].append(rec)

    async def append_messages(
        self,
        session_id: str,
        records: list[dict[str, Any]],
        now: int,
        create: dict[str, Any] | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        sess = self._sessions.get(session_id)
        if sess is None and create is None:
            raise SessionNotFound(session_id)
        self._check_new_ids(records)
        if sess is None:
            assert create is not None
            sess = copy.deepcopy(create)
            sess.update(nextSeq=0, messageCount=0)
            self._sessions[session_id] = sess
            self._by_session[session_id] = []
        seq = sess.get("nextSeq", sess.get("messageCount", 0))
        out = []
        for r in records:
            rec = dict(r, seq=seq, sessionId=session_id)
            seq += 1
            out.append(rec)
        self._insert(out)
        sess.update(nextSeq=seq, messageCount=sess.get("messageCount", 0) + len(out), updatedAt=now)
        return copy.deepcopy(out), copy.deepcopy(sess)

    async def get_message(self, message_id: str) -> dict[str, Any] | None:
        rec = self._messages.get(message_id)
        return copy.deepcopy(rec) if rec is not None else None

    async def list_messages(
        self, session_id: str, offset: int, limit: int | None, newest_first: bool
    ) -> list[dict[str, Any]]:
        msgs = self._by_session.get(session_id, [])
        if newest_first:
            end = len(msgs) - offset
            start = 0 if limit is None else max(0, end - limit)
            page = list(reversed(msgs[start:max(end, 0)]))
        else:
            page = msgs[offset:] if limit is None else msgs[offset:offset + limit]
        return copy.deepcopy(page)

    async def count_messages(self, session_id: str) -> int:
        return len(self._by_session.get(session_id, []))

    # ------------------------------------------------------------------ kv
    async def kv_get(self, key: str) -> Any:
        return copy.deepcopy(self._kv.get(key))

    async def kv_set(self, key: str, value: Any) -> None:
        self._kv[key] = copy.deepcopy(value)

    async def close(self) -> None:
        pass
