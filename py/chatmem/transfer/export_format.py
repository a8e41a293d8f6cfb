"""The chatmem export format: the original's ``ChatSessionsExport``.

::

    {"version": "1.0.0", "exportedAt": <ms>,
     "sessions": [{"meta": <SessionMeta record>, "messages": [<ChatMessage record>, ...]}]}

An export that carries facts (``chatmem.facts``) is version "1.1.0" and ends with
``"facts": [<Fact record>, ...]`` (ordered by ``factId``); without facts it is the
original's "1.0.0", unchanged.

Records carry every field of ``SessionMeta.to_record()`` / ``ChatMessage.to_record()``
in that key order (store-private fields such as ``nextSeq`` are dropped).

There is one canonical text form (``canonical_dumps``: UTF-8 kept as is,
no spaces), so that export -> import(preserve_ids) -> export gives the same
bytes except ``exportedAt``. ``iter_export_json`` / ``aiter_export_json``
produce that same text in chunks, reading one message at a time, so a large
export is never held in memory as one string. Pure: no store access.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping

from ..errors import ValidationError
from ..records.facts import Fact
from ..records.models import ChatMessage, SessionMeta

__all__ = [
    "EXPORT_VERSION",
    "FACTS_EXPORT_VERSION",
    "CHUNK_SIZE",
    "canonical_dumps",
    "session_record",
    "message_record",
    "build_export",
    "dumps_export",
    "iter_export_json",
    "aiter_export_json",
]

EXPORT_VERSION = "1.0.0"
#: the version of an export that carries facts
FACTS_EXPORT_VERSION = "1.1.0"
#: chunks are yielded once they reach about this many characters
CHUNK_SIZE = 64 * 1024


def canonical_dumps(value: Any) -> str:
    """The one JSON text form of exports: non-ASCII kept, no spaces, no NaN."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def session_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` as exported: exactly the ``SessionMeta`` record keys, in order."""
    return SessionMeta.from_record(record).to_record()


def message_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` as exported: exactly the ``ChatMessage`` record keys, in order."""
    return ChatMessage.from_record(record).to_record()


def build_export(
    sessions: Iterable[tuple[Mapping[str, Any], Iterable[Mapping[str, Any]]]],
    exported_at: int,
    facts: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The export as a dict, from ``(session record, message records)`` pairs (and fact records)."""
    kept = fact_records(facts)
    out: dict[str, Any] = {
        "version": FACTS_EXPORT_VERSION if kept else EXPORT_VERSION,
        "exportedAt": exported_at,
        "sessions": [
            {"meta": session_record(meta), "messages": [message_record(m) for m in msgs]}
            for meta, msgs in sessions
        ],
    }
    if kept:
        out["facts"] = kept
    return out


def fact_records(facts: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Fact records as exported: every field, ordered by ``factId``."""
    return sorted((Fact.from_record(f).to_record() for f in facts), key=lambda r: str(r["factId"]))


def dumps_export(
    sessions: Iterable[tuple[Mapping[str, Any], Iterable[Mapping[str, Any]]]], exported_at: int
) -> str:
    """The export as canonical JSON text (the concatenation of ``iter_export_json``)."""
    return "".join(iter_export_json(exported_at, sessions))


class _Writer:
    """Accumulates JSON pieces and hands out chunks of about ``chunk_size`` characters."""

    def __init__(self, exported_at: int, chunk_size: int, facts: list[dict[str, Any]]):
        if isinstance(exported_at, bool) or not isinstance(exported_at, int):
            raise ValidationError("exported_at must be an int (ms since the epoch)", field="exported_at")
        self.chunk_size = chunk_size
        self.facts = facts
        self.parts: list[str] = [
            '{"version":',
            canonical_dumps(FACTS_EXPORT_VERSION if facts else EXPORT_VERSION),
            ',"exportedAt":',
            canonical_dumps(exported_at),
            ',"sessions":[',
        ]
        self.size = sum(map(len, self.parts))
        self.first_session = True
        self.first_message = True

    def add(self, text: str) -> str | None:
        self.parts.append(text)
        self.size += len(text)
        if self.size >= self.chunk_size:
            return self.flush()
        return None

    def flush(self) -> str:
        out = "".join(self.parts)
        self.parts, self.size = [], 0
        return out

    def start_session(self, meta: Mapping[str, Any]) -> str | None:
        sep = "" if self.first_session else ","
        self.first_session, self.first_message = False, True
        return self.add(sep + '{"meta":' + canonical_dumps(session_record(meta)) + ',"messages":[')

    def message(self, msg: Mapping[str, Any]) -> str | None:
        sep = "" if self.first_message else ","
        self.first_message = False
        return self.add(sep + canonical_dumps(message_record(msg)))

    def end_session(self) -> str | None:
        return self.add("]}")

    def end(self) -> str:
        self.parts.append("]")
        if self.facts:
            self.parts.append(',"facts":' + canonical_dumps(self.facts))
        self.parts.append("}")
        return self.flush()


def iter_export_json(
    exported_at: int,
    sessions: Iterable[tuple[Mapping[str, Any], Iterable[Mapping[str, Any]]]],
    *,
    chunk_size: int = CHUNK_SIZE,
    facts: Iterable[Mapping[str, Any]] = (),
) -> Iterator[str]:
    """Yield the canonical export text in chunks; ``"".join(...)`` equals
    ``canonical_dumps(build_export(sessions, exported_at, facts))``.

    ``sessions`` and each message iterable are consumed lazily, one item at a time.
    """
    w = _Writer(exported_at, chunk_size, fact_records(facts))
    for meta, msgs in sessions:
        if (chunk := w.start_session(meta)) is not None:
            yield chunk
        for m in msgs:
            if (chunk := w.message(m)) is not None:
                yield chunk
        if (chunk := w.end_session()) is not None:
            yield chunk
    yield w.end()


async def aiter_export_json(
    exported_at: int,
    sessions: AsyncIterable[
        tuple[Mapping[str, Any], AsyncIterable[Mapping[str, Any]] | Iterable[Mapping[str, Any]]]
    ]
    | Iterable[tuple[Mapping[str, Any], AsyncIterable[Mapping[str, Any]] | Iterable[Mapping[str, Any]]]],
    *,
    chunk_size: int = CHUNK_SIZE,
    facts: Iterable[Mapping[str, Any]] = (),
) -> AsyncIterator[str]:
    """``iter_export_json`` for a store read asynchronously.

    ``sessions`` may be an async or plain iterable of pairs; each pair's
    messages may be an async or plain iterable (e.g. pages read from a store).
    """
    w = _Writer(exported_at, chunk_size, fact_records(facts))

    async def pairs() -> AsyncIterator[Any]:
        if hasattr(sessions, "__aiter__"):
            async for p in sessions:
                yield p
        else:
            for p in sessions:
                yield p

    async for meta, msgs in pairs():
        if (chunk := w.start_session(meta)) is not None:
            yield chunk
        if hasattr(msgs, "__aiter__"):
            async for m in msgs:
                if (chunk := w.message(m)) is not None:
                    yield chunk
        else:
            for m in msgs:
                if (chunk := w.message(m)) is not None:
                    yield chunk
        if (chunk := w.end_session()) is not None:
            yield chunk
    yield w.end()
