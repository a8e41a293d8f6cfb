"""In-process store: plain dicts, nothing persisted. Writes are atomic because
each method validates everything before it mutates anything, with no await in
between."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

from ..errors import DuplicateId, SessionNotFound, shown
from .base import ORDER_KEY, OUTBOX_KEY, Ops, clone, gate_ops, next_seq_after, snapshot_of
from .changes import apply_changes_to

__all__ = ["MemoryStore"]


class MemoryStore:
    """A ``Store`` in this process's memory: nothing persisted (tests, throwaway memories)."""

    kind = "memory"
    name = "chatmem"
    path: str | None = None
    streams_batches = False

    def __init__(self) -> None:
        self._sessions: dict[str, dict[str, Any]] = {}
        self._messages: dict[str, dict[str, Any]] = {}
        self._by_session: dict[str, list[dict[str, Any]]] = {}
        self._kv: dict[str, Any] = {}
        self._outbox: dict[str, dict[str, Any]] = {}  # insertion order = FIFO
        self._dead: dict[str, dict[str, Any]] = {}
        self._facts: dict[str, dict[str, Any]] = {}

    def _enqueue(self, ops: Ops, created: bool = True, gated: bool = True) -> None:
        if gated and OUTBOX_KEY not in self._kv:
            return
        for op in gate_ops(ops, created):
            self._outbox[op["op_id"]] = clone(op)

    # ------------------------------------------------------------------ sessions
    async def create_session(
        self, record: dict[str, Any], messages: list[dict[str, Any]], ops: Ops = None
    ) -> None:
        sid = record["sessionId"]
        if sid in self._sessions:
            raise DuplicateId(f"session id exists: {shown(sid)}")
        self._check_new_ids(messages)
        rec = clone(record)
        rec["nextSeq"] = next_seq_after(messages)
        rec["messageCount"] = len(messages)
        self._sessions[sid] = rec
        self._by_session[sid] = []
        self._insert(messages)
        self._enqueue(ops)

    async def get_session(self, session_id: str) -> dict[str, Any] | None:
        rec = self._sessions.get(session_id)
        return clone(rec) if rec is not None else None

    async def all_sessions(self) -> list[dict[str, Any]]:
        return [clone(r) for r in self._sessions.values()]

    async def update_session(
        self, session_id: str, changes: dict[str, Any], ops: Ops = None
    ) -> dict[str, Any]:
        rec = self._sessions.get(session_id)
        if rec is None:
            raise SessionNotFound(session_id)
        rec.update(clone(changes))
        self._enqueue(ops)
        return clone(rec)

    def _drop_session(self, session_id: str) -> bool:
        if self._sessions.pop(session_id, None) is None:
            return False
        for m in self._by_session.pop(session_id, []):
            self._messages.pop(m["id"], None)
        return True

    async def delete_session(self, session_id: str, ops: Ops = None) -> bool:
        if not self._drop_session(session_id):
            return False
        self._enqueue(ops)
        return True

    async def clear_session(self, session_id: str, now: int, ops: Ops = None) -> dict[str, Any]:
        rec = self._sessions.get(session_id)
        if rec is None:
            raise SessionNotFound(session_id)
        for m in self._by_session.get(session_id, []):
            self._messages.pop(m["id"], None)
        self._by_session[session_id] = []
        rec.update(messageCount=0, nextSeq=0, updatedAt=now)
        self._enqueue(ops)
        return clone(rec)

    async def import_sessions(
        self, items: list[tuple[dict[str, Any], list[dict[str, Any]]]], replace: bool, ops: Ops = None
    ) -> None:
        replaced = {r["sessionId"] for r, _ in items if replace and r["sessionId"] in self._sessions}
        replaced_msgs = {m["id"] for sid in replaced for m in self._by_session.get(sid, [])}
        seen: set[str] = set()
        for rec, _msgs in items:
            sid = rec["sessionId"]
            if (sid in self._sessions and sid not in replaced) or sid in seen:
                raise DuplicateId(f"session id exists: {shown(sid)}")
            seen.add(sid)
        ids: set[str] = set()
        for _, msgs in items:
            for m in msgs:
                if (m["id"] in self._messages and m["id"] not in replaced_msgs) or m["id"] in ids:
                    raise DuplicateId(f"message id exists: {shown(m['id'])}")
                ids.add(m["id"])
        for sid in replaced:
            self._drop_session(sid)
        for rec, msgs in items:
            sess = clone(rec)
            sess.update(nextSeq=next_seq_after(msgs), messageCount=len(msgs))
            self._sessions[sess["sessionId"]] = sess
            self._by_session[sess["sessionId"]] = []
            self._insert(msgs)
        self._enqueue(ops)

    # ------------------------------------------------------------------ messages
    def _check_new_ids(self, messages: list[dict[str, Any]]) -> None:
        seen: set[str] = set()
        for m in messages:
            mid = m["id"]
            if mid in self._messages or mid in seen:
                raise DuplicateId(f"message id exists: {shown(mid)}")
            seen.add(mid)

    def _insert(self, messages: list[dict[str, Any]]) -> None:
        for m in messages:
            rec = clone(m)
            self._messages[rec["id"]] = rec
            self._by_session[rec["sessionId"]].append(rec)

    async def append_messages(
        self,
        session_id: str,
        records: list[dict[str, Any]],
        now: int,
        create: dict[str, Any] | None = None,
        ops: Ops = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        sess = self._sessions.get(session_id)
        if sess is None and create is None:
            raise SessionNotFound(session_id)
        self._check_new_ids(records)
        created = sess is None
        if sess is None:
            assert create is not None
            sess = clone(create)
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
        self._enqueue(ops, created)
        return clone(out), clone(sess)

    async def delete_messages(
        self, session_id: str, message_ids: list[str], ops: Ops = None
    ) -> dict[str, Any]:
        sess = self._sessions.get(session_id)
        if sess is None:
            raise SessionNotFound(session_id)
        gone = {mid for mid in message_ids if self._messages.get(mid, {}).get("sessionId") == session_id}
        for mid in gone:
            del self._messages[mid]
        self._by_session[session_id] = kept = [m for m in self._by_session[session_id] if m["id"] not in gone]
        for i, m in enumerate(kept):  # the positions close up: seq stays dense
            m["seq"] = i
        sess.update(messageCount=len(kept), nextSeq=len(kept))
        self._enqueue(ops)
        return clone(sess)

    async def get_message(self, message_id: str) -> dict[str, Any] | None:
        rec = self._messages.get(message_id)
        return clone(rec) if rec is not None else None

    async def get_messages(self, message_ids: list[str]) -> list[dict[str, Any] | None]:
        return [clone(self._messages.get(mid)) for mid in message_ids]

    async def list_messages(
        self, session_id: str, offset: int, limit: int | None, newest_first: bool
    ) -> list[dict[str, Any]]:
        msgs = self._by_session.get(session_id, [])
        if newest_first:
            end = len(msgs) - offset
            start = 0 if limit is None else max(0, end - limit)
            page = list(reversed(msgs[start : max(end, 0)]))
        else:
            page = msgs[offset:] if limit is None else msgs[offset : offset + limit]
        return clone(page)

    async def list_sessions_messages(self, session_ids: list[str]) -> list[dict[str, Any]]:
        return clone([m for sid in session_ids for m in self._by_session.get(sid, [])])

    async def message_ids(self, session_id: str) -> list[str]:
        return [m["id"] for m in self._by_session.get(session_id, [])]

    async def count_messages(self, session_id: str) -> int:
        return len(self._by_session.get(session_id, []))

    # ------------------------------------------------------------------ facts
    async def put_facts(self, records: list[dict[str, Any]], ops: Ops = None) -> None:
        for r in records:
            self._facts[r["factId"]] = clone(r)
        self._enqueue(ops)

    async def get_fact(self, fact_id: str) -> dict[str, Any] | None:
        rec = self._facts.get(fact_id)
        return clone(rec) if rec is not None else None

    async def list_facts(self, user_id: str | None = None) -> list[dict[str, Any]]:
        return [clone(r) for r in self._facts.values() if user_id is None or r["userId"] == user_id]

    async def delete_facts(self, fact_ids: list[str], ops: Ops = None) -> int:
        gone = [fid for fid in dict.fromkeys(fact_ids) if self._facts.pop(fid, None) is not None]
        self._enqueue(ops)
        return len(gone)

    # ------------------------------------------------------------------ pulled changes
    async def apply_changes(
        self, changes: list[dict[str, Any]], kv: dict[str, Any] | None = None
    ) -> list[str]:
        # stage on copies, then swap in: all or nothing, no await in between
        staged = _Staged(self)
        touched = apply_changes_to(staged, clone(changes))
        staged.commit()
        for k, v in (kv or {}).items():
            self._kv[k] = clone(v)
        return touched

    # ------------------------------------------------------------------ kv
    async def kv_get(self, key: str) -> Any:
        return clone(self._kv.get(key))

    async def kv_set(self, key: str, value: Any) -> None:
        self._kv[key] = clone(value)

    # ------------------------------------------------------------------ outbox
    async def outbox_activate(self, now: int) -> dict[str, Any]:
        if OUTBOX_KEY not in self._kv:
            self._kv[OUTBOX_KEY] = snapshot_of(self._sessions.values(), now)
        return clone(self._kv[OUTBOX_KEY])

    async def outbox_put(self, ops: list[dict[str, Any]]) -> None:
        self._enqueue(ops, gated=False)

    async def outbox_list(self, limit: int | None = None) -> list[dict[str, Any]]:
        ops = list(self._outbox.values())
        return clone(ops if limit is None else ops[:limit])

    async def outbox_update(self, ops: list[dict[str, Any]]) -> None:
        for op in ops:
            if op["op_id"] in self._outbox:
                self._outbox[op["op_id"]] = clone(op)

    async def outbox_ack(self, op_ids: list[str]) -> None:
        for oid in op_ids:
            self._outbox.pop(oid, None)

    async def outbox_to_dead(self, entries: list[dict[str, Any]]) -> None:
        for e in entries:
            self._outbox.pop(e["op_id"], None)
            self._dead[e["op_id"]] = clone(e)

    async def dead_list(self) -> list[dict[str, Any]]:
        return clone(list(self._dead.values()))

    async def dead_replay(self, op_ids: list[str] | None) -> int:
        ids = list(self._dead) if op_ids is None else [i for i in op_ids if i in self._dead]
        for oid in ids:
            e = self._dead.pop(oid)
            for k in ("reason", "response"):
                e.pop(k, None)
            e.update(attempts=0, next_attempt_at=0, last_error=None)
            self._outbox[oid] = e
        return len(ids)

    async def dead_discard(self, op_ids: list[str] | None) -> int:
        ids = list(self._dead) if op_ids is None else [i for i in op_ids if i in self._dead]
        for oid in ids:
            del self._dead[oid]
        return len(ids)

    async def outbox_counts(self) -> tuple[int, int]:
        return len(self._outbox), len(self._dead)

    async def changed_elsewhere(self) -> bool:
        return False  # no other process holds this memory

    def subscribe(self, fn: Callable[[str], None]) -> None:
        pass  # no other tab shares it

    async def close(self) -> None:
        pass


class _Staged:
    """``ChangeTarget`` over a copy-on-write view of a ``MemoryStore``."""

    def __init__(self, store: MemoryStore):
        self.store = store
        self.sessions: dict[str, dict[str, Any] | None] = {}
        self.messages: dict[str, dict[str, Any] | None] = {}
        self.last: dict[str, dict[str, Any] | None] = {}  # per session: its highest seq
        self.facts: dict[str, dict[str, Any] | None] = {}

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        if session_id in self.sessions:
            rec = self.sessions[session_id]
        else:
            rec = self.store._sessions.get(session_id)
        return clone(rec) if rec is not None else None

    def put_session(self, record: dict[str, Any]) -> None:
        self.sessions[record["sessionId"]] = clone(record)

    def _session_messages(self, session_id: str) -> list[str]:
        ids = [m["id"] for m in self.store._by_session.get(session_id, [])]
        ids += [mid for mid, m in self.messages.items() if m is not None and m["sessionId"] == session_id]
        return [mid for mid in dict.fromkeys(ids) if self.get_message(mid) is not None]

    def drop_session(self, session_id: str) -> bool:
        existed = self.get_session(session_id) is not None
        for mid in self._session_messages(session_id):
            self.messages[mid] = None
        self.sessions[session_id] = None
        self.last.pop(session_id, None)
        return existed

    def get_message(self, message_id: str) -> dict[str, Any] | None:
        if message_id in self.messages:
            return self.messages[message_id]
        return self.store._messages.get(message_id)

    def last_message(self, session_id: str) -> dict[str, Any] | None:
        if session_id not in self.last:
            held = [m for mid in self._session_messages(session_id) if (m := self.get_message(mid))]
            self.last[session_id] = max(held, key=lambda m: m["seq"], default=None)
        return self.last[session_id]

    def session_order(self, session_id: str) -> list[tuple[str, int, str | None]]:
        return [
            (m["id"], m["seq"], m.get(ORDER_KEY))
            for mid in self._session_messages(session_id)
            if (m := self.get_message(mid))
        ]

    def set_seqs(self, session_id: str, seqs: Mapping[str, int]) -> None:
        for mid, seq in seqs.items():
            old = self.get_message(mid)
            if old is not None:
                self.messages[mid] = dict(old, seq=seq)
        self.last.pop(session_id, None)

    def set_key(self, message_id: str, hlc: str) -> None:
        old = self.get_message(message_id)
        if old is not None:
            self.messages[message_id] = dict(old, **{ORDER_KEY: hlc})
            self.last.pop(old["sessionId"], None)

    def put_message(self, record: dict[str, Any]) -> None:
        self.messages[record["id"]] = rec = clone(record)
        last = self.last.get(rec["sessionId"])
        if rec["sessionId"] in self.last and (last is None or last["seq"] < rec["seq"]):
            self.last[rec["sessionId"]] = rec

    def drop_message(self, message_id: str) -> None:
        old = self.get_message(message_id)
        if old is not None:
            self.last.pop(old["sessionId"], None)
        self.messages[message_id] = None

    def put_fact(self, record: dict[str, Any]) -> None:
        self.facts[record["factId"]] = clone(record)

    def drop_fact(self, fact_id: str) -> None:
        self.facts[fact_id] = None

    def pending_ops(self) -> list[dict[str, Any]]:
        return list(self.store._outbox.values())

    def commit(self) -> None:
        st = self.store
        for fid, fact in self.facts.items():
            if fact is None:
                st._facts.pop(fid, None)
            else:
                st._facts[fid] = fact
        for mid in self.messages:
            old = st._messages.pop(mid, None)
            if old is not None:
                lst = st._by_session.get(old["sessionId"], [])
                st._by_session[old["sessionId"]] = [x for x in lst if x["id"] != mid]
        for sid, rec in self.sessions.items():
            if rec is None:
                st._sessions.pop(sid, None)
                for m in st._by_session.pop(sid, []):
                    st._messages.pop(m["id"], None)
            else:
                st._sessions[sid] = rec
                st._by_session.setdefault(sid, [])
        grown: set[str] = set()
        for mid, new in self.messages.items():
            if new is not None and new["sessionId"] in st._sessions:
                st._messages[mid] = new
                st._by_session[new["sessionId"]].append(new)
                grown.add(new["sessionId"])
        for sid in grown:
            st._by_session[sid].sort(key=lambda x: x["seq"])
