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
    postings    the inverted index: (tid, doc, tf) integers only, kept
                sorted by (tid, doc) so that a query reads only its terms'
                rows (zone maps skip the rest); BM25 takes a posting's
                document length from ``docs.doc_len`` (a copy on every
                posting cost about a tenth of the file), in Python from the
                docs it keeps (``doctable.DocTable``)
    terms       (term, tid, df): every indexed term, its integer id and its
                document frequency (ART index on term)
    stats       one row (n, total): the number of docs and the sum of doc_len
    embeddings  one row per message and embedder model: (message_id, model, dim,
                vec TINYINT[], scale, cvec TINYINT[], cscale): the message's own
                vector and its in-context vector (NULL when the embedder has none,
                or it equals ``vec``), each l2-normalised and quantised to int8
                with one FLOAT scale (``embeddings.quantize``): ``dim + 4`` bytes a
                vector instead of ``4 * dim``, and the cosine with a unit query
                vector is ``scale * (vec · q)`` (``embeddings.cosine_sql``); plus the
                message's session_id, role and created_at (immutable, copied like
                ``docs``' so that semantic search filters, ranks and breaks ties on
                this one table: it never joins ``messages``), and model_key
                (``embeddings.model_key``: the rows of a model are selected by an
                integer, which zone maps can prove, not by the text)
    index_meta  (key, value): the schema version of a cached (OPFS) index

``messages.text`` is declared with DuckDB's ZSTD compression (``COMPRESSION``):
about 0.37x the text's UTF-8 size where the automatic choice, FSST, keeps about
0.57x (the bench's 100,000 messages: a CPython cache file of 0.69x the text
instead of 0.90x). ZSTD needs a database file of storage version
``STORAGE_VERSION`` or later; a file of an older one would store such a column
uncompressed, so ``create_statements(compress=False)`` leaves the choice to
DuckDB there. ``DuckDBEngine`` creates its files at ``STORAGE_VERSION``; the
page's OPFS file has DuckDB-Wasm's default (v0.10.2: ``db.open`` takes no
storage version, and neither a file written before it opens one nor an
``ATTACH`` of an OPFS file can be written by DuckDB-Wasm 1.32), so there the
text stays FSST.

``terms`` and ``stats`` are kept exact on every write (integer counts), so the
BM25 statistics of the incremental index equal those of a rebuild. Integer ids
(``tid``, ``doc``) are internal: they differ between an index built by events
and one rebuilt, the answers do not. A posting leads back to its message in one
step (``docs.doc``, which is also the docs' sort order).

Column types are DuckDB core types only. The whole index is derived from the
store and can be dropped and rebuilt at any time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..records.models import extract_text
from ..text.tokenize import tokens

__all__ = [
    "INDEXES",
    "INDEX_STATEMENTS",
    "SCHEMA_VERSION",
    "STAGE_COLUMNS",
    "MESSAGE_COLUMNS",
    "OLDER_INDEX",
    "UNFINISHED_INDEX",
    "RECORD_ONLY",
    "COMPRESSION",
    "STORAGE_VERSION",
    "SESSION_COLUMNS",
    "TABLES",
    "create_statements",
    "index_statement",
    "message_row",
    "storage_at_least",
    "table_statement",
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
    "postings": [("tid", "INTEGER"), ("doc", "INTEGER"), ("tf", "INTEGER")],
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
SCHEMA_VERSION = "7"

#: (table, column) -> the compression DuckDB is told to use for it
COMPRESSION: dict[tuple[str, str], str] = {("messages", "text"): "zstd"}

#: the storage version an index file is created with (DuckDB's default, v0.10.2, has no
#: ZSTD for strings); a file of an older one is replaced (it is derived) by the engine
STORAGE_VERSION = "v1.4.0"

#: the notice of a cached index made by an older version (another schema or storage version)
OLDER_INDEX = "The saved search index was made by an older version; it is being rebuilt."
#: the notice when the cached index file's last derivation or save did not end (e.g. the page closed)
UNFINISHED_INDEX = (
    "The saved search index was left unfinished (the page closed while it was made); it is being rebuilt."
)

#: the staging table a batch of messages goes through: the ``docs`` columns
#: plus ``toks`` (the message's index terms joined by spaces; terms never hold
#: a space), from which SQL derives ``docs``, ``terms``, ``postings`` and the counts
STAGE_COLUMNS: list[tuple[str, str]] = TABLES["docs"] + [("toks", "VARCHAR")]


#: ART indexes: docs by doc (a search's few winners joined to their ids
#: without a scan), terms by term (a query's term ids). Postings have none:
#: sorted by tid, their zone maps find a term's rows; messages have none (an
#: index on their 26-character ids would cost more than a scan of them saves).
INDEXES: list[tuple[str, str, str]] = [("docs_doc", "docs", "doc"), ("terms_term", "terms", "term")]


def index_statement(name: str, table: str, column: str, into: str = "") -> str:
    """``CREATE INDEX`` of one of ``INDEXES`` (on the table of database ``into``, when given)."""
    where = f'"{into}".main.{table}' if into else table
    return f"CREATE INDEX IF NOT EXISTS {name} ON {where} ({column})"


INDEX_STATEMENTS = [index_statement(*ix) for ix in INDEXES]


def storage_at_least(tag: Any, version: str) -> bool:
    """Whether a database's ``storage_version`` tag (``"v1.4.0+"``, ``"v1.0.0+"``; None for
    one in memory) is ``version`` or later."""
    if tag is None:
        return True

    def parts(v: str) -> tuple[int, ...]:
        digits = v.strip().lstrip("v").rstrip("+").split(".")
        return tuple(int(d) for d in digits if d.isdigit())

    return parts(str(tag)) >= parts(version)


def table_statement(
    name: str,
    *,
    replace: bool = False,
    compress: bool = True,
    into: str = "",
    named: str = "",
    extra: Sequence[tuple[str, str]] = (),
) -> str:
    """``CREATE TABLE`` of one table (``OR REPLACE`` when ``replace``; in database ``into``
    when given), with the columns' ``COMPRESSION`` when ``compress``; ``named``: a table
    declared as ``name`` is but called this, with the ``extra`` columns after its own."""
    verb = "CREATE OR REPLACE TABLE" if replace else "CREATE TABLE IF NOT EXISTS"
    table = named or name
    where = f'"{into}".main.{table}' if into else table

    def col(c: str, t: str) -> str:
        how = COMPRESSION.get((name, c)) if compress else None
        return f"{c} {t} USING COMPRESSION {how}" if how else f"{c} {t}"

    return f"{verb} {where} (" + ", ".join(col(c, t) for c, t in [*TABLES[name], *extra]) + ")"


def create_statements(replace: bool = False, *, compress: bool = True) -> list[str]:
    """``CREATE TABLE`` for every table (``OR REPLACE`` when ``replace``; with the columns'
    ``COMPRESSION`` when ``compress``), the indexes, and the one ``stats`` row."""
    return (
        [table_statement(name, replace=replace, compress=compress) for name in TABLES]
        + INDEX_STATEMENTS
        + [
            "INSERT INTO stats SELECT 0, 0 WHERE NOT EXISTS (SELECT 1 FROM stats)",
        ]
    )


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
    stage = (
        rec["id"],
        rec.get("sessionId"),
        rec.get("role"),
        rec.get("createdAt"),
        len(toks),
        " ".join(toks),
    )
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
