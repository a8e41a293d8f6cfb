"""The tables of the query index, and how records become their rows.

::

    sessions    one row per session: the SessionMeta fields in snake_case
    messages    one row per message: the ChatMessage fields in snake_case;
                content / slices / tool_results / categorization / tool_calls /
                metadata as JSON text; text = plain text of the content;
                token_count as stored
    docs        per message: message_id, session_id, role, created_at
                (immutable, copied so that ranking and filtering never read
                ``messages``), doc_len (number of index terms) and norm_text
                (normalised words, for exact phrase checks)
    postings    the inverted index: (term, message_id, tf, doc_len,
                created_at), kept sorted by term and with an ART index on
                term, so that a query reads only its terms' rows (a rare term
                by index lookup, a common one by a zone-map-skipping scan) and
                ranks, breaks ties and fetches the winners without a join
    terms       (term, df): the document frequency of every indexed term
    stats       one row (n, total): the number of docs and the sum of doc_len
    embeddings  one row per message and embedder model: (message_id, model, dim,
                vec TINYINT[], scale, cvec TINYINT[], cscale): the message's own
                vector and its in-context vector (NULL when the embedder has none,
                or it equals ``vec``), each l2-normalised and quantised to int8
                with one FLOAT scale (``embed.quantize``): ``dim + 4`` bytes a
                vector instead of ``4 * dim``, and the cosine with a unit query
                vector is ``scale * (vec · q)`` (``embed.cosine_sql``)
    index_meta  (key, value): the schema version of a cached (OPFS) index

``terms`` and ``stats`` are kept exact on every write (integer counts), so the
BM25 statistics of the incremental index equal those of a rebuild.

Column types are DuckDB core types only. The whole index is derived from the
store and can be dropped and rebuilt at any time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..models import extract_text
from .tokenize import analyze

__all__ = [
    "INDEX_STATEMENTS",
    "SCHEMA_VERSION",
    "STAGE_COLUMNS",
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
    "docs": [
        ("message_id", "VARCHAR"),
        ("session_id", "VARCHAR"),
        ("role", "VARCHAR"),
        ("created_at", "BIGINT"),
        ("doc_len", "INTEGER"),
        ("norm_text", "VARCHAR"),
    ],
    "postings": [
        ("term", "VARCHAR"),
        ("message_id", "VARCHAR"),
        ("tf", "INTEGER"),
        ("doc_len", "INTEGER"),
        ("created_at", "BIGINT"),
    ],
    "terms": [("term", "VARCHAR"), ("df", "INTEGER")],
    "stats": [("n", "BIGINT"), ("total", "BIGINT")],
    "embeddings": [
        ("message_id", "VARCHAR"),
        ("model", "VARCHAR"),
        ("dim", "INTEGER"),
        ("vec", "TINYINT[]"),
        ("scale", "FLOAT"),
        ("cvec", "TINYINT[]"),
        ("cscale", "FLOAT"),
    ],
    "index_meta": [("key", "VARCHAR"), ("value", "VARCHAR")],
}

#: bumped whenever a table changes: a cached index of another version is rebuilt
SCHEMA_VERSION = "4"

#: the staging table a batch of messages goes through: ``docs`` plus ``toks``
#: (the message's index terms joined by spaces; terms never hold a space),
#: from which SQL derives ``postings`` and the ``terms`` counts
STAGE_COLUMNS: list[tuple[str, str]] = TABLES["docs"] + [("toks", "VARCHAR")]


#: ART indexes: messages by id (fetching the few winners of a search), postings
#: and terms by term (a rare term's rows without a scan)
INDEX_STATEMENTS = [
    "CREATE INDEX IF NOT EXISTS messages_id ON messages (id)",
    "CREATE INDEX IF NOT EXISTS postings_term ON postings (term)",
    "CREATE INDEX IF NOT EXISTS terms_term ON terms (term)",
]


def create_statements(replace: bool = False) -> list[str]:
    """``CREATE TABLE`` for every table (``OR REPLACE`` when ``replace``), the
    indexes, and the one ``stats`` row."""
    verb = "CREATE OR REPLACE TABLE" if replace else "CREATE TABLE IF NOT EXISTS"
    return [
        f"{verb} {name} (" + ", ".join(f"{c} {t}" for c, t in cols) + ")"
        for name, cols in TABLES.items()
    ] + INDEX_STATEMENTS + [
        "INSERT INTO stats SELECT 0, 0 WHERE NOT EXISTS (SELECT 1 FROM stats)",
    ]


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


def message_rows(rec: Mapping[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The ``messages`` row and the staging row (``STAGE_COLUMNS``) of one message record.
    Tokenises the text once."""
    text = extract_text(rec.get("content"))
    row: list[Any] = []
    for col, _, key in MESSAGE_COLUMNS:
        if col == "text":
            row.append(text)
        elif col in JSON_COLUMNS:
            row.append(_json(rec.get(key)))
        elif col == "token_count":
            row.append(int(rec.get(key) or 0))
        else:
            row.append(rec.get(key))
    toks, norm = analyze(text)
    stage = (rec["id"], rec.get("sessionId"), rec.get("role"), rec.get("createdAt"), len(toks), norm,
             " ".join(toks))
    return tuple(row), stage


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
