"""What a push carries: the one place a queued operation becomes its wire form.

An outbox operation that creates a message does not copy the message: its
``data`` is ``None`` and it refers to the stored record (messages are
immutable; a delete is its own, later operation). ``wire_op`` turns an
operation plus the record it refers to into the object ``POST /v1/push``
carries; ``resolve`` reads the referred records for a batch in one store call.
Anything that changes what leaves the device (e.g. encrypting ``data``) wraps
``wire_op``: the outbox drain and the history backfill both go through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..stores.base import MESSAGE_PRIVATE_FIELDS, Store

__all__ = ["WIRE_FIELDS", "is_ref", "wire_op", "resolve"]

#: fields of an outbox record that travel in a push (the rest is local bookkeeping)
WIRE_FIELDS = ("op_id", "type", "resource", "id", "data", "timestamp", "hlc", "attempts")


def is_ref(op: Mapping[str, Any]) -> bool:
    """True if ``op`` refers to a stored message instead of carrying it."""
    return op.get("resource") == "message" and op.get("type") == "create" and op.get("data") is None


def wire_op(op: Mapping[str, Any], record: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The pushed form of ``op``; ``record`` is the stored message a reference op delivers."""
    out = {k: op.get(k) for k in WIRE_FIELDS}
    if record is not None and is_ref(op):  # the record as the message's data: no store fields
        out["data"] = {k: v for k, v in record.items() if k not in MESSAGE_PRIVATE_FIELDS}
    return out


async def resolve(
    store: Store,
    ops: list[dict[str, Any]],
    known: Mapping[str, dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(payload, gone)`` for a batch: the wire form of every op whose message still
    exists, and the reference ops whose message was deleted before it was pushed
    (nothing to deliver: the delete that removed it is queued after them).

    ``known`` holds records the caller already read (by message id).
    """
    known = known or {}
    missing = [op["id"] for op in ops if is_ref(op) and op["id"] not in known]
    found = dict(known)
    if missing:
        for mid, rec in zip(missing, await store.get_messages(missing)):
            if rec is not None:
                found[mid] = rec
    payload: list[dict[str, Any]] = []
    gone: list[dict[str, Any]] = []
    for op in ops:
        if is_ref(op):
            rec = found.get(op["id"])
            if rec is None:
                gone.append(op)
                continue
            payload.append(wire_op(op, rec))
        else:
            payload.append(wire_op(op))
    return payload, gone
