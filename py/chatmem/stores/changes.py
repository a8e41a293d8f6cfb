"""Applying pulled changes to a local store: the merge rules, once.

The memory and SQLite stores run ``apply_changes_to`` inside one
transaction, over a small ``ChangeTarget`` view of their tables; the
IndexedDB bridge (``web/js/bridge.js``, ``applyChanges``) implements the same
rules in JavaScript, because no Python ``await`` may sit inside an IndexedDB
transaction. Nothing here enqueues sync operations: pulled changes are never
echoed back to the server.

Rules (a change is ``{resource, id, data | None, deleted, hlc}``):

- **Pending local writes.** The conflict state of the client is its outbox:
  every local write the server has not acknowledged yet is an operation with
  its HLC. A remote change never overwrites what such a *newer* pending
  operation wrote (newer = greater HLC than the change's ``hlc``); the
  operation is pushed later, the server merges it per field, and a later pull
  brings the merged result. Everything already acknowledged is part of the
  server's record. So the client keeps the HLC of its last write *per
  operation* (in the outbox) and the server keeps it *per field*; once the
  outbox is empty, the server's record is the truth.
- **Session, live.** Fields of the remote record replace the local ones,
  except fields set by a newer pending ``create``/``update`` of that session;
  ``messageCount`` and ``nextSeq`` stay local (recomputed from the messages
  held); ``updatedAt`` is the later of both (last activity). A newer pending
  ``delete`` of the session keeps it deleted.
- **Session, tombstone.** The local session and all its messages go, unless a
  newer pending ``create`` re-created it here.
- **Message, live.** Messages are immutable: inserted if absent, otherwise
  left alone. It keeps the change's ``hlc`` (its create's) as its order key;
  the same message held here under another key (stored before there were
  keys, or the same import on two devices) takes the change's, so every
  device ends with the server's.
  A message whose session is not here yet gets a placeholder session record
  (the session's own change, later in the feed, fills it in). A newer pending
  ``delete`` keeps it deleted.
- **Message, tombstone.** The local message goes (the session's count drops).
- **Fact.** A fact's record is replaced whole by the remote one, unless a
  newer pending write of that fact (or any pending delete of it) is here. A
  tombstone removes it whatever is pending: a fact's delete is for ever.
- **One order.** A session's messages are ordered by ``order_key``: the HLC
  of their create, then their id; a message stored before messages had an
  HLC comes before every one that has one, in its ``seq`` order. ``seq`` is
  the position in that order, 0-based and dense, so every device holding the
  same messages numbers them alike. A pulled message that sorts after the
  session's last one takes the next ``seq``; one that belongs earlier, or a
  tombstone, renumbers the session (``ChangeTarget.set_seqs``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from ..records.merge import is_newer, pending_field_hlcs, revives, same_message
from .base import MESSAGE_PRIVATE_FIELDS, ORDER_KEY

__all__ = [
    "STORE_OWNED_FIELDS",
    "ChangeTarget",
    "OrderKey",
    "apply_changes_to",
    "order_key",
    "placeholder_session",
    "positions",
]

#: session fields that belong to the local store and never come from a pull
STORE_OWNED_FIELDS = frozenset({"messageCount", "nextSeq", "sessionId"})


class ChangeTarget(Protocol):
    """What ``apply_changes_to`` needs of a store, inside one open transaction."""

    def get_session(self, session_id: str) -> dict[str, Any] | None: ...

    def put_session(self, record: dict[str, Any]) -> None: ...

    def drop_session(self, session_id: str) -> bool:
        """Delete the session and its messages; False if it was not there."""
        ...

    def get_message(self, message_id: str) -> dict[str, Any] | None: ...

    def last_message(self, session_id: str) -> dict[str, Any] | None:
        """The session's message with the highest ``seq``, if any."""
        ...

    def session_order(self, session_id: str) -> list[tuple[str, int, str | None]]:
        """``(id, seq, hlc)`` of every message of the session (any order)."""
        ...

    def set_seqs(self, session_id: str, seqs: Mapping[str, int]) -> None:
        """Give these messages (id -> seq) of the session their new ``seq``; together
        with the unchanged ones they are the positions 0..n-1."""
        ...

    def set_key(self, message_id: str, hlc: str) -> None:
        """Give a held message another order key (``ORDER_KEY``)."""
        ...

    def put_message(self, record: dict[str, Any]) -> None: ...

    def drop_message(self, message_id: str) -> None: ...

    def put_fact(self, record: dict[str, Any]) -> None: ...

    def drop_fact(self, fact_id: str) -> None: ...

    def pending_ops(self) -> Iterable[dict[str, Any]]:
        """Every operation in the outbox (not yet acknowledged)."""
        ...


def placeholder_session(session_id: str, created_at: int) -> dict[str, Any]:
    """A session record for a message that arrived before its session's own change."""
    return {
        "sessionId": session_id,
        "title": "",
        "createdAt": created_at,
        "updatedAt": created_at,
        "userId": "local",
        "characterId": "default",
        "pinned": False,
        "archived": False,
        "tags": [],
        "parentId": None,
        "forkIndex": None,
        "forkReason": None,
        "messageCount": 0,
        "nextSeq": 0,
    }


#: how messages sort within a session: (HLC or "" before there were HLCs, the old
#: ``seq`` for those, the id)
OrderKey = tuple[str, int, str]


def order_key(message_id: str, seq: int, hlc: str | None) -> OrderKey:
    """Where a message goes in its session (see the module's "One order")."""
    return (hlc, -1, message_id) if hlc else ("", seq, message_id)


def positions(rows: Iterable[tuple[str, int, str | None]]) -> dict[str, int]:
    """The new ``seq`` of each message ``(id, seq, hlc)`` whose position differs from its
    ``seq``: the moves that make the session's numbering its order, 0-based and dense."""
    ordered = sorted(rows, key=lambda r: order_key(*r))
    return {mid: i for i, (mid, seq, _) in enumerate(ordered) if seq != i}


def _index(ops: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for op in ops:
        out.setdefault((str(op.get("resource")), str(op.get("id"))), []).append(op)
    return out


def apply_changes_to(target: ChangeTarget, changes: Iterable[Mapping[str, Any]]) -> list[str]:
    """Apply pulled changes to ``target`` (one open transaction); return touched session ids."""
    pending = _index(target.pending_ops())
    touched: dict[str, None] = {}
    unordered: set[str] = set()  # sessions whose numbering is no longer their order
    for c in changes:
        resource, rid, hlc = c["resource"], str(c["id"]), str(c["hlc"])
        ops = pending.get((resource, rid), [])
        deleted_here = any(op["type"] == "delete" and is_newer(op.get("hlc", ""), hlc) for op in ops)
        if resource == "fact":
            if c.get("deleted") or c.get("data") is None:
                target.drop_fact(rid)
            elif not any(op["type"] == "delete" or is_newer(op.get("hlc", ""), hlc) for op in ops):
                target.put_fact(dict(c["data"], factId=rid))
            continue
        if resource == "session":
            if c.get("deleted") or c.get("data") is None:
                if any(revives(op["type"], op.get("hlc", ""), hlc) for op in ops):
                    continue
                target.drop_session(rid)
                touched[rid] = None
                continue
            if deleted_here:
                continue
            # per field, last writer wins: a newer pending write keeps its fields
            keep = {k for k, h in pending_field_hlcs(ops).items() if is_newer(h, hlc)}
            local = target.get_session(rid)
            rec = dict(local) if local is not None else placeholder_session(rid, 0)
            for k, v in c["data"].items():
                if k in STORE_OWNED_FIELDS or (local is not None and k in keep):
                    continue
                if k == "updatedAt" and local is not None:
                    v = max(int(local.get("updatedAt") or 0), int(v or 0))
                rec[k] = v
            rec["sessionId"] = rid
            target.put_session(rec)
            touched[rid] = None
            continue
        # messages
        if c.get("deleted") or c.get("data") is None:
            old = target.get_message(rid)
            if old is None:
                continue
            target.drop_message(rid)
            sid = old["sessionId"]
            unordered.add(sid)
            sess = target.get_session(sid)
            if sess is not None:
                sess["messageCount"] = max(0, int(sess.get("messageCount", 0)) - 1)
                target.put_session(sess)
            touched[sid] = None
            continue
        held = target.get_message(rid)
        if held is not None:
            mine = {k: v for k, v in held.items() if k not in MESSAGE_PRIVATE_FIELDS}
            if held.get(ORDER_KEY) != hlc and same_message(mine, dict(c["data"], id=rid)):
                # held here under another key (stored before keys existed, or the same
                # import on two devices): the server's is everyone's
                target.set_key(rid, hlc)
                unordered.add(held["sessionId"])
                touched[held["sessionId"]] = None
            continue
        if deleted_here:
            continue
        data = dict(c["data"], id=rid)
        data[ORDER_KEY] = hlc  # the HLC of its create, the same on every device
        sid = data["sessionId"]
        created = int(data.get("createdAt") or 0)
        sess = target.get_session(sid) or placeholder_session(sid, created)
        last = target.last_message(sid)
        # first at the end; a message that belongs earlier renumbers the session below
        data["seq"] = int(sess.get("nextSeq", sess.get("messageCount", 0)))
        count = int(sess.get("messageCount", 0))
        if data["seq"] != count or (
            last is not None
            and order_key(rid, data["seq"], hlc) < order_key(last["id"], last["seq"], last.get(ORDER_KEY))
        ):
            unordered.add(sid)
        sess["nextSeq"] = data["seq"] + 1
        sess["messageCount"] = count + 1
        sess["updatedAt"] = max(int(sess.get("updatedAt") or 0), created)
        target.put_session(sess)
        target.put_message(data)
        touched[sid] = None
    for sid in sorted(unordered):
        sess = target.get_session(sid)
        if sess is None:
            continue
        rows = target.session_order(sid)
        moves = positions(rows)
        if moves:
            target.set_seqs(sid, moves)
        if sess.get("nextSeq") != len(rows) or sess.get("messageCount") != len(rows):
            target.put_session(dict(sess, nextSeq=len(rows), messageCount=len(rows)))
    return list(touched)
