"""What chatmem knows about the person: ``Fact`` (one statement, one version), the
``FactOp`` an extractor proposes and the ``FactReport`` of an extraction.

A fact is about one ``user_id`` and, unless ``character_id`` is ``None``, known
to one character only. ``key`` names the slot ("home", "likes",
"family.sister"...), ``value`` is its short normalised value and ``text`` the
sentence a person reads ("Lives in Porto"). A fact is true from
``valid_from`` until ``valid_to`` (``None`` while it still is); a new version
of a fact supersedes the old one (``status="superseded"``, ``superseded_by``
naming the new one), so ``history`` can tell "lived in Lisbon until March".

Stored records are the camelCase dicts of ``Fact.to_record``, one per fact
version, in the store's ``facts`` table or object store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ValidationError, shown
from .validation import check_id

__all__ = [
    "Fact",
    "FactOp",
    "FactReport",
    "FactStatus",
    "FactOrigin",
    "FACT_STATUSES",
    "FACT_ORIGINS",
    "SINGLE_VALUED",
    "MULTI_VALUED",
    "MAX_KEY",
    "MAX_VALUE",
    "MAX_TEXT",
    "check_fact_record",
    "check_key",
    "check_value",
    "check_text",
    "check_importance",
]

FactStatus = Literal["active", "superseded", "invalidated", "pending"]
FactOrigin = Literal["extracted", "user", "imported"]
FACT_STATUSES: frozenset[str] = frozenset({"active", "superseded", "invalidated", "pending"})
FACT_ORIGINS: frozenset[str] = frozenset({"extracted", "user", "imported"})

#: slots with one value at a time: a new value supersedes the old
SINGLE_VALUED = frozenset(
    {"name", "preferred_name", "home", "job", "employer", "birthday", "partner", "diet"}
)
#: slots whose values live side by side (and ``family.<relation>``); an unknown key is one of these
MULTI_VALUED = frozenset({"likes", "dislikes", "allergy", "pet", "language", "goal"})

#: bounds of a fact's strings (characters): a key and a value are short, a text one sentence
MAX_KEY = 64
MAX_VALUE = 200
MAX_TEXT = 500


def check_key(key: Any) -> str:
    """``key`` if it is a slot name: 1-64 characters of lower-case letters, digits, ``_``
    and ``.`` (``family.sister``), else ``ValidationError``."""
    if (
        not isinstance(key, str)
        or not 0 < len(key) <= MAX_KEY
        or not all(c.isascii() and (c.islower() or c.isdigit() or c in "._") for c in key)
        or key.startswith(".")
        or key.endswith(".")
    ):
        raise ValidationError(
            f"key must be 1-{MAX_KEY} lower-case letters, digits, '_' or '.', got {shown(key)}", field="key"
        )
    return key


def _short(value: Any, name: str, most: int) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > most:
        raise ValidationError(
            f"{name} must be a non-empty string of at most {most} characters, got {shown(value)}", field=name
        )
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError(f"{name} must be valid Unicode text", field=name) from None
    return " ".join(value.split())


def check_value(value: Any) -> str:
    """``value`` as stored (whitespace collapsed) if it is a short string, else ``ValidationError``."""
    return _short(value, "value", MAX_VALUE)


def check_text(text: Any) -> str:
    """``text`` as stored (whitespace collapsed) if it is one readable sentence, else ``ValidationError``."""
    return _short(text, "text", MAX_TEXT)


def check_importance(importance: Any) -> float:
    """``importance`` as a float in 0-1, else ``ValidationError``."""
    ok = isinstance(importance, (int, float)) and not isinstance(importance, bool)
    if not ok or not 0.0 <= float(importance) <= 1.0:
        raise ValidationError(
            f"importance must be a number from 0 to 1, got {shown(importance)}", field="importance"
        )
    return float(importance)


@dataclass(frozen=True)
class Fact:
    """One version of one thing known about the person."""

    fact_id: str
    user_id: str
    character_id: str | None
    key: str
    value: str
    text: str
    status: FactStatus
    valid_from: int
    valid_to: int | None
    created_at: int
    updated_at: int
    source_ids: tuple[str, ...] = ()
    origin: FactOrigin = "user"
    importance: float = 0.5
    pinned: bool = False
    superseded_by: str | None = None

    def to_record(self) -> dict[str, Any]:
        return {
            "factId": self.fact_id,
            "userId": self.user_id,
            "characterId": self.character_id,
            "key": self.key,
            "value": self.value,
            "text": self.text,
            "status": self.status,
            "validFrom": self.valid_from,
            "validTo": self.valid_to,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "sourceIds": list(self.source_ids),
            "origin": self.origin,
            "importance": self.importance,
            "pinned": self.pinned,
            "supersededBy": self.superseded_by,
        }

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> Fact:
        return cls(
            fact_id=r["factId"],
            user_id=r["userId"],
            character_id=r.get("characterId"),
            key=r["key"],
            value=r["value"],
            text=r["text"],
            status=r["status"],
            valid_from=int(r["validFrom"]),
            valid_to=None if r.get("validTo") is None else int(r["validTo"]),
            created_at=int(r["createdAt"]),
            updated_at=int(r["updatedAt"]),
            source_ids=tuple(r.get("sourceIds") or ()),
            origin=r.get("origin", "user"),
            importance=float(r.get("importance", 0.5)),
            pinned=bool(r.get("pinned", False)),
            superseded_by=r.get("supersededBy"),
        )

    def true_at(self, ts: int) -> bool:
        """Whether the fact held at ``ts`` (ms): ``valid_from <= ts < valid_to``."""
        return self.valid_from <= ts and (self.valid_to is None or ts < self.valid_to)


#: record key -> kind, for ``check_fact_record``
_FACT_FIELDS: dict[str, str] = {
    "factId": "id",
    "userId": "id",
    "characterId": "id?",
    "key": "key",
    "value": "value",
    "text": "text",
    "status": "status",
    "validFrom": "time",
    "validTo": "time?",
    "createdAt": "time",
    "updatedAt": "time",
    "sourceIds": "ids",
    "origin": "origin",
    "importance": "importance",
    "pinned": "bool",
    "supersededBy": "id?",
}


def check_fact_record(rec: Any) -> dict[str, Any]:
    """``rec`` if it is a complete fact record (every field, nothing else, each of its
    kind), else ``ValidationError`` naming the field: what a store, an import or a sync
    peer may hand over."""
    if not isinstance(rec, Mapping):
        raise ValidationError(f"a fact record must be an object, got {shown(rec)}", field="fact")
    unknown = [k for k in rec if k not in _FACT_FIELDS]
    if unknown:
        raise ValidationError(f"unknown fact field {shown(unknown[0])}", field=str(unknown[0]))
    for k, kind in _FACT_FIELDS.items():
        if k not in rec:
            raise ValidationError(f"fact field {k} is required", field=k)
        v = rec[k]
        if kind.endswith("?"):
            if v is None:
                continue
            kind = kind[:-1]
        if kind == "id":
            check_id(v, k)
        elif kind == "key":
            check_key(v)
        elif kind == "value":
            check_value(v)
        elif kind == "text":
            check_text(v)
        elif kind == "status" and v not in FACT_STATUSES:
            raise ValidationError(f"status must be one of {sorted(FACT_STATUSES)}, got {shown(v)}", field=k)
        elif kind == "origin" and v not in FACT_ORIGINS:
            raise ValidationError(f"origin must be one of {sorted(FACT_ORIGINS)}, got {shown(v)}", field=k)
        elif kind == "time" and (not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**63):
            raise ValidationError(
                f"{k} must be a time in ms (a non-negative 64-bit int), got {shown(v)}", field=k
            )
        elif kind == "ids":
            if not isinstance(v, list):
                raise ValidationError(f"{k} must be a list of message ids, got {shown(v)}", field=k)
            for i, x in enumerate(v):
                check_id(x, f"{k}[{i}]")
        elif kind == "importance":
            check_importance(v)
        elif kind == "bool" and not isinstance(v, bool):
            raise ValidationError(f"{k} must be true or false, got {shown(v)}", field=k)
    return dict(rec)


@dataclass(frozen=True)
class FactOp:
    """What an extractor proposes: ``add`` a fact, ``update`` one (``fact_id``) to a new
    value, or ``invalidate`` one (it is no longer true)."""

    op: Literal["add", "update", "invalidate"]
    key: str
    value: str
    text: str = ""
    fact_id: str | None = None
    source_ids: tuple[str, ...] = ()
    importance: float | None = None


@dataclass
class FactReport:
    """What one extraction did."""

    added: int = 0
    superseded: int = 0
    invalidated: int = 0
    reinforced: int = 0
    pending: int = 0
    #: user messages read
    processed: int = 0
    #: what went wrong (an extractor's or provider's error), nothing written for it
    errors: list[Exception] = field(default_factory=list)
