"""What a cached index rewrites to catch up with sessions changed in the store
while it was closed (``QueryIndex.resync``).

A session changed elsewhere was most often only appended to (a page that had
not searched yet, another device's messages pulled by sync). Its rows in the
index are compared with the store's messages on the id, every scalar column
the index keeps and the number of terms (``docs.doc_len``): when each row the
index holds is still stored, alike, only the messages the index lacks are
loaded. Any other change (a message deleted, a session cleared, or replaced
by an import of another version) has the session dropped and loaded whole.
Dropping scans the postings of the whole index (about 1 s at 100,000
messages in the page); loading a few messages does not. The text itself is
not compared: reading it back from the file cost ~0.3 s there, and a message's
id names one text (messages are never edited; only an import of a hand-edited
backup with ``preserve_ids`` could give an id another text of as many terms).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..text.tokenize import term_count
from .figures import KeywordFigures
from .keywords import drop_sessions, lap, load_messages
from .schema import MESSAGE_COLUMNS, TABLES, message_row, session_row
from .sql_engine import SQLEngine, marks

__all__ = ["Caught", "Plan", "catch_up", "plan"]

_SCALARS = [c for c, _, _ in MESSAGE_COLUMNS if c != "text"]
#: two scans (a join of the two tables cost ~0.6 s in the page, these ~40 ms)
_ROWS = "SELECT " + ", ".join(_SCALARS) + " FROM messages WHERE session_id IN ({})"
_LENS = "SELECT message_id, session_id, doc_len FROM docs WHERE session_id IN ({})"
_PART = 500
_CHUNK = 20_000
_SESSION_COLS = [c for c, _ in TABLES["sessions"]]


def _alike(rec: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the comparison reads of a stored message: its row's scalars and its number of
    terms (counted without stemming: stemming 1,000 messages took ~0.5 s in the page)."""
    row = message_row(rec)
    return row[:-1] + (term_count(row[-1]),)


@dataclass
class Plan:
    """The sessions to drop and load whole, and the messages to load (theirs, and
    the new messages of the sessions only appended to)."""

    whole: list[str] = field(default_factory=list)
    load: list[Mapping[str, Any]] = field(default_factory=list)


async def plan(
    engine: SQLEngine,
    session_ids: Sequence[str],
    messages: Sequence[Mapping[str, Any]],
    ms: dict[str, float] | None = None,
) -> Plan:
    """The ``Plan`` that makes the index hold exactly ``messages`` (every stored
    message of ``session_ids``) for those sessions (``ms`` gains ``plan: read``)."""
    t = time.perf_counter()
    held: dict[str, dict[str, tuple[Any, ...]]] = {sid: {} for sid in session_ids}
    #: per session, how many docs it has: a doc without its ``messages`` row (possible
    #: while writes made during ``messages``' fill wait to be applied) reloads the session
    docs: dict[str, int] = {}
    for i in range(0, len(session_ids), _PART):
        part = list(session_ids[i : i + _PART])
        lens = {}
        for r in await engine.execute(_LENS.format(marks(len(part))), part):
            lens[r["message_id"]] = r["doc_len"]
            docs[str(r["session_id"])] = docs.get(str(r["session_id"]), 0) + 1
        for r in await engine.execute(_ROWS.format(marks(len(part))), part):
            held[str(r["session_id"])][str(r["id"])] = tuple(r[c] for c in _SCALARS) + (lens.get(r["id"]),)
    if ms is not None:
        ms["plan: read"] = (time.perf_counter() - t) * 1000
    stored: dict[str, list[Mapping[str, Any]]] = {sid: [] for sid in session_ids}
    for m in messages:
        stored.setdefault(str(m.get("sessionId")), []).append(m)
    out = Plan()
    for sid, msgs in stored.items():
        have = held.get(sid, {})
        new = [m for m in msgs if m.get("id") not in have]
        kept = len(msgs) - len(new)
        if kept == len(have) == docs.get(sid, 0) and all(
            _alike(m) == have[m["id"]] for m in msgs if m.get("id") in have
        ):
            out.load += new
        else:
            out.whole.append(sid)
            out.load += msgs
    return out


@dataclass
class Caught:
    """What ``catch_up`` did: sessions loaded whole, only appended to, messages and
    postings loaded, and the milliseconds of each step (``plan``, ``drop``, ``messages``)."""

    whole: int
    appended: int
    loaded: int
    postings: int
    ms: dict[str, float]

    def counts(self) -> dict[str, int]:
        return {"whole": self.whole, "appended": self.appended, "loaded": self.loaded}


async def catch_up(
    engine: SQLEngine,
    figures: KeywordFigures,
    sessions: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
    drop: list[str],
) -> Caught:
    """Inside the caller's transaction: make the index hold the ``sessions`` (records)
    with exactly their stored ``messages``, and none of the sessions ``drop``."""
    ms: dict[str, float] = {}
    t = time.perf_counter()
    changed = [str(s["sessionId"]) for s in sessions]
    todo = await plan(engine, changed, messages, ms)
    t = lap(ms, "plan", t)
    dropped, rows = todo.whole + drop, changed + drop
    for i in range(0, len(dropped), _PART):
        await drop_sessions(engine, dropped[i : i + _PART], figures)
    for i in range(0, len(rows), _PART):
        part = rows[i : i + _PART]
        await engine.execute(f"DELETE FROM sessions WHERE session_id IN ({marks(len(part))})", part)
    await engine.load_rows("sessions", _SESSION_COLS, [session_row(s) for s in sessions])
    t = lap(ms, "drop", t)
    postings = 0
    for i in range(0, len(todo.load), _CHUNK):
        postings += await load_messages(engine, [dict(m) for m in todo.load[i : i + _CHUNK]], figures, ms=ms)
    lap(ms, "messages", t)  # in all; ``load_messages`` adds its own steps (tokenise, load, derive)
    return Caught(len(todo.whole), len(changed) - len(todo.whole), len(todo.load), postings, ms)
