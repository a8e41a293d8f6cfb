"""What a sync server checks of each pushed operation before it applies it.

``admit_op(op, limits, now_ms)`` runs, in order:

1. the operation's shape (``chatmem.sync.ops.validate_op``);
2. its HLC: not more than ``limits.max_clock_skew_ms`` ahead of the server's
   clock (``ClockSkew``), so no client can make its writes win forever;
3. its record: a session ``create`` or ``update`` carries known session fields
   of the right types (the server merges them per field), a message ``create``
   a whole message record (``chatmem.records.validation``: fields, types, ranges, sizes,
   nesting, valid Unicode, 64-bit integers, no NaN), a fact ``create`` or
   ``update`` a whole fact record (``chatmem.records.facts.check_fact_record``);
   a ``delete``'s data is at most ``{"sessionId": ...}``. End-to-end encrypted data (``chatmem.sync.encryption``
   envelopes) cannot be read here: only its JSON and size are checked; the
   receiving client checks the decrypted record.

Any failure raises ``ValidationError``: the server answers ``rejected`` for
that operation (with the reason) and goes on with the others of the push. The
module knows nothing of storage, so every backend gets the same checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ValidationError, shown
from ..records.facts import check_fact_record
from ..records.hlc import check_skew
from ..records.validation import Limits, check_message_record, check_session_record, check_value
from .encryption import is_envelope
from .ops import SyncOp, validate_op

__all__ = ["admit_op"]


def admit_op(op: Any, limits: Limits, now_ms: int) -> SyncOp:
    """Return ``op`` if a server may apply it, else raise ``ValidationError`` (see the module docstring)."""
    valid = validate_op(op)
    check_skew(valid["hlc"], now_ms, limits.max_clock_skew_ms)
    kind, resource, data = valid["type"], valid["resource"], valid.get("data")
    if kind == "delete":
        if isinstance(data, Mapping):
            extra = [k for k in data if k != "sessionId"]
            if extra:
                raise ValidationError(
                    f"a delete carries only sessionId in its data, not {shown(extra[0])}", field="data"
                )
            check_value(dict(data), limits, max_bytes=1024)
        return valid
    assert isinstance(data, Mapping)
    if any(is_envelope(v) for v in data.values()):
        # end-to-end encrypted: the server cannot read the record (the client checks it after
        # decrypting); the envelope itself must still be safe JSON of a bounded size
        check_value(dict(data), limits, max_bytes=limits.max_message_bytes)
        return valid
    if resource == "session":
        check_session_record(data, limits, partial=True)
    elif resource == "fact":
        check_value(dict(data), limits, max_bytes=limits.max_message_bytes)
        check_fact_record({**data, "factId": valid["id"]})
    else:
        check_message_record({**data, "id": valid["id"]}, limits)
    return valid
