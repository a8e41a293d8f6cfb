"""The tables of the query index, and how records become their rows.

::

    sessions    one row per session: the SessionMeta fields in snake_case
    messages    one row per message: the ChatMessage fields in snake_case;
                content / slices / tool_results / categorization / tool_calls /
                metadata as JSON text; text = plain text of the content;
                token_count as stored
    docs        per message: doc_len (number of index terms) and norm_text
                (normalised words, for exact phrase checks)
    postings    the inverted index: (term, message_id, tf, doc_len) plus the
                message's created_at, session_id and role (immutable, so copied
                here: ranking and filtering never read ``messages``), kept
                sorted by term so that a query reads only its terms' rows
    embeddings  (message_id, model, dim, vec FLOAT[]): one vector per message and model

Column types are DuckDB core types only. The whole index is derived from the
store and can be dropped and rebuilt at any time.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ..models import extract_text
from .tokenize import norm_text, tokens

__all__ = [
    "INDEX_STATEMENTS",
    "JSON_COLUMNS",
    "MESSAGE_COLUMNS",
    "SESSION_COLUMNS",
    "TABLES",
    "create_statements",
    "message_rows",
    "row_to_message_record",
    "row_to_session_record",
    "session_row",
]

SESSION_COLUMNS: list[tuple[str, str, str]] = [
    # (column, type, record key)
    ("session_id", "VARCHAR", "sessionId"),
    ("title", "VARCHAR", "title"),
    ("created_at", "BIGINT", "createdAt"),
    ("updated_at", "BIGINT", "updatedAt"),
    ("user_id", "VARCHAR", "userId"),
    ("character_id", "VARCHAR", "characterId"),
    ("pinned", "BOOLEAN", "pinned"),
    ("archived", "BOOLEAN", "archived"),
    ("tags", "VARCHAR[]", "tags"),
    ("parent_id", "VARCHAR", "parentId"),
    ("fork_index", "INTEGER", "forkIndex"),
    ("fork_reason", "VARCHAR", "forkReason"),
    ("message_count", "INTEGER", "messageCount"),
]

MESSAGE_COLUMNS: list[tuple[str, str, str]] = [
    ("id", "VARCHAR", "id"),
    ("session_id", "VARCHAR", "sessionId"),
    ("seq", "INTEGER", "seq"),
    ("role", "VARCHAR", "role"),
    ("content", "VARCHAR", "content"),
    ("created_at", "BIGINT", "createdAt"),
    ("provider", "VARCHAR", "provider"),
    ("model", "VARCHAR", "model"),
    ("slices", "VARCHAR", "slices"),
    ("tool_results", "VARCHAR", "tool_results"),
    ("categorization", "VARCHAR", "categorization"),
    ("tool_calls", "VARCHAR", "toolCalls"),
    ("tool_call_id", "VARCHAR", "toolCallId"),
    ("name", "VARCHAR", "name"),
    ("metadata", "VARCHAR", "metadata"),
    ("token_count", "INTEGER", "tokenCount"),
    ("text", "VARCHAR", ""),
]

#: message columns stored as JSON text
JSON_COLUMNS = frozenset({"content", "slices", "tool_results", "categorization", "tool_calls", "metadata"})

TABLES: dict[str, list[tuple[str, str]]] = {
    "sessions": [(c, t) for c, t, _ in SESSION_COLUMNS],
    "messages": [(c, t) for c, t, _ in MESSAGE_COLUMNS],
    "docs": [("message_id", "VARCHAR"), ("doc_len", "INTEGER"), ("norm_text", "VARCHAR")],
    "postings": [
        ("term", "VARCHAR"),
        ("message_id", "VARCHAR"),
        ("tf", "INTEGER"),
        ("doc_len", "INTEGER"),
        ("created_at", "BIGINT"),
        ("session_id", "VARCHAR"),
        ("role", "VARCHAR"),
    ],
    "embeddings": [
        ("message_id", "VARCHAR"),
        ("model", "VARCHAR"),
        ("dim", "INTEGER"),
        ("vec", "FLOAT[]"),
    ],
}


#: the ART index that fetches the few winning messages of a search by id
INDEX_STATEMENTS = ["CREATE INDEX IF NOT EXISTS messages_id ON messages (id)"]


def create_statements(replace: bool = False) -> list[str]:
    """``CREATE TABLE`` for every table (``OR REPLACE`` when ``replace``), then the indexes."""
    verb = "CREATE OR REPLACE TABLE" if replace else "CREATE TABLE IF NOT EXISTS"
    return [
        f"{verb} {name} (" + ", ".join(f"{c} {t}" for c, t in cols) + ")"
        for name, cols in TABLES.items()
    ] + INDEX_STATEMENTS


def session_row(rec: Mapping[str, Any]) -> tuple[Any, ...]:
    """A ``sessions`` row from a session record (missing keys take the model's defaults)."""
    defaults: dict[str, Any] = {
        "title": "",
        "userId": "local",
        "characterId": "default",
        "pinned": False,
        "archived": False,
        "tags": [],
        "messageCount": 0,
    }
    out = []
    for _, _, key in SESSION_COLUMNS:
        v = rec.get(key, defaults.get(key))
        if key == "tags":
            v = [str(t) for t in (v or [])]
        out.append(v)
    return tuple(out)


def _json(v: Any) -> str | None:
    return None if v is None else json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def message_rows(
    rec: Mapping[str, Any],
) -> tuple[tuple[Any, ...], tuple[Any, ...], list[tuple[Any, ...]]]:
    """The ``messages`` row, the ``docs`` row and the ``postings`` rows of one message record."""
    text = extract_text(rec.get("content"))
    row = []
    for col, _, key in MESSAGE_COLUMNS:
        if col == "text":
            row.append(text)
        elif col in JSON_COLUMNS:
            row.append(_json(rec.get(key)))
        elif col == "token_count":
            row.append(int(rec.get(key) or 0))
        else:
            row.append(rec.get(key))
    toks = tokens(text)
    n = len(toks)
    mid = rec["id"]
    ca, sid, role = rec.get("createdAt"), rec.get("sessionId"), rec.get("role")
    postings = [(term, mid, tf, n, ca, sid, role) for term, tf in Counter(toks).items()]
    return tuple(row), (mid, n, norm_text(text)), postings


def row_to_message_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """The camelCase record of a ``messages`` row (JSON columns parsed)."""
    rec: dict[str, Any] = {}
    for col, _, key in MESSAGE_COLUMNS:
        if not key:
            continue
        v = row.get(col)
        if col in JSON_COLUMNS and v is not None:
            v = json.loads(v)
        rec[key] = v
    return rec


def row_to_session_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """The camelCase record of a ``sessions`` row."""
    return {key: (list(row[col] or []) if col == "tags" else row.get(col)) for col, _, key in SESSION_COLUMNS}
