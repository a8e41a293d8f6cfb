"""Small helpers the foreign-format adapters share: time conversion, errors, line assembly."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any, Callable, Iterator, Mapping

from ...errors import ImportFormatError, shown
from ..normalized import NormalizedImport, NormalizedSession, RecordBuilder
from ._tree import Line

__all__ = [
    "seconds_to_ms",
    "iso_to_ms",
    "fail",
    "assemble_lines",
    "UNTITLED",
    "convert_conversations",
    "iter_conversations",
]

UNTITLED = "Untitled"
_MS = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def fail(path: str, message: str, field: str | None = None) -> ImportFormatError:
    return ImportFormatError(message, path=path, field=field)


def seconds_to_ms(value: Any, path: str) -> int | None:
    """Unix seconds (int or float, as ChatGPT writes them) to integer ms; None stays None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise fail(path, f"must be a number of seconds since the epoch, got {shown(value)}")
    if value < 0:
        raise fail(path, f"must not be negative, got {shown(value)}")
    return int(round(value * 1000))


def iso_to_ms(value: Any, path: str) -> int | None:
    """An ISO-8601 timestamp (``2024-10-29T15:59:18.774635+00:00`` or ``...Z``) to ms; None stays None.

    A timestamp without a zone is taken as UTC.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise fail(path, f"must be an ISO-8601 timestamp string, got {shown(value)}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError as e:
        raise fail(path, f"is not an ISO-8601 timestamp: {shown(value)}") from e
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    ms = (dt - _EPOCH) // _MS
    if ms < 0:
        raise fail(path, f"is before 1970: {shown(value)}")
    return int(ms)


def assemble_lines(
    lines: list[Line],
    records: Mapping[str, dict[str, Any] | None],
    make_meta: Callable[[str | None, int | None, int], dict[str, Any]],
    builder: RecordBuilder,
) -> NormalizedImport:
    """Sessions for a tree split into lines: the main line, then one fork per other line.

    ``records`` maps a node id to its message record (None for nodes that are
    not imported: roots, hidden or empty ones). A fork holds copies (fresh
    ids) of its parent line's messages before the branch point, then its own;
    its ``forkIndex`` is the number of those copies. ``make_meta(parent_id,
    fork_index, first_own_created_at)`` makes each session record. A fork is
    titled after the conversation and its number ("Trip (branch 2)"); a branch
    that says nothing its parent does not (hidden or empty nodes only, or a
    regenerated reply word for word the same) is not kept: its own branches
    fork from its parent.
    """
    out: NormalizedImport = []
    session_ids: list[str] = []  # per line: the session holding it (a skipped line: its parent's)
    said: list[list[tuple[Any, Any]]] = []  # per line: the (role, content) of its session's messages
    for line in lines:
        shared = [records[n] for n in line.nodes[: line.own_from] if records.get(n) is not None]
        own = [records[n] for n in line.nodes[line.own_from :] if records.get(n) is not None]
        msgs = [builder.copy_message(m) for m in shared if m is not None] + [m for m in own if m]
        words = [(m["role"], m["content"]) for m in msgs]
        if line.parent is not None and (not own or words == said[line.parent]):
            session_ids.append(session_ids[line.parent])
            said.append(said[line.parent])
            continue
        first = own[0]["createdAt"] if own and own[0] is not None else 0
        if line.parent is None:
            meta = make_meta(None, None, first)
        else:
            meta = make_meta(session_ids[line.parent], len(shared), first)
            meta["title"] = f"{meta.get('title') or UNTITLED} (branch {len(out) + 1})"
        session_ids.append(meta["sessionId"])
        said.append(words)
        out.append(builder.finish(meta, msgs))
    return out


def as_conversations(data: Any) -> list[Any] | None:
    """A foreign export's conversations: an array of them, or one conversation object."""
    if isinstance(data, dict):
        return [data]
    if isinstance(data, list):
        return data
    return None


def convert_conversations(
    data: Any,
    source: str,
    convert_one: Callable[[Any, str, RecordBuilder], NormalizedImport],
    builder: RecordBuilder,
) -> NormalizedImport:
    """Every conversation of a foreign export (an array, or one conversation object)."""
    return list(iter_conversations(data, source, convert_one, builder))


def iter_conversations(
    data: Any,
    source: str,
    convert_one: Callable[[Any, str, RecordBuilder], NormalizedImport],
    builder: RecordBuilder,
) -> Iterator[NormalizedSession]:
    """``convert_conversations`` one conversation at a time, as the iterator is read."""
    convs = as_conversations(data)
    if convs is None:
        from ..source import describe

        raise fail(
            "$",
            f"a {source} export must be an array of conversations or one conversation, got {describe(data)}",
        )
    made: set[str] = set()  # a conversation listed twice (same source id) is read once
    for i, conv in enumerate(convs):
        for rec, msgs in convert_one(conv, f"conversations[{i}]", builder):
            if rec["sessionId"] not in made:
                made.add(rec["sessionId"])
                yield rec, msgs
