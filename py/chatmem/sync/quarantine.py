"""Pulled changes that fail validation are set aside, never applied, never a reason to stall.

``screen(changes, limits)`` splits one page of ``/v1/changes`` into the
changes to apply and the ones to set aside (with the reason). The pull
applies the good ones and stores the set-aside ones in the ``kv`` record
``sync.quarantine`` **in the same transaction** as the new cursor, so the
cursor always moves past a bad change and one bad record can never stop a
device from syncing. ``mem.sync.status().quarantined`` counts them;
``mem.sync.quarantined()`` lists them (newest ``KEEP`` kept for inspection);
``mem.sync.clear_quarantine()`` forgets them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ValidationError, shown
from ..validation import Limits, check_message_record, check_session_record
from .hlc import parse_hlc
from .ops import MAX_ID_LENGTH, RESOURCES

__all__ = ["QUARANTINE_KEY", "KEEP", "check_change", "printable", "screen", "set_aside"]

QUARANTINE_KEY = "sync.quarantine"
#: set-aside changes kept for inspection (the oldest are dropped first; the count keeps growing)
KEEP = 100


def check_change(c: Any, limits: Limits) -> None:
    """Raise ``ValidationError`` unless ``c`` is a well-formed change with a valid record."""
    if not isinstance(c, Mapping):
        raise ValidationError("a change must be an object", field="change")
    resource, rid, data = c.get("resource"), c.get("id"), c.get("data")
    if resource not in RESOURCES:
        raise ValidationError(f"unknown resource {shown(resource)}", field="resource")
    if not isinstance(rid, str) or not 0 < len(rid) <= MAX_ID_LENGTH:
        raise ValidationError("id must be a non-empty string", field="id")
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
    else:
        check_message_record(dict(data, id=data.get("id", rid)), limits)
        if data.get("id", rid) != rid:
            raise ValidationError("data.id differs from the change's id", field="id")


def screen(changes: Iterable[Any], limits: Limits) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(to apply, set aside)``: each set-aside entry is ``{change, reason, field}``."""
    good: list[dict[str, Any]] = []
    bad: list[dict[str, Any]] = []
    for c in changes:
        try:
            check_change(c, limits)
        except ValidationError as e:
            bad.append({"change": printable(c), "reason": str(e), "field": e.field})
            continue
        good.append({k: c[k] for k in ("resource", "id", "data", "deleted", "hlc")})
    return good, bad


def printable(c: Any) -> Any:
    """The change as it can be stored for inspection (a value that fails the checks may not be storable)."""
    try:
        text = json.dumps(c, ensure_ascii=True, allow_nan=True, default=repr)
    except (ValueError, RecursionError, TypeError):
        return {"unreadable": repr(c)[:2000]}
    if len(text) > 64 * 1024:
        return {"excerpt": text[:64 * 1024]}
    return {"json": text}


def set_aside(stored: Any, bad: list[dict[str, Any]], now_ms: int, cursor: str | None) -> dict[str, Any]:
    """The new ``sync.quarantine`` record: ``{"count": n, "items": [...]}`` with ``bad`` added."""
    rec = stored if isinstance(stored, Mapping) else {}
    items = [x for x in rec.get("items", []) if isinstance(x, Mapping)]
    count = rec.get("count", len(items))
    count = count if isinstance(count, int) and not isinstance(count, bool) else len(items)
    items += [dict(b, at=now_ms, cursor=cursor) for b in bad]
    return {"count": count + len(bad), "items": items[-KEEP:]}
