"""The merge rules, written once: the client's pull (``stores.changes``, and
``applyChanges`` in the IndexedDB bridge, which must mirror this because no
Python ``await`` may sit inside an IndexedDB transaction) and the reference
server's push (``server.service``) both decide with these functions.

- **Newer wins, by HLC.** HLC strings sort in causal order; a write wins over
  another only when its HLC is strictly greater.
- **Sessions merge per field.** A field takes the value of the write with the
  greatest HLC that set it (``winning_fields``). The server keeps one HLC per
  field; the client's "stored HLC" of a field is that of its newest pending
  (unacknowledged) operation that set it.
- **Delete wins.** A tombstone stays, whatever edits were concurrent with
  it; only a ``create`` with an HLC after the tombstone's revives the record
  (``revives``).
- **Messages are immutable.** A message that exists is never rewritten
  (``same_message`` says whether a second write is the same one).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["is_newer", "winning_fields", "pending_field_hlcs", "revives", "same_message"]


def is_newer(hlc: str, than: str) -> bool:
    """True when ``hlc`` wins over ``than`` (strictly later)."""
    return str(hlc) > str(than)


def winning_fields(data: Mapping[str, Any], hlc: str, field_hlc: Mapping[str, str]) -> list[str]:
    """Fields of ``data`` (written at ``hlc``) that win over the stored ones (their HLCs in ``field_hlc``)."""
    return [k for k in data if is_newer(hlc, field_hlc.get(k, ""))]


def pending_field_hlcs(ops: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The HLC of each field as the client's pending ``create``/``update`` operations set it."""
    out: dict[str, str] = {}
    for op in ops:
        data = op.get("data")
        if op.get("type") in ("create", "update") and isinstance(data, Mapping):
            h = str(op.get("hlc", ""))
            for k in data:
                if is_newer(h, out.get(k, "")):
                    out[k] = h
    return out


def revives(kind: str, hlc: str, tombstone_hlc: str) -> bool:
    """True when an operation of type ``kind`` at ``hlc`` brings a deleted record back."""
    return kind == "create" and is_newer(hlc, tombstone_hlc)


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def same_message(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """True when two writes of one message carry the same data (a harmless repeat). The
    ``seq`` is a position on the sending device, which moves when messages that belong
    earlier arrive there, so it does not count."""
    return _canonical({k: v for k, v in a.items() if k != "seq"}) == _canonical(
        {k: v for k, v in b.items() if k != "seq"}
    )
