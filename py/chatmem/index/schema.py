"""The tables of the query index, and how records become their rows.

::

    sessions    one row per session: the SessionMeta fields in snake_case
    messages    one row per message: its scalar fields in snake_case and
                text = the plain text of its content (for ``mem.sql``,
                substring search, phrase checks and embedding); the record
                itself (content parts, slices, tool results, metadata...) is
                not copied: it is read from the store
    docs        per message: doc (a dense integer id), message_id, session_id,
                role, created_at (immutable, copied so that ranking and
                filtering never read ``messages``) and doc_len (index terms)
    postings    the inverted index: (tid, doc, tf, dl) integers only, kept
                sorted by (tid, doc) so that a query reads only its terms'
                rows (zone maps skip the rest); ``dl`` is the doc's length,
                so BM25 needs no join to score
    terms       (term, tid, df): every indexed term, its integer id and its
                document frequency (ART index on term)
    stats       one row (n, total): the number of docs and the sum of doc_len
    embeddings  one row per message and embedder model: (message_id, model, dim,
                vec TINYINT[], scale, cvec TINYINT[], cscale): the message's own
                vector and its in-context vector (NULL when the embedder has none,
                or it equals ``vec``), each l2-normalised and quantised to int8
                with one FLOAT scale (``embed.quantize``): ``dim + 4`` bytes a
                vector instead of ``4 * dim``, and the cosine with a unit query
                vector is ``scale * (vec · q)`` (``embed.cosine_sql``); plus the
                message's session_id, role and created_at (immutable, copied like
                ``docs``' so that semantic search filters, ranks and breaks ties on
                this one table: it never joins ``messages``), and model_key
                (``embed.model_key``: the rows of a model are selected by an
                integer, which zone maps can prove, not by the text)
    index_meta  (key, value): the schema version of a cached (OPFS) index

``terms`` and ``stats`` are kept exact on every write (integer counts), so the
BM25 statistics of the incremental index equal those of a rebuild. Integer ids
(``tid``, ``doc``) are internal: they differ between an index built by events
and one rebuilt, the answers do not. A posting leads back to its message in one
step (``docs.doc``, which is also the docs' sort order).

Column types are DuckDB core types only. The whole index is derived from the
store and can be dropped and rebuilt at any time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..models import extract_text
from .tokenize import tokens

__all__ = [
    "INDEX_STATEMENTS",
    "SCHEMA_VERSION",
    "STAGE_COLUMNS",
    "MESSAGE_COLUMNS",
    "RECORD_ONLY",
    "SESSION_COLUMNS",
    "TABLES",
    "create_statements",
    "message_row",
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
    ("created_at", "BIGINT", "createdAt"),
    ("provider", "VARCHAR", "provider"),
    ("model", "VARCHAR", "model"),
    ("tool_call_id", "VARCHAR", "toolCallId"),
    ("name", "VARCHAR", "name"),
    ("token_count", "INTEGER", "tokenCount"),
    ("text", "VARCHAR", ""),
]

#: record keys the index does not copy (a hit's message is read from the store)
RECORD_ONLY = ("content", "slices", "tool_results", "categorization", "toolCalls", "metadata")

TABLES: dict[str, list[tuple[str, str]]] = {
    "sessions": [(c, t) for c, t, _ in SESSION_COLUMNS],
    "messages": [(c, t) for c, t, _ in MESSAGE_COLUMNS],
    "docs": [
        ("doc", "INTEGER"),
        ("message_id", "VARCHAR"),
        ("session_id", "VARCHAR"),
        ("role", "VARCHAR"),
        ("created_at", "BIGINT"),
        ("doc_len", "INTEGER"),
    ],
    "postings": [("tid", "INTEGER"), ("doc", "INTEGER"), ("tf", "INTEGER"), ("dl", "INTEGER")],
    "terms": [("term", "VARCHAR"), ("tid", "INTEGER"), ("df", "INTEGER")],
    "stats": [("n", "BIGINT"), ("total", "BIGINT")],
    "embeddings": [
        ("message_id", "VARCHAR"),
        ("model", "VARCHAR"),
        ("dim", "INTEGER"),
        ("vec", "TINYINT[]"),
        ("scale", "FLOAT"),
        ("cvec", "TINYINT[]"),
        ("cscale", "FLOAT"),
        ("session_id", "VARCHAR"),
        ("role", "VARCHAR"),
        ("created_at", "BIGINT"),
        ("model_key", "BIGINT"),
    ],
    "index_meta": [("key", "VARCHAR"), ("value", "VARCHAR")],
}

#: bumped whenever a table changes: a cached index of another version is rebuilt
SCHEMA_VERSION = "6"

#: the staging table a batch of messages goes through: the ``docs`` columns
#: plus ``toks`` (the message's index terms joined by spaces; terms never hold
#: a space), from which SQL derives ``docs``, ``terms``, ``postings`` and the counts
STAGE_COLUMNS: list[tuple[str, str]] = TABLES["docs"] + [("toks", "VARCHAR")]


#: ART indexes: docs by doc (a search's few winners joined to their ids
#: without a scan), terms by term (a query's term ids). Postings have none:
#: sorted by tid, their zone maps find a term's rows; messages have none (an
#: index on their 26-character ids would cost more than a scan of them saves).
INDEX_STATEMENTS = [
    "CREATE INDEX IF NOT EXISTS docs_doc ON docs (doc)",
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


def message_rows(rec: Mapping[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...], list[str]]:
    """The ``messages`` row, the staging row (``STAGE_COLUMNS`` but ``doc``) and
    the index terms of one message record. Tokenises the text once."""
    row = message_row(rec)
    toks = tokens(row[-1])
    stage = (rec["id"], rec.get("sessionId"), rec.get("role"), rec.get("createdAt"), len(toks), " ".join(toks))
    return row, stage, toks


def message_row(rec: Mapping[str, Any]) -> tuple[Any, ...]:
    """The ``messages`` row of one message record (its plain text last)."""
    text = extract_text(rec.get("content"))
    row: list[Any] = []
    for col, _, key in MESSAGE_COLUMNS:
        if col == "text":
            row.append(text)
        elif col == "token_count":
            row.append(int(rec.get(key) or 0))
        else:
            row.append(rec.get(key))
    return tuple(row)


def row_to_message_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """The camelCase record of a ``messages`` row: what the index holds of a
    message, with its plain ``text`` as content (the store has the record itself)."""
    rec: dict[str, Any] = {key: None for key in RECORD_ONLY}
    for col, _, key in MESSAGE_COLUMNS:
        if key:
            rec[key] = row.get(col)
    rec["content"] = row.get("text") or ""
    return rec


def row_to_session_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """The camelCase record of a ``sessions`` row."""
    return {key: (list(row[col] or []) if col == "tags" else row.get(col)) for col, _, key in SESSION_COLUMNS}
