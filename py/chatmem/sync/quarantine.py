"""Pulled records a device cannot use are quarantined one by one, never applied, never a
reason to stall.

A record is quarantined when it fails to decrypt (``"decryption"``: it does not
authenticate, or names a key this device does not hold), fails the record checks
(``"invalid"``), names a resource this version does not know (``"unknown-type"``),
carries an HLC past the clock-skew bound (``"clock-skew"``), or is not even a change
(``"malformed"``). The rest of its page is applied, and the quarantine is written to
the ``kv`` record ``sync.quarantine`` **in the same transaction** as the new cursor, so
the cursor always moves past a bad record and one record can never stop a device.

Nothing quarantined is dropped: one entry per record (a record quarantined again
replaces its entry), each with ``since``, the feed position its page was pulled
from. ``mem.sync.status()`` counts them by kind; ``mem.sync.quarantined()`` lists
them; ``mem.sync.retry_quarantined()`` pulls again from the earliest ``since`` (the
server's feed holds the newest version of each record, so nothing older comes back)
and quarantines again what still fails, e.g. after the right passphrase was entered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypedDict

from ..errors import ValidationError, shown
from ..records.facts import check_fact_record
from ..records.hlc import parse_hlc
from ..records.validation import Limits, check_message_record, check_session_record, check_value, is_id
from .ops import RESOURCES

__all__ = [
    "QUARANTINE_KEY",
    "QUARANTINE_KINDS",
    "QuarantineKind",
    "Quarantined",
    "check_change",
    "kinds",
    "printable",
    "quarantined",
    "retry_from",
    "screen",
    "set_aside",
]

QUARANTINE_KEY = "sync.quarantine"

QuarantineKind = Literal["decryption", "invalid", "unknown-type", "clock-skew", "malformed"]
QUARANTINE_KINDS: tuple[QuarantineKind, ...] = (
    "decryption",
    "invalid",
    "unknown-type",
    "clock-skew",
    "malformed",
)


class Quarantined(TypedDict, total=False):
    """One quarantined record: what it is, why, and where its page began."""

    resource: str | None
    id: str | None
    kind: QuarantineKind
    reason: str
    field: str | None
    #: the change as received (``{"json": text}``, or an excerpt of it)
    change: dict[str, Any]
    #: when it was quarantined (ms), and the feed position its page was pulled from
    at: int
    since: str | None


def quarantined(change: Any, kind: QuarantineKind, reason: str, field: str | None = None) -> Quarantined:
    """The entry of ``change``, set aside as ``kind`` because of ``reason``."""
    c = change if isinstance(change, Mapping) else {}
    resource, rid = c.get("resource"), c.get("id")
    return {
        "resource": resource if isinstance(resource, str) else None,
        "id": rid if is_id(rid) else None,
        "kind": kind,
        "reason": reason,
        "field": field,
        "change": printable(change),
    }


def check_change(c: Any, limits: Limits) -> None:
    """Raise ``ValidationError`` unless ``c`` is a well-formed change with a valid record."""
    if not isinstance(c, Mapping):
        raise ValidationError("a change must be an object", field="change")
    resource, rid, data = c.get("resource"), c.get("id"), c.get("data")
    if resource not in RESOURCES:
        raise ValidationError(f"unknown resource {shown(resource)}", field="resource")
    if not is_id(rid):
        raise ValidationError("id must be a non-empty string of valid Unicode", field="id")
    parse_hlc(c.get("hlc"))
    deleted = c.get("deleted")
    if not isinstance(deleted, bool) or (data is None) != deleted:
        raise ValidationError("deleted must be a bool, true exactly when data is null", field="deleted")
    if data is None:
        return
    if resource == "session":
        check_session_record(data, limits, partial=True)
        if data.get("sessionId", rid) != rid:
            raise ValidationError("data.sessionId differs from the change's id", field="sessionId")
    elif resource == "fact":
        check_value(dict(data), limits, max_bytes=limits.max_message_bytes)
        check_fact_record(dict(data, factId=data.get("factId", rid)))
        if data.get("factId", rid) != rid:
            raise ValidationError("data.factId differs from the change's id", field="factId")
    else:
        check_message_record(dict(data, id=data.get("id", rid)), limits)
        if data.get("id", rid) != rid:
            raise ValidationError("data.id differs from the change's id", field="id")


def screen(changes: Iterable[Any], limits: Limits) -> tuple[list[dict[str, Any]], list[Quarantined]]:
    """``(to apply, quarantined)`` of one page's changes."""
    good: list[dict[str, Any]] = []
    bad: list[Quarantined] = []
    for c in changes:
        try:
            check_change(c, limits)
        except ValidationError as e:
            kind: QuarantineKind = "unknown-type" if e.field == "resource" else "invalid"
            bad.append(quarantined(c, kind, str(e), e.field))
            continue
        good.append({k: c[k] for k in ("resource", "id", "data", "deleted", "hlc")})
    return good, bad


def printable(c: Any) -> dict[str, Any]:
    """The change as it can be stored for inspection (a value that fails the checks may not be storable)."""
    try:
        text = json.dumps(c, ensure_ascii=True, allow_nan=True, default=repr)
    except (ValueError, RecursionError, TypeError):
        return {"unreadable": shown(c, 2000)}
    if len(text) > 64 * 1024:
        return {"excerpt": text[: 64 * 1024]}
    return {"json": text}


def _entries(stored: Any) -> list[Quarantined]:
    items = stored.get("items") if isinstance(stored, Mapping) else None
    return [x for x in items if isinstance(x, Mapping)] if isinstance(items, list) else []  # type: ignore[misc]


def set_aside(
    stored: Any,
    bad: list[Quarantined],
    now_ms: int,
    since: str | None,
    applied: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any] | None:
    """The new ``sync.quarantine`` record, ``{"count": n, "items": [...]}``, with ``bad``
    added (a record already there is replaced by its newer entry; nothing is dropped) and
    the records of the ``applied`` changes taken out (a good version of a quarantined
    record arrived); None when nothing changes."""
    items = _entries(stored)
    fresh = [Quarantined(**b, at=now_ms, since=since) for b in bad]
    gone = {(b.get("resource"), b.get("id")) for b in fresh if b.get("id") is not None}
    if items:
        gone |= {(c.get("resource"), c.get("id")) for c in applied}
    kept = [x for x in items if (x.get("resource"), x.get("id")) not in gone]
    if not fresh and len(kept) == len(items):
        return None
    kept += fresh
    return {"count": len(kept), "items": kept}


def kinds(stored: Any) -> dict[str, int]:
    """How many quarantined records there are of each kind (kinds with none left out)."""
    out: dict[str, int] = {}
    for x in _entries(stored):
        kind = str(x.get("kind", "invalid"))
        out[kind] = out.get(kind, 0) + 1
    return out


def retry_from(stored: Any) -> tuple[bool, str | None]:
    """``(any quarantined, the feed position to pull again from)``: the earliest ``since``
    (None, the start of the feed, when one is unknown)."""
    items = _entries(stored)
    if not items:
        return False, None
    positions = [x.get("since") for x in items]
    if any(not isinstance(p, str) or not (p.isascii() and p.isdigit()) for p in positions):
        return True, None
    return True, min(positions, key=lambda p: int(str(p)))
