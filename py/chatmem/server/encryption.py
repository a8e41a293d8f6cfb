"""End-to-end encryption on the reference server: it keeps a space's public
key parameters and moves ciphertext around, and never needs (or could read)
content. It reads only the envelopes' routing fields (``k``, ``op``, ``hlc``).

State per space (``meta`` ``"e2e"``)::

    {"current": <key params> | null, "pending": <key params> | null}

``current`` null: the space is plain. ``pending`` set: a (re-)encryption is in
progress — a device rewrites every record to the pending key, then commits
(``current`` := ``pending``). While pending, pushes under the current key (or
plain, if the space was plain) are still accepted and simply join the records
left to rewrite; once a key is current, plain content and other keys are
refused with 409, so the device learns of the change before anything is lost.

HTTP (all with the space's Bearer key; bodies and answers are JSON)::

    GET  /v1/e2e                       -> state
    POST /v1/e2e/begin   {"params", "from": key_id|null} -> state
    GET  /v1/e2e/pending ?after=&limit= -> {"records": [...], "after", "more"}
    POST /v1/e2e/rewrite {"key_id", "records": [{"resource","id","hlc","data"}]}
                                       -> {"results": [{"resource","id","status"}]}
    POST /v1/e2e/commit  {"key_id"}    -> state
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import EncryptionConflict as E2EConflict
from ..errors import ValidationError, shown
from ..records.validation import is_id, parse_decimal
from ..sync.encryption import (
    MESSAGE_FIELD,
    PLAIN_FIELDS,
    WHOLE_RECORD,
    KeyParams,
    envelope_key_ids,
    envelope_problem,
    is_encrypted_data,
    is_envelope,
)
from .storage import SpaceTransaction, SyncStorage

__all__ = ["E2EConflict", "E2EService", "check_push", "check_op", "META", "CAPABILITY"]

META = "e2e"
#: advertised in ``GET /v1/health`` ``capabilities``
CAPABILITY = "e2e-v1"
MAX_REWRITE = 1000
_SCAN = 500


def _state(txn: SpaceTransaction) -> dict[str, Any]:
    st = txn.meta_get(META)
    return st if isinstance(st, dict) else {"current": None, "pending": None}


def _kid(params: Any) -> str | None:
    return str(params["key_id"]) if isinstance(params, dict) else None


def check_push(txn: SpaceTransaction, ops: list[Any]) -> None:
    """Refuse (409) a push whose content does not fit the space's encryption state."""
    st = _state(txn)
    current, pending = _kid(st.get("current")), _kid(st.get("pending"))
    allowed = {k for k in (current, pending) if k}
    for op in ops:
        data = op.get("data") if isinstance(op, dict) else None
        if not isinstance(data, Mapping) or op.get("type") == "delete":
            continue
        for kid in envelope_key_ids(data):
            if kid is None and current is not None:
                raise E2EConflict(
                    "e2e-required",
                    "this space is end-to-end encrypted: plain content is refused; "
                    "set the passphrase on this device",
                )
            if kid is not None and kid not in allowed:
                raise E2EConflict(
                    "e2e-key-changed",
                    "the space's encryption key changed: enter the new passphrase on this device",
                )


def check_op(op: Mapping[str, Any]) -> str | None:
    """Why an operation's encrypted record is not well formed (None when it is, or when the
    record is plain): beside its plain routing ids (valid ids) it holds only envelopes
    (``envelope_problem``), a message's whole record in the one field ``e2e``. A record
    no device could read is refused here, once, instead of on every device that pulls it."""
    data = op.get("data")
    if not isinstance(data, Mapping) or op.get("type") == "delete":
        return None
    if not any(is_envelope(v) for v in data.values()):
        return None
    whole = op["resource"] in WHOLE_RECORD
    plain = _PLAIN_OF.get(op["resource"], PLAIN_FIELDS)
    for name, value in data.items():
        if name in plain:
            if not is_id(value):
                return f"the plain {name} of an encrypted record is not an id"
            continue
        why = envelope_problem(value, op["op_id"], op["hlc"])
        if why is not None:
            return f"the envelope of field {shown(name)} {why}"
    if whole and set(data) - plain != {MESSAGE_FIELD}:
        return f"an encrypted {op['resource']} holds its whole record in the one envelope {MESSAGE_FIELD!r}"
    return None


#: what an encrypted message or fact keeps plain (its own id travels as the operation's)
_PLAIN_OF: dict[str, frozenset[str]] = {"message": frozenset({"sessionId"}), "fact": frozenset()}


def _params(value: Any, field: str) -> dict[str, Any]:
    try:
        return KeyParams.from_dict(value).to_dict()
    except ValidationError as e:
        raise ValidationError(f"{field}: {e}", field=field) from e


class E2EService:
    """The ``/v1/e2e`` endpoints over a ``SyncStorage``."""

    def __init__(self, storage: SyncStorage):
        self.storage = storage

    def state(self, space: str) -> dict[str, Any]:
        with self.storage.transaction(space) as txn:
            return _state(txn)

    def begin(self, space: str, body: Any) -> dict[str, Any]:
        """Start (or, with the same params, resume) encrypting the space to a new key."""
        if not isinstance(body, dict):
            raise ValidationError("body must be a JSON object", field="body")
        params = _params(body.get("params"), "params")
        with self.storage.transaction(space) as txn:
            st = _state(txn)
            if _kid(st.get("current")) != body.get("from"):
                raise E2EConflict("e2e-key-changed", "'from' is not the space's current key")
            pending = st.get("pending")
            if pending is not None and pending != params:
                raise E2EConflict(
                    "e2e-change-in-progress",
                    "another passphrase change is in progress: finish it with that passphrase",
                )
            st["pending"] = params
            txn.meta_put(META, st)
            return st

    def _needs_rewrite(self, data: Any, target: str) -> bool:
        ids = envelope_key_ids(data)
        return bool(ids) and ids != {target}

    def _target(self, space: str) -> str:
        st = self.state(space)
        target = _kid(st.get("pending"))
        if target is None:
            raise E2EConflict("e2e-not-started", "no encryption change is in progress")
        return target

    def pending(self, space: str, after: str | None, limit: str | None) -> dict[str, Any]:
        """Live records not (wholly) under the pending key, in feed order after ``after``."""
        target = self._target(space)
        start = parse_decimal(after) or 0
        n = parse_decimal(limit) or 100
        n = max(1, min(n, MAX_REWRITE))
        found: list[dict[str, Any]] = []
        last, more = start, True
        while len(found) < n:
            rows = self.storage.changes(space, last, _SCAN)
            if not rows:
                more = False
                break
            for r in rows:
                last = r.seq
                if not r.deleted and self._needs_rewrite(r.data, target):
                    found.append({"resource": r.resource, "id": r.id, "hlc": r.hlc, "data": r.data})
                    if len(found) >= n:
                        break
        return {"records": found, "after": str(last), "more": more}

    def rewrite(self, space: str, body: Any) -> dict[str, Any]:
        """Replace records' data by their re-encryption; their merge state (HLCs) stays."""
        if not isinstance(body, dict) or not isinstance(body.get("records"), list):
            raise ValidationError("body must be an object with a records list", field="records")
        if len(body["records"]) > MAX_REWRITE:
            raise ValidationError(f"at most {MAX_REWRITE} records per rewrite", field="records")
        key_id = body.get("key_id")
        results = []
        with self.storage.transaction(space) as txn:
            if _kid(_state(txn).get("pending")) != key_id or key_id is None:
                raise E2EConflict("e2e-key-changed", "key_id is not the pending key")
            for i, rec in enumerate(body["records"]):
                if not isinstance(rec, dict) or not is_id(rec.get("id")):
                    raise ValidationError(
                        f"records[{i}] is not a record with an id", field="records", index=i
                    )
                results.append(
                    {
                        "resource": rec.get("resource"),
                        "id": rec["id"],
                        "status": self._rewrite_one(txn, rec, key_id),
                    }
                )
        return {"results": results}

    def _rewrite_one(self, txn: SpaceTransaction, rec: Mapping[str, Any], key_id: str) -> str:
        cur = txn.get(str(rec.get("resource")), rec["id"])
        if cur is None or cur.deleted or cur.data is None:
            return "gone"
        if not self._needs_rewrite(cur.data, key_id):
            return "already"
        if cur.hlc != rec.get("hlc"):
            return "changed"
        data = rec.get("data")
        if not isinstance(data, dict) or envelope_key_ids(data) != {key_id}:
            return "rejected"
        if not is_encrypted_data(cur.resource, data):
            return "rejected"
        if any(envelope_problem(v, None, None) for k, v in data.items() if k not in PLAIN_FIELDS):
            return "rejected"
        if cur.resource == "session":
            if set(data) != set(cur.data) or data.get("sessionId") != cur.id:
                return "rejected"
        elif cur.resource == "fact":
            if set(data) != {MESSAGE_FIELD}:
                return "rejected"
        else:
            if not set(data) <= PLAIN_FIELDS | {"e2e"} or data.get("sessionId") != cur.session_id:
                return "rejected"
            data = {**data, "id": cur.id}
        cur.data = data
        txn.put(cur)
        return "rewritten"

    def commit(self, space: str, body: Any) -> dict[str, Any]:
        """Make the pending key current, once no live record is left under another key."""
        key_id = body.get("key_id") if isinstance(body, dict) else None
        target = self._target(space)
        if key_id != target:
            raise E2EConflict("e2e-key-changed", "key_id is not the pending key")
        seen, left = 0, 0
        while True:
            rows = self.storage.changes(space, seen, _SCAN)
            if not rows:
                break
            seen = rows[-1].seq
            left += sum(1 for r in rows if not r.deleted and self._needs_rewrite(r.data, target))
        with self.storage.transaction(space) as txn:
            if left or txn.cursor() != seen:
                raise E2EConflict("e2e-not-done", f"{left or 'some'} records are not yet under the new key")
            st = _state(txn)
            st["current"], st["pending"] = st["pending"], None
            txn.meta_put(META, st)
        purge = getattr(self.storage, "purge", None)
        if purge is not None:
            purge()
        return st
