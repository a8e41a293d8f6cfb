"""``check_read_only``: let one read-only query through to the index, nothing else.

The SQL is scanned the way DuckDB's lexer reads it: comments (``--`` up to
``\n`` or ``\r``, nested ``/* */``), string literals (``'...'`` with ``''``,
``E'...'`` with backslash escapes, ``$tag$...$tag$``; neither of the last two
right after a character that continues a name) and quoted identifiers
(``"..."``) are skipped, so a semicolon or a keyword inside them is harmless.
Where the guard and DuckDB could disagree, the guard must see more code, never
less. Then:

- one statement only (trailing semicolons are allowed);
- it starts with ``SELECT``, ``WITH``, ``FROM`` (DuckDB's FROM-first form),
  ``VALUES``, ``TABLE``, ``DESCRIBE``, ``SHOW``, ``SUMMARIZE`` or ``EXPLAIN``
  (not ``EXPLAIN ANALYZE``, which runs its statement);
- no write or side-effect keyword appears anywhere outside literals
  (``INSERT UPDATE DELETE DROP CREATE ALTER ATTACH DETACH COPY INSTALL LOAD
  PRAGMA SET RESET CALL EXPORT IMPORT ...``); a column that has such a name
  must be double-quoted;
- no function that reads files or runs SQL text (``read_csv``, ``glob``,
  ``query``, ``query_table``...), whether its name is written bare or
  double-quoted (``"read_csv"(...)``);
- no file named as a table: a string literal or a quoted name that looks like
  a path (``FROM 'x.csv'``, ``FROM "notes.csv"``, ``SUMMARIZE '...'``,
  ``DESCRIBE "x.parquet"``).

The guard is the first wall, not the only one. The engine's
``execute_read_only`` counts the statements with DuckDB's own parser and runs
the query inside a read-only transaction that is rolled back, and the engine is
locked down (no file or network access, configuration locked: see
``chatmem.index.sql_engine``).

This is a guard for honest mistakes and hostile strings alike, and the index
is a derived copy: even so, it is strict rather than clever.
"""

from __future__ import annotations

import re

from ..errors import ReadOnlySQLError

__all__ = ["FORBIDDEN_FUNCTIONS", "FORBIDDEN_KEYWORDS", "READ_STARTS", "check_read_only", "strip_sql"]

READ_STARTS = frozenset(
    {"select", "with", "from", "values", "table", "describe", "show", "summarize", "explain"}
)

FORBIDDEN_KEYWORDS = frozenset(
    {
        "insert",
        "update",
        "delete",
        "drop",
        "create",
        "alter",
        "attach",
        "detach",
        "copy",
        "install",
        "load",
        "pragma",
        "set",
        "reset",
        "call",
        "export",
        "import",
        "truncate",
        "merge",
        "upsert",
        "replace",
        "vacuum",
        "checkpoint",
        "force",
        "begin",
        "commit",
        "rollback",
        "abort",
        "transaction",
        "use",
        "grant",
        "revoke",
        "prepare",
        "execute",
        "deallocate",
        "analyze",
        "comment",
        "returning",
        "into",
    }
)

FORBIDDEN_FUNCTIONS = frozenset(
    {
        "read_csv",
        "read_csv_auto",
        "read_text",
        "read_blob",
        "read_json",
        "read_json_auto",
        "read_json_objects",
        "read_ndjson",
        "read_ndjson_auto",
        "read_ndjson_objects",
        "read_parquet",
        "parquet_scan",
        "parquet_metadata",
        "parquet_schema",
        "parquet_file_metadata",
        "parquet_kv_metadata",
        "sniff_csv",
        "glob",
        "query",
        "query_table",
        "csv_scan",
        "iceberg_scan",
        "delta_scan",
        "sqlite_scan",
        "postgres_scan",
        "mysql_scan",
        "getenv",
        "load_extension",
        "read_xlsx",
        "st_read",
    }
)

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")
#: where DuckDB ends a ``--`` comment: its lexer's ``newline`` is ``[\n\r]``, nothing else
#: (a guard that also ended it at U+2028 or U+0085 would see a statement where DuckDB sees
#: a comment, and the other way round a literal where DuckDB sees a statement)
_LINE_END = re.compile(r"[\n\r]")


def _continues_name(c: str) -> bool:
    """Whether DuckDB reads ``c`` as part of a name, so that an ``E'`` or ``$tag$`` right
    after it does not open a literal: its lexer's ``ident_cont`` is ASCII letters, digits,
    ``_``, ``$`` and every byte of a non-ASCII character."""
    return not c.isascii() or c.isalnum() or c in "_$"


def _fail(msg: str) -> ReadOnlySQLError:
    return ReadOnlySQLError(msg, field="query")


def strip_sql(sql: str, idents: list[str] | None = None) -> str:
    """``sql`` with comments removed and every literal or quoted identifier replaced
    by a placeholder (``''`` or ``""``), so that what is left is only SQL structure.

    When ``idents`` is given, the names inside the quoted identifiers are appended
    to it in order (``""`` doubled quotes undone)."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        nxt = sql[i + 1] if i + 1 < n else ""
        if c == "-" and nxt == "-":
            line_end = _LINE_END.search(sql, i)
            i = n if line_end is None else line_end.end()
            out.append(" ")
        elif c == "/" and nxt == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if sql.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif sql.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            if depth:
                raise _fail("unterminated /* comment")
            i = j
            out.append(" ")
        elif c == "'" or (c in "eE" and nxt == "'" and not (i and _continues_name(sql[i - 1]))):
            backslash = c in "eE"
            j = i + (2 if backslash else 1)
            while True:
                if j >= n:
                    raise _fail("unterminated string literal")
                if backslash and sql[j] == "\\":
                    j += 2
                    continue
                if sql[j] == "'":
                    if j + 1 < n and sql[j + 1] == "'":
                        j += 2
                        continue
                    break
                j += 1
            i = j + 1
            out.append("''")
        elif c == '"':
            j = i + 1
            while True:
                if j >= n:
                    raise _fail("unterminated quoted identifier")
                if sql[j] == '"':
                    if j + 1 < n and sql[j + 1] == '"':
                        j += 2
                        continue
                    break
                j += 1
            if idents is not None:
                idents.append(sql[i + 1 : j].replace('""', '"'))
            i = j + 1
            out.append('""')
        elif c == "$" and (m := _DOLLAR.match(sql, i)) and not (i and _continues_name(sql[i - 1])):
            tag = m.group()
            j = sql.find(tag, m.end())
            if j < 0:
                raise _fail("unterminated dollar-quoted string")
            i = j + len(tag)
            out.append("''")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check_read_only(sql: str) -> None:
    """Raise ``ReadOnlySQLError`` unless ``sql`` is exactly one read-only statement."""
    if not isinstance(sql, str):
        raise _fail("query must be a string")
    idents: list[str] = []
    bare = strip_sql(sql, idents).strip()
    while bare.endswith(";"):
        bare = bare[:-1].rstrip()
    if not bare:
        raise _fail("query is empty")
    if ";" in bare:
        raise _fail("only one statement is allowed (found a ';' between statements)")
    words = [w.lower() for w in _WORD.findall(bare)]
    first = words[0] if words else ""
    if first not in READ_STARTS:
        raise _fail(f"only read-only queries are allowed; {first.upper() or bare[:10]!r} is not one")
    if first == "explain" and len(words) > 1 and words[1] == "analyze":
        raise _fail("EXPLAIN ANALYZE runs its statement; use EXPLAIN")
    for w in words:
        if w in FORBIDDEN_KEYWORDS:
            raise _fail(
                f"{w.upper()} is not allowed in a read-only query (double-quote a column with that name)"
            )
    for m in re.finditer(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", bare):
        if m.group(1).lower() in FORBIDDEN_FUNCTIONS:
            raise _fail(f"{m.group(1)}() reads files or runs SQL text and is not allowed")
    _check_tokens(bare, idents)


_CLAUSES = frozenset(
    {
        "select",
        "from",
        "join",
        "where",
        "group",
        "having",
        "order",
        "limit",
        "qualify",
        "window",
        "union",
        "except",
        "intersect",
        "on",
        "using",
        "offset",
    }
)
_TOKEN = re.compile(r"''|\"\"|[A-Za-z_][A-Za-z0-9_$]*|[(),]")
#: statements whose operand may be a table (and so a file)
_TABLE_STARTS = frozenset({"summarize", "describe", "show", "table"})
_PATHLIKE = re.compile(r"[./\\:*?~]")


def _check_tokens(bare: str, idents: list[str]) -> None:
    """Reject a string literal or a path-like quoted name used as a table (``FROM 'x.csv'``,
    ``FROM t, "x.csv"``, ``JOIN 'x.csv'``, ``SUMMARIZE 'x.csv'``): DuckDB would read that
    file. Reject a quoted name called as a forbidden function (``"read_csv"(...)``)."""
    clause = [""]  # the current clause keyword at each parenthesis depth
    prev = ""
    toks = _TOKEN.findall(bare)
    names = iter(idents)
    for k, tok in enumerate(toks):
        low = tok.lower()
        table_pos = (clause[-1] in ("from", "join") and prev in ("from", "join", ",", "(")) or (
            prev in _TABLE_STARTS
        )
        if tok == '""':
            name = next(names, "")
            if k + 1 < len(toks) and toks[k + 1] == "(" and name.lower() in FORBIDDEN_FUNCTIONS:
                raise _fail(f"{name}() reads files or runs SQL text and is not allowed")
            if table_pos and _PATHLIKE.search(name):
                raise _fail(f"reading a file by name is not allowed ({name!r} is not a table)")
        elif tok == "(":
            clause.append("")
        elif tok == ")":
            if len(clause) > 1:
                clause.pop()
        elif low in _CLAUSES:
            clause[-1] = low
        elif tok == "''" and table_pos:
            raise _fail("reading a file by name is not allowed")
        prev = low
