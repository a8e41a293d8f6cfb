"""The sync operation: the unit the outbox queues and ``POST /v1/push`` carries.

::

    {"op_id": "01J...", "type": "create" | "update" | "delete",
     "resource": "session" | "message" | "fact",
     "id": "<sessionId, message id or factId>",
     "data": {...} | null, "timestamp": <ms>, "hlc": "<HLC>", "attempts": 0}

- ``op_id`` is the idempotency key: the server applies an ``op_id`` at most once.
- ``data`` is the record (``SessionMeta.to_record()`` / ``ChatMessage.to_record()``
  shape) for ``create``; for a session ``update`` it holds only the changed
  fields (merged per field, last writer by HLC wins); ``null`` for ``delete``.
- Messages are immutable: no ``update`` of a message.
- A fact's ``create`` and ``update`` carry its whole record (``Fact.to_record()``
  shape); the newer write (by HLC) replaces the older one whole. A fact's
  ``delete`` is for ever: nothing brings that fact back.

``validate_op`` is the one place both the client (before enqueueing) and the
reference server (per operation of a push) check that shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from ..errors import ValidationError, shown
from ..records.hlc import parse_hlc
from ..records.validation import INT64_MAX, is_id

__all__ = [
    "OpType",
    "Resource",
    "OP_TYPES",
    "RESOURCES",
    "MAX_ID_LENGTH",
    "SyncOp",
    "make_op",
    "validate_op",
    "op_session_id",
]

OpType = Literal["create", "update", "delete"]
Resource = Literal["session", "message", "fact"]
OP_TYPES: frozenset[str] = frozenset({"create", "update", "delete"})
RESOURCES: frozenset[str] = frozenset({"session", "message", "fact"})
MAX_ID_LENGTH = 200

#: the fields that name a record's own id inside its data
_ID_FIELD = {"session": "sessionId", "message": "id", "fact": "factId"}


class SyncOp(TypedDict):
    op_id: str
    type: OpType
    resource: Resource
    id: str
    data: dict[str, Any] | None
    timestamp: int
    hlc: str
    attempts: int


def _fail(msg: str, field: str) -> ValidationError:
    return ValidationError(msg, field=field)


def _check_id(value: Any, name: str) -> None:
    if not is_id(value):
        raise _fail(
            f"{name} must be a non-empty string of valid Unicode of at most {MAX_ID_LENGTH} characters", name
        )


def _check_count(value: Any, name: str, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT64_MAX:
        raise _fail(f"{name} must be {what} within 64 bits", name)


def validate_op(op: Any) -> SyncOp:
    """Return ``op`` if it is a well-formed operation, else raise ``ValidationError``.

    The error's ``field`` names the offending key. Unknown keys are allowed
    (a newer client may send more); nothing is copied or changed.
    """
    if not isinstance(op, Mapping):
        raise _fail(f"an operation must be an object, got {type(op).__name__}", "op")
    _check_id(op.get("op_id"), "op_id")
    if op.get("type") not in OP_TYPES:
        raise _fail(f"type must be one of {sorted(OP_TYPES)}, got {shown(op.get('type'))}", "type")
    if op.get("resource") not in RESOURCES:
        raise _fail(
            f"resource must be one of {sorted(RESOURCES)}, got {shown(op.get('resource'))}", "resource"
        )
    _check_id(op.get("id"), "id")
    parse_hlc(op.get("hlc"))
    _check_count(op.get("timestamp"), "timestamp", "a non-negative int (ms since the epoch)")
    _check_count(op.get("attempts", 0), "attempts", "a non-negative int")
    kind, resource, data = op["type"], op["resource"], op.get("data")
    if kind == "delete":
        if data is not None and not isinstance(data, Mapping):
            raise _fail("data of a delete must be null (or an object, ignored)", "data")
    else:
        if not isinstance(data, Mapping):
            raise _fail(f"data of a {kind} must be an object", "data")
        if resource == "message" and kind == "update":
            raise _fail("messages are immutable: no update of a message", "type")
        id_field = _ID_FIELD[resource]
        if id_field in data and data[id_field] != op["id"]:
            raise _fail(f"data.{id_field} {shown(data[id_field])} differs from id {shown(op['id'])}", "data")
        if resource == "message":
            _check_id(data.get("sessionId"), "data.sessionId")
    return op  # type: ignore[return-value]


def op_session_id(op: Mapping[str, Any]) -> str | None:
    """The session an operation belongs to (for per-session FIFO), if known from the op itself.

    A session op belongs to its own id; a message create names it in
    ``data.sessionId``; a message delete carries it only if the client put it in
    ``data`` (``{"sessionId": ...}``), so outboxes should do that. A fact belongs to
    no session.
    """
    if op.get("resource") == "session":
        return str(op["id"])
    if op.get("resource") == "fact":
        return None
    data = op.get("data")
    sid = data.get("sessionId") if isinstance(data, Mapping) else None
    return sid if isinstance(sid, str) else None


def make_op(
    *,
    op_id: str,
    type: OpType,
    resource: Resource,
    id: str,
    data: Mapping[str, Any] | None,
    timestamp: int,
    hlc: str,
    attempts: int = 0,
) -> SyncOp:
    """Build and validate an operation (``ValidationError`` if it is malformed)."""
    op: dict[str, Any] = {
        "op_id": op_id,
        "type": type,
        "resource": resource,
        "id": id,
        "data": dict(data) if data is not None else None,
        "timestamp": timestamp,
        "hlc": hlc,
        "attempts": attempts,
    }
    return validate_op(op)
