"""The one validation of what enters chatmem: JSON values, session and message records.

Every way a record comes in runs it: the API (``messages.append``,
``sessions.create``/``update``), import, the sync server on push (a failure
rejects that one operation) and the client on pull (a failure sets that one
change aside). Nothing here touches a store.

``Limits`` holds the configurable bounds; ``DEFAULT_LIMITS`` is what a
``Memory`` and the reference server use unless given others. Checks made on
every value, whatever the limits:

- only JSON types (``dict`` with ``str`` keys, ``list``, ``str``, ``int``,
  finite ``float``, ``bool``, ``None``): no NaN or Infinity;
- text is valid Unicode (no lone surrogates: it must encode as UTF-8);
- integers fit in 64 bits (``-2**63 .. 2**63-1``);
- nesting is at most ``Limits.max_depth`` levels;
- the record's JSON is at most ``max_message_bytes`` / ``max_session_bytes``.

What fails raises ``ValidationError`` (a bound that was passed:
``LimitExceeded``, naming the limit).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeGuard

from ..errors import LimitExceeded, ValidationError, shown
from .models import MESSAGE_FIELDS, validate_message_fields

__all__ = [
    "Limits",
    "DEFAULT_LIMITS",
    "INT64_MIN",
    "INT64_MAX",
    "MESSAGE_KEY_FIELD",
    "MESSAGE_RECORD_FIELDS",
    "SESSION_RECORD_FIELDS",
    "IMPORT_NESTING",
    "check_id",
    "check_nonneg_int",
    "check_ids",
    "is_id",
    "parse_decimal",
    "check_shape",
    "check_value",
    "loads_json",
    "check_message_record",
    "check_session_record",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_MAX_ID = 200


@dataclass(frozen=True)
class Limits:
    """Bounds on what chatmem accepts (sizes in bytes of UTF-8 JSON)."""

    #: one message record (content, parts, metadata and all)
    max_message_bytes: int = 4 * 1024 * 1024
    #: one session record (title, tags, ...)
    max_session_bytes: int = 256 * 1024
    #: nesting of lists and objects inside one record (the record itself is level 1)
    max_depth: int = 64
    #: one import (JSON text, or the records of an already-parsed import)
    max_import_bytes: int = 512 * 1024 * 1024
    #: one page of ``GET /v1/changes``: at most this many bytes ...
    changes_page_bytes: int = 4 * 1024 * 1024
    #: ... and at most this many records
    changes_page_records: int = 1000
    #: how far (ms) an HLC may be ahead of the receiver's clock
    max_clock_skew_ms: int = 5 * 60 * 1000

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValidationError(f"{f.name} must be a positive int, got {shown(v)}", field=f.name)
        if self.max_depth > 500:
            raise ValidationError("max_depth must be at most 500", field="max_depth")


DEFAULT_LIMITS = Limits()


def _where(path: str) -> str:
    if len(path) > 80:
        path = path[:77] + "..."
    return f"{path}: " if path else ""


def _path(root: str, loc: Any) -> str:
    """The dotted path of a value from its ``loc`` chain ((parent, key) pairs; None at the root)."""
    keys: list[str | int] = []
    while loc is not None:
        loc, key = loc
        keys.append(key)
    where = root
    for key in reversed(keys):
        if isinstance(key, int):
            where = f"{where}[{key}]"
        else:
            where = f"{where}.{key}" if where else key
    return where


def check_value(
    value: Any,
    limits: Limits = DEFAULT_LIMITS,
    *,
    path: str = "",
    field: str | None = None,
    max_bytes: int | None = None,
    limit_name: str = "max_message_bytes",
) -> int:
    """Check one JSON value (see the module docstring); return its size in UTF-8 JSON bytes.

    Iterative (no recursion): a value nested far past ``max_depth`` is refused
    without touching Python's recursion limit. A value's path is spelled out
    only for an error message.
    """
    size = 0
    max_depth = limits.max_depth
    # (value, depth, where: a (parent, key) chain, the record field it belongs to)
    stack: list[tuple[Any, int, Any, str | None]] = [(value, 1, None, field)]
    pop, push = stack.pop, stack.append
    while stack:
        v, depth, loc, fname = pop()
        t = type(v)
        if t is str:
            if v.isascii():
                size += len(v) + v.count('"') + v.count("\\") + 2
            else:
                size += _text_bytes(v, path, loc, fname) + 2
        elif v is None or t is bool:
            size += 5
        elif t is dict or t is list or isinstance(v, (dict, list)):
            if depth > max_depth:
                raise LimitExceeded(
                    f"{_where(_path(path, loc))}nested deeper than {max_depth} levels",
                    limit="max_depth",
                    maximum=max_depth,
                    field=fname,
                )
            if isinstance(v, dict):
                top = fname is None and depth == 1
                for k, item in v.items():
                    if type(k) is not str and not isinstance(k, str):
                        raise ValidationError(
                            f"{_where(_path(path, loc))}object keys must be strings", field=fname
                        )
                    ks = _KEY_BYTES.get(k)
                    if ks is not None:
                        size += ks
                    elif k.isascii():
                        size += len(k) + k.count('"') + k.count("\\") + 4
                    else:
                        size += _text_bytes(k, path, loc, fname) + 4
                    ti = type(item)
                    if ti is str and item.isascii():  # the common leaves, counted here
                        size += len(item) + item.count('"') + item.count("\\") + 2
                    elif item is None or ti is bool:
                        size += 5
                    elif ti is int and INT64_MIN <= item <= INT64_MAX:
                        size += 20
                    else:  # a record's own fields name themselves
                        push((item, depth + 1, (loc, k), k if top else fname))
            else:
                for i, item in enumerate(v):
                    if type(item) is str and item.isascii():
                        size += len(item) + item.count('"') + item.count("\\") + 2
                    else:
                        push((item, depth + 1, (loc, i), fname))
                size += len(v)
            size += 2
        elif isinstance(v, str):
            size += _text_bytes(v, path, loc, fname) + 2
        elif isinstance(v, bool):
            size += 5
        elif isinstance(v, int):
            if not INT64_MIN <= v <= INT64_MAX:
                raise ValidationError(
                    f"{_where(_path(path, loc))}integer out of the 64-bit range", field=fname
                )
            size += 20
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise ValidationError(f"{_where(_path(path, loc))}NaN and Infinity are not JSON", field=fname)
            size += 24
        else:
            raise ValidationError(
                f"{_where(_path(path, loc))}{type(v).__name__} is not a JSON value", field=fname
            )
        if max_bytes is not None and size > max_bytes:
            raise LimitExceeded(
                f"{_where(path)}larger than {max_bytes} bytes",
                limit=limit_name,
                maximum=max_bytes,
                field=field,
            )
    return size


def _text_bytes(s: str, root: str, loc: Any, field: str | None) -> int:
    if s.isascii():
        return len(s) + s.count('"') + s.count("\\")
    try:
        return len(s.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise ValidationError(
            f"{_where(_path(root, loc))}text is not valid Unicode (a lone surrogate at {e.start})",
            field=field,
        ) from e


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads_json(
    text: str | bytes,
    limits: Limits = DEFAULT_LIMITS,
    *,
    max_bytes: int | None = None,
    what: str = "JSON",
    limit_name: str = "max_import_bytes",
) -> Any:
    """Parse JSON text strictly: NaN/Infinity refused, nesting bounded, size bounded.

    ``ValidationError`` (``LimitExceeded`` for a bound) on anything else.
    """
    if max_bytes is not None and len(text) > max_bytes:
        raise LimitExceeded(f"{what} is larger than {max_bytes} bytes", limit=limit_name, maximum=max_bytes)
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValidationError(f"{what} is not UTF-8: {e}") from e
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError as e:
        raise LimitExceeded(
            f"{what} is nested deeper than {limits.max_depth} levels",
            limit="max_depth",
            maximum=limits.max_depth,
        ) from e
    except ValueError as e:
        raise ValidationError(f"{what} is not valid JSON: {e}") from e
    _check_depth(value, limits, what)
    return value


#: levels an import may hold around its records (a ChatGPT export: the array of
#: conversations, a conversation, its mapping, a node, the message and its content)
IMPORT_NESTING = 8


def check_shape(
    value: Any,
    limits: Limits = DEFAULT_LIMITS,
    *,
    what: str = "the import",
    error: type[ValidationError] = ValidationError,
    too_deep: type[LimitExceeded] = LimitExceeded,
) -> None:
    """Check a whole input's structure before anything reads it: only JSON types
    (``dict`` with ``str`` keys, ``list``, ``str``, ``int`` within 64 bits, finite
    ``float``, ``bool``, ``None``), nested at most ``limits.max_depth`` levels plus
    ``IMPORT_NESTING`` for the envelope (a cycle is nested without end, so it is refused
    too). Iterative, so no input reaches Python's recursion limit here or later, in a
    reader or in an error message. ``error`` (a ``ValidationError``) is raised for a bad
    value, ``too_deep`` (a ``LimitExceeded``) for the depth. Text is not checked here: a record's checks
    refuse a lone surrogate in what is kept, naming where it is.
    """
    max_depth = limits.max_depth + IMPORT_NESTING
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        v, depth = pop()
        t = type(v)
        if t is str or v is None or t is bool or isinstance(v, str):
            continue
        if t is dict or t is list or isinstance(v, (dict, list)):
            if depth > max_depth:
                raise too_deep(
                    f"{what} is nested deeper than {max_depth} levels",
                    limit="max_depth",
                    maximum=limits.max_depth,
                )
            if isinstance(v, dict):
                for k, item in v.items():
                    if type(k) is not str and not isinstance(k, str):
                        raise error(f"{what} has an object key that is not a string ({type(k).__name__})")
                    if type(item) is not str:
                        push((item, depth + 1))
            else:
                for item in v:
                    if type(item) is not str:
                        push((item, depth + 1))
        elif isinstance(v, int):
            if not INT64_MIN <= v <= INT64_MAX:
                raise error(f"{what} holds an integer out of the 64-bit range")
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise error(f"{what} holds NaN or Infinity, which JSON has not")
        else:
            raise error(f"{what} holds a {t.__name__}, which is not a JSON value")


def _check_depth(value: Any, limits: Limits, what: str) -> None:
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            if d > limits.max_depth + 4:  # room for the envelope around the records
                raise LimitExceeded(
                    f"{what} is nested deeper than {limits.max_depth} levels",
                    limit="max_depth",
                    maximum=limits.max_depth,
                )
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))


# --------------------------------------------------------------------------- records

#: message record key -> ``validate_message_fields`` name (import and the record checks share it)
MESSAGE_KEY_FIELD = {
    "id": "id",
    "createdAt": "created_at",
    "provider": "provider",
    "model": "model",
    "slices": "slices",
    "tool_results": "tool_results",
    "categorization": "categorization",
    "toolCalls": "tool_calls",
    "toolCallId": "tool_call_id",
    "name": "name",
    "metadata": "metadata",
    "tokenCount": "token_count",
}
MESSAGE_RECORD_FIELDS: frozenset[str] = frozenset({*MESSAGE_KEY_FIELD, "sessionId", "seq", "role", "content"})
assert set(MESSAGE_KEY_FIELD.values()) == MESSAGE_FIELDS

#: session record key -> what it must be
_SESSION_TYPES: dict[str, tuple[str, bool]] = {  # key -> (kind, may be null)
    "sessionId": ("id", False),
    "title": ("str", True),
    "createdAt": ("time", False),
    "updatedAt": ("time", False),
    "userId": ("str", False),
    "characterId": ("str", False),
    "pinned": ("bool", False),
    "archived": ("bool", False),
    "tags": ("tags", True),
    "parentId": ("str", True),
    "forkIndex": ("count", True),
    "forkReason": ("str", True),
    "messageCount": ("count", False),
}
SESSION_RECORD_FIELDS: frozenset[str] = frozenset(_SESSION_TYPES)
_SESSION_REQUIRED = ("sessionId", "createdAt", "updatedAt")

#: the JSON size (quotes, colon, comma) of the keys every record has, counted once here
_KEY_BYTES: dict[str, int] = {
    k: len(k) + 4
    for k in (*MESSAGE_RECORD_FIELDS, *SESSION_RECORD_FIELDS, "nextSeq", "source", "sourceId", "type", "text")
}


def is_id(value: Any) -> TypeGuard[str]:
    """Whether ``value`` is an id: a non-empty string of at most 200 characters that is
    valid Unicode (so it can be stored, encoded as UTF-8 and sent back)."""
    if not isinstance(value, str) or not 0 < len(value) <= _MAX_ID:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_decimal(text: Any, max_digits: int = 18) -> int | None:
    """The int that ``text`` spells in ASCII digits (at most ``max_digits`` of them), else
    None: ``str.isdigit`` also takes "²" and other digits ``int`` refuses."""
    if (
        not isinstance(text, str)
        or not 0 < len(text) <= max_digits
        or not (text.isascii() and text.isdigit())
    ):
        return None
    return int(text)


def check_nonneg_int(v: Any, name: str) -> None:
    """An int >= 0 (not a bool), else a ``ValidationError`` naming ``name``."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValidationError(f"{name} must be an int >= 0", field=name)


def check_id(value: Any, field: str) -> str:
    """``value`` if it is an id (a non-empty string of at most 200 characters that is
    valid Unicode), else ``ValidationError`` naming ``field``."""
    if not isinstance(value, str) or not 0 < len(value) <= _MAX_ID:
        raise ValidationError(
            f"{field} must be a non-empty string of at most {_MAX_ID} characters, got {shown(value)}",
            field=field,
        )
    if not value.isascii():
        _text_bytes(value, field, None, field)
    return value


def check_ids(values: Any, field: str) -> list[str]:
    """``values`` (a list, tuple or other iterable of ids; not a string or a mapping) as a
    list, each passed by ``check_id``, else ``ValidationError`` naming ``field``."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise ValidationError(f"{field} must be a list of ids, got {shown(values)}", field=field)
    out = list(values)
    for i, v in enumerate(out):
        check_id(v, f"{field}[{i}]")
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _session_field_ok(kind: str, v: Any) -> bool:
    if kind == "id":
        return isinstance(v, str) and 0 < len(v) <= _MAX_ID
    if kind == "str":
        return isinstance(v, str)
    if kind == "bool":
        return isinstance(v, bool)
    if kind in ("time", "count"):
        return _is_int(v) and 0 <= v <= INT64_MAX
    return isinstance(v, list) and all(isinstance(t, str) for t in v)  # tags


def check_session_record(rec: Any, limits: Limits = DEFAULT_LIMITS, *, partial: bool = False) -> None:
    """Raise ``ValidationError`` unless ``rec`` is a session record (``partial``: some of its fields,
    as a sync ``update`` or a merged record on the wire carries them).

    Every field present must be a known one of the right type and range;
    ``nextSeq`` (the store's own bookkeeping) is tolerated and ignored.
    """
    if not isinstance(rec, Mapping):
        raise ValidationError("a session record must be an object", field="data")
    for key, v in rec.items():
        if key == "nextSeq":
            continue
        spec = _SESSION_TYPES.get(key)
        if spec is None:
            raise ValidationError(f"unknown session field {shown(key)}", field=key)
        kind, nullable = spec
        if not (v is None and nullable) and not _session_field_ok(kind, v):
            raise ValidationError(f"session field {key} has a wrong type or range: {shown(v)}", field=key)
    if not partial:
        for key in _SESSION_REQUIRED:
            if key not in rec:
                raise ValidationError(f"session field {key} is required", field=key)
    check_value(rec, limits, max_bytes=limits.max_session_bytes, limit_name="max_session_bytes")


def check_message_record(rec: Any, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raise ``ValidationError`` unless ``rec`` is a complete message record.

    Required: ``id``, ``sessionId``, ``role``, ``content``, ``createdAt``;
    ``seq`` is optional (the receiver assigns one); every other key must be a
    known field of the right type.
    """
    if not isinstance(rec, Mapping):
        raise ValidationError("a message record must be an object", field="data")
    unknown = [k for k in rec if k not in MESSAGE_RECORD_FIELDS]
    if unknown:
        raise ValidationError(f"unknown message field {shown(unknown[0])}", field=unknown[0])
    for key in ("id", "sessionId", "role", "content", "createdAt"):
        if key not in rec:
            raise ValidationError(f"message field {key} is required", field=key)
    for key in ("id", "sessionId"):
        v = rec[key]
        if not isinstance(v, str) or not 0 < len(v) <= _MAX_ID:
            raise ValidationError(
                f"{key} must be a non-empty string of at most {_MAX_ID} characters", field=key
            )
    seq = rec.get("seq")
    if seq is not None and (not _is_int(seq) or not 0 <= seq <= INT64_MAX):
        raise ValidationError("seq must be a non-negative 64-bit int", field="seq")
    if not _is_int(rec["createdAt"]):
        raise ValidationError("createdAt must be an int (ms since the epoch)", field="createdAt")
    check_value(rec, limits, max_bytes=limits.max_message_bytes)
    validate_message_fields(
        rec["role"],
        rec["content"],
        {f: rec[k] for k, f in MESSAGE_KEY_FIELD.items() if rec.get(k) is not None},
    )
