"""The sync rules, independent of HTTP and of the database.

``SyncService.push`` applies one push in one storage transaction; per
operation it answers ``applied``, ``duplicate`` or ``rejected``. The rules
(also in docs/reference/protocol.md):

- an ``op_id`` is applied at most once per space; a repeat answers
  ``duplicate``. Rejected operations are not remembered, so a replay is
  judged again.
- sessions merge **per field, last writer wins by HLC**: a field takes the
  value of the write with the greatest HLC that set it. A ``create`` of a
  session the server already holds merges the same way.
- **delete wins**: a delete tombstones the record (and a session's
  messages), whatever edits were concurrent with it. An ``update`` never
  revives a tombstone; only a ``create`` with an HLC after the tombstone's
  does (restoring a backup). An operation that loses is still ``applied``
  (acknowledged, with a ``reason`` saying it was superseded).
- every operation is checked first (``chatmem.sync.admit``: shape, record,
  HLC at most ``limits.max_clock_skew_ms`` ahead of the server's clock); one
  that fails is ``rejected`` with the reason, the others of the push go on.
- a page of the change feed holds at most ``limits.changes_page_records``
  records and about ``limits.changes_page_bytes`` bytes of record data (at
  least one record, so a page always moves the cursor).
- a fact's ``create`` or ``update`` carries its whole record: the write with
  the greater HLC replaces the stored one whole, an older one is ``applied``
  as superseded. A fact's delete is for ever: a later write of that fact is
  ``applied`` as superseded and its tombstone goes into the feed again, so the
  writer's next pull removes its copy.
- messages are immutable: a create of a message that exists with the same
  data is ``applied`` (no change); with different data it is ``rejected``.
  The server keeps messages whose session it has not seen (the client
  orders a session's operations; it does not check foreign keys).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import ValidationError, shown
from ..records.hlc import validate_device_id
from ..records.ids import Clock, system_clock
from ..records.merge import is_newer, revives, same_message, winning_fields
from ..records.validation import DEFAULT_LIMITS, Limits, is_id, parse_decimal
from ..sync.admit import admit_op
from ..sync.ops import MAX_ID_LENGTH
from . import encryption
from .quotas import Quotas
from .storage import SpaceTransaction, StoredRecord, SyncStorage

__all__ = ["SyncService", "parse_cursor", "MAX_OPS_PER_PUSH", "MAX_CHANGES_LIMIT"]

MAX_OPS_PER_PUSH = 1000
MAX_CHANGES_LIMIT = 1000
DEFAULT_CHANGES_LIMIT = 100

Result = dict[str, Any]


def parse_cursor(value: str | None) -> int:
    """A cursor is the decimal feed position; empty or absent means "from the start"."""
    if value is None or value == "":
        return 0
    cursor = parse_decimal(value)
    if cursor is None:
        raise ValidationError(f"bad cursor {shown(value)}", field="since")
    return cursor


def _touched(ops: list[Any]) -> list[tuple[str, str]]:
    """The records a batch may read: each op's own, and a message's session."""
    keys: list[tuple[str, str]] = []
    for op in ops:
        rid, res, data = op.get("id"), op.get("resource"), op.get("data")
        if isinstance(rid, str) and res in ("session", "message", "fact"):
            keys.append((res, rid))
        if res == "message" and isinstance(data, dict) and isinstance(data.get("sessionId"), str):
            keys.append(("session", data["sessionId"]))
    return keys


def _applied(op_id: str, reason: str | None = None) -> Result:
    out: Result = {"op_id": op_id, "status": "applied"}
    if reason:
        out["reason"] = reason
    return out


def _printable(op_id: Any) -> str:
    """A rejected op's ``op_id`` as its result can carry it: a lone surrogate (which no
    UTF-8 answer can hold) becomes U+FFFD, anything but a string the empty string."""
    if not isinstance(op_id, str):
        return ""
    return op_id[:MAX_ID_LENGTH].encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _rejected(op_id: str, reason: str) -> Result:
    return {"op_id": op_id, "status": "rejected", "reason": reason}


class SyncService:
    def __init__(self, storage: SyncStorage, clock: Clock = system_clock, *, limits: Limits = DEFAULT_LIMITS):
        self.storage = storage
        self.clock = clock
        self.limits = limits
        #: quotas per space (spaces without an entry are unlimited)
        self.quotas: dict[str, Quotas] = {}

    # ------------------------------------------------------------------ push
    def check_push(self, payload: Any) -> tuple[str, list[Any]]:
        """The body's shape (a failure is a 400 for the whole request): an object with a
        ``device_id`` and a list of ``ops``. Each operation is checked on its own by ``push``."""
        if not isinstance(payload, dict):
            raise ValidationError("body must be a JSON object", field="body")
        device_id = validate_device_id(payload.get("device_id"))
        ops = payload.get("ops")
        if not isinstance(ops, list):
            raise ValidationError("ops must be a list", field="ops")
        return device_id, ops

    def _admit(self, op: Any, index: int, now: int) -> Result | None:
        """Why ``op`` is rejected (its result), or None when it may be applied. Runs before
        the store is touched, so nothing unreadable (an id that is not valid Unicode, a
        number past 64 bits) reaches it, and a bad operation never fails its push."""
        op_id = op.get("op_id") if isinstance(op, Mapping) else None
        if not is_id(op_id):
            return {
                "op_id": _printable(op_id),
                "index": index,
                "status": "rejected",
                "reason": "an operation must be an object whose op_id is a non-empty string of valid "
                f"Unicode of at most {MAX_ID_LENGTH} characters",
            }
        try:
            admit_op(op, self.limits, now)
        except ValidationError as e:
            return _rejected(op_id, f"invalid {e.field}: {e}")
        bad_envelope = encryption.check_op(op)
        return None if bad_envelope is None else _rejected(op_id, bad_envelope)

    def push(self, space: str, payload: Any) -> dict[str, Any]:
        """Apply a push body in one transaction; ``ValidationError`` for a malformed batch,
        ``RateLimited``/``StorageFull`` (nothing applied) when the space's quotas
        (``quotas[space]``, set by the HTTP layer from the account) refuse it."""
        quotas = self.quotas.get(space)
        device_id, ops = self.check_push(payload)
        now = self.clock()
        verdicts = [self._admit(op, i, now) for i, op in enumerate(ops)]
        admitted = [op for op, verdict in zip(ops, verdicts) if verdict is None]
        results: list[Result] = []
        with self.storage.transaction(space) as txn:
            encryption.check_push(txn, admitted)
            bytes_before = quotas.admit(txn, len(ops), now) if quotas is not None else 0
            seen = txn.seen_ops([op["op_id"] for op in admitted])
            txn.prefetch(_touched(admitted))
            for op, verdict in zip(ops, verdicts):
                if verdict is not None:
                    results.append(verdict)
                    continue
                op_id = op["op_id"]
                if op_id in seen:
                    results.append({"op_id": op_id, "status": "duplicate"})
                    continue
                result = self._apply(txn, op)
                if result["status"] == "applied":
                    txn.remember_op(op_id, device_id, now)
                    seen.add(op_id)
                results.append(result)
            if quotas is not None:
                quotas.check_bytes(txn, bytes_before)
            cursor = txn.cursor()
        return {"results": results, "cursor": str(cursor)}

    def _apply(self, txn: SpaceTransaction, op: Mapping[str, Any]) -> Result:
        if op["resource"] == "session":
            return self._apply_session(txn, op)
        if op["resource"] == "fact":
            return self._apply_fact(txn, op)
        return self._apply_message(txn, op)

    def _apply_fact(self, txn: SpaceTransaction, op: Mapping[str, Any]) -> Result:
        op_id, fid, h = op["op_id"], op["id"], op["hlc"]
        cur = txn.get("fact", fid)
        if op["type"] == "delete":
            if cur is not None and not cur.deleted:
                cur.data, cur.deleted, cur.hlc = None, True, max(h, cur.hlc)
                txn.put(cur)
                return _applied(op_id)
            if cur is None:
                txn.put(StoredRecord("fact", fid, None, True, h, h))
                return _applied(op_id)
            return _applied(op_id, "already deleted")
        if cur is not None and cur.deleted:
            txn.put(cur)  # into the feed again: the writer's next pull drops its copy
            return _applied(op_id, "superseded: the fact was deleted")
        if cur is not None and not is_newer(h, cur.hlc):
            return _applied(op_id, "superseded: the stored version is newer")
        data = dict(op["data"])  # an encrypted one is only its envelope: its id travels beside it
        birth = cur.birth_hlc if cur is not None else h
        txn.put(StoredRecord("fact", fid, data, False, h, birth))
        return _applied(op_id)

    def _apply_session(self, txn: SpaceTransaction, op: Mapping[str, Any]) -> Result:
        op_id, sid, h, kind = op["op_id"], op["id"], op["hlc"], op["type"]
        cur = txn.get("session", sid)
        if kind == "delete":
            return self._delete(txn, op, cur)
        data = {k: v for k, v in op["data"].items() if k != "sessionId"}
        if cur is None or (cur.deleted and revives(kind, h, cur.hlc)):
            rec = StoredRecord(
                resource="session",
                id=sid,
                data={"sessionId": sid, **data},
                deleted=False,
                hlc=h,
                birth_hlc=h,
                field_hlc={k: h for k in data},
            )
            if cur is None and kind == "update":
                return _rejected(op_id, f"session {shown(sid)} does not exist on the server")
            txn.put(rec)
            return _applied(op_id, "re-created after a delete" if cur is not None else None)
        if cur.deleted:
            return _applied(op_id, "superseded: the session was deleted")
        assert cur.data is not None
        newer = winning_fields(data, h, cur.field_hlc)
        for k in newer:
            cur.data[k] = data[k]
            cur.field_hlc[k] = h
        if not newer:
            return _applied(op_id, "superseded: no field newer than the stored ones")
        if is_newer(h, cur.hlc):
            cur.hlc = h
        txn.put(cur)
        return _applied(op_id)

    def _apply_message(self, txn: SpaceTransaction, op: Mapping[str, Any]) -> Result:
        op_id, mid, h, kind = op["op_id"], op["id"], op["hlc"], op["type"]
        cur = txn.get("message", mid)
        if kind == "delete":
            return self._delete(txn, op, cur)
        data = {**op["data"], "id": mid}
        sid = data["sessionId"]
        session = txn.get("session", sid)
        if session is not None and session.deleted:
            return _applied(op_id, "superseded: its session was deleted")
        if cur is not None and not cur.deleted:
            if cur.session_id == sid and cur.data is not None and same_message(cur.data, data):
                return _applied(op_id, "already stored")
            return _rejected(
                op_id, f"message {shown(mid)} exists with different data (messages are immutable)"
            )
        if cur is not None and not revives(kind, h, cur.hlc):
            return _applied(op_id, "superseded: the message was deleted")
        txn.put(
            StoredRecord(
                resource="message",
                id=mid,
                data=data,
                deleted=False,
                hlc=h,
                birth_hlc=h,
                session_id=sid,
            )
        )
        return _applied(op_id, "re-created after a delete" if cur is not None else None)

    def _delete(self, txn: SpaceTransaction, op: Mapping[str, Any], cur: StoredRecord | None) -> Result:
        op_id, rid, h, resource = op["op_id"], op["id"], op["hlc"], op["resource"]
        if cur is not None and cur.deleted:
            return _applied(op_id, "already deleted")
        if cur is not None and not is_newer(h, cur.birth_hlc):
            return _applied(op_id, "superseded: re-created after this delete")
        sid: str | None = None
        if resource == "message":
            given = op.get("data") or {}
            sid = cur.session_id if cur is not None else given.get("sessionId")
            sid = sid if isinstance(sid, str) else None
        tomb_hlc = max(h, cur.hlc) if cur is not None else h
        txn.put(
            StoredRecord(
                resource=resource,
                id=rid,
                data=None,
                deleted=True,
                hlc=tomb_hlc,
                birth_hlc=cur.birth_hlc if cur is not None else h,
                session_id=sid,
            )
        )
        if resource == "session":
            for msg in txn.live_messages(rid):
                msg.data, msg.deleted, msg.hlc = None, True, max(msg.hlc, tomb_hlc)
                txn.put(msg)
        return _applied(op_id)

    # ------------------------------------------------------------------ changes
    def changes(self, space: str, since: str | None, limit: str | int | None) -> dict[str, Any]:
        """One page of the change feed; ``ValidationError`` for a bad cursor or limit."""
        start = parse_cursor(since)
        if limit is None or limit == "":
            n = DEFAULT_CHANGES_LIMIT
        elif isinstance(limit, int) and not isinstance(limit, bool):
            n = limit
        elif (parsed := parse_decimal(limit)) is not None:
            n = parsed
        else:
            raise ValidationError(f"bad limit {shown(limit)}", field="limit")
        if n < 1:
            raise ValidationError("limit must be at least 1", field="limit")
        n = min(n, MAX_CHANGES_LIMIT, self.limits.changes_page_records)
        if start > self.storage.cursor(space):
            raise ValidationError(
                "cursor is ahead of this server's feed (was its data reset?): pull from the start",
                field="since",
            )
        rows = self.storage.changes(space, start, n + 1)
        page, more = rows[:n], len(rows) > n
        budget = self.limits.changes_page_bytes
        for i, r in enumerate(page):
            budget -= len(json.dumps(r.data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")) + 200
            if budget < 0 and i > 0:  # the page ends before the record that passes the budget
                page, more = page[:i], True
                break
        return {
            "changes": [
                {
                    "resource": r.resource,
                    "id": r.id,
                    "data": r.data,
                    "deleted": r.deleted,
                    "hlc": r.hlc,
                }
                for r in page
            ],
            "cursor": str(page[-1].seq if page else start),
            "more": more,
        }
