"""The SQL engine boundary of the query index.

``SQLEngine`` is the whole of what the index asks of a database, so that the
same index code runs over the ``duckdb`` package on CPython (``DuckDBEngine``,
here) and over DuckDB-Wasm in the browser (the browser adapter):

- ``execute(sql, params)``: one statement; ``?`` placeholders bound to
  **scalar** parameters only (``str``, ``int``, ``float``, ``bool``, ``None``);
  rows come back as dicts keyed by column name (lists as Python lists);
- ``executemany(sql, rows)``: the same statement for each row of scalars;
- ``load_rows(table, columns, rows)``: the bulk path; values may be scalars
  or lists of scalars (for ``VARCHAR[]`` / ``FLOAT[]`` columns);
- ``close()``;
- optionally ``execute_small(sql, params)``: ``execute`` for a statement known to be
  small, which the engine may run without a thread hop (``DuckDBEngine`` does);
- optionally ``execute_columns(sql, params)``: the rows as one list per column (in
  select order), no dict per row: the page's engine answers column by column anyway,
  and a dict per row of a 2,000-row page cost 6-30 ms of the page's main thread
  (``columns`` falls back to ``execute``).

Every engine must have run ``SET autoload_known_extensions=false``: the index
uses core SQL only (no json, fts, vss, icu), so nothing reaches for the network.
Every engine is locked down before it serves a query: ``enable_external_access
= false`` (no files, no network) and ``lock_configuration = true`` (no ``SET``
can undo it), so even SQL that slips past the guard reads only the index.
``execute_read_only`` (what ``mem.sql`` uses) walls a user's statement in
twice more: DuckDB's parser must read exactly one statement, and it runs inside
``BEGIN_READ_ONLY`` … ``ROLLBACK``. Like ``execute(..., interruptible=True)`` it
is interrupted when the awaiting task is cancelled or times out, and the engine
is free again when the cancellation has been delivered.

Nothing here is durable: the index is a derived copy of the store.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import DatabaseClosed, QueryError, ReadOnlySQLError
from ..scheduling.settle import settle
from .nearest import NearestFilter
from .schema import OLDER_INDEX, STORAGE_VERSION, storage_at_least

__all__ = [
    "BEGIN_READ_ONLY",
    "READ_ONLY_REFUSAL",
    "WORK",
    "WRITE_REFUSED",
    "DuckDBEngine",
    "SQLEngine",
    "TextFill",
    "columns",
    "marks",
    "may_rewrite_embeddings",
]

Row = Sequence[Any]


def marks(n: int) -> str:
    """``n`` parameter marks for an ``IN (...)`` list: ``?, ?, ?``."""
    return ", ".join("?" for _ in range(n))


async def columns(engine: SQLEngine, sql: str, params: list[Any] | None = None) -> list[list[Any]]:
    """The result of ``sql`` as one list per column, in select order (``[]`` for no rows)."""
    cols = await engine.execute_columns(sql, params)
    return cols if cols and cols[0] else []


class TextFill:
    """What a runtime offers to fill ``messages`` after a derivation that left the texts
    out (``EngineDerivation.texts_later``): the stored messages, a step at a time."""

    async def step(self, skip_sessions: list[str], skip_ids: list[str]) -> tuple[int, bool]:
        """Append the next messages (with their texts) to ``messages``, but those of the
        sessions ``skip_sessions`` and the messages ``skip_ids`` (written there, or taken
        out, by writes applied since the fill began); answers how many went in and whether
        every message has been read."""
        raise NotImplementedError


class EngineDerivation:
    """What a runtime offers to derive the keyword tables next to its store (the page's
    ``PageDerivation``). Each method is one step of ``derive``."""

    #: the texts are left out: the docs go into ``docs`` (no ``keywords.STAGE``), ``messages``
    #: stays empty, and ``text_fill`` fills it once the index answers searches
    texts_later: bool = False

    def text_fill(self, step: int) -> TextFill:
        """The fill of ``messages`` after this derivation (``texts_later``), about ``step``
        messages a step."""
        raise NotImplementedError

    async def next(self) -> dict[str, Any] | None:
        """Read and split the next chunk: ``{"words": [...], "hard": [...]}`` (words without
        terms yet, texts it cannot split), or None when every message was read."""
        raise NotImplementedError

    async def feed(self, terms: dict[str, list[str]], hard: list[list[str]]) -> dict[str, list[Any]]:
        """The chunk's missing terms and its hard texts' words: load the chunk; answers its
        docs as columns ``doc``, ``id``, ``created``, ``len``."""
        raise NotImplementedError

    async def finish(self) -> dict[str, Any]:
        """Wait for the loads, load ``terms`` (df 0); answers its milliseconds per phase, and
        ``sorted``: whether ``postings`` went in sorted by (tid, doc)."""
        raise NotImplementedError

    async def abort(self) -> None:
        """Stop after the loads under way (the engine is free when this returns)."""
        raise NotImplementedError

    async def attach(self, engine: Any) -> None:
        """The engine, for a derivation made before it was open (its loads waited for it);
        nothing to do for one made with its engine."""


@runtime_checkable
class SQLEngine(Protocol):
    """A DuckDB connection as the query index uses it: statements, bulk loads, files."""

    #: True when the database is a file that outlives the engine (``LiveIndex`` reopens it)
    persistent: bool
    #: a sentence for the user about this engine's index (e.g. an older file was replaced)
    notice: str | None
    #: milliseconds per step of the engine's opening (empty where not measured)
    open_ms: dict[str, float]
    #: True when statements run in this thread's process (CPython's ``duckdb``): a statement
    #: is cheap and ``execute_small`` skips the hop to a worker; in the page each statement
    #: is a round trip to the engine's worker
    in_thread: bool
    #: True when ``execute_columns`` is the engine's own (the page's: no dict per row built
    #: on the main thread), not built from ``execute``'s rows
    columnar: bool

    async def execute(
        self, sql: str, params: list[Any] | None = None, *, interruptible: bool = False
    ) -> list[dict[str, Any]]:
        """Run one statement with ``?`` bound to scalar ``params``; return its rows as dicts.

        ``interruptible``: a cancellation of the awaiting task interrupts the statement."""
        ...

    async def executemany(self, sql: str, rows: Sequence[Row]) -> None:
        """Run one statement once per row of scalar parameters."""
        ...

    async def load_rows(self, table: str, columns: list[str], rows: Sequence[Row]) -> None:
        """Append ``rows`` (tuples in ``columns`` order) to ``table`` in bulk."""
        ...

    async def execute_read_only(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        """Run a user's statement, already passed by ``check_read_only``: exactly one
        statement as DuckDB's parser reads it, inside ``BEGIN_READ_ONLY`` … ``ROLLBACK``,
        interruptible as ``execute(..., interruptible=True)``."""
        ...

    async def execute_small(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        """``execute`` for a statement known to be small (a few thousand rows at most)."""
        ...

    async def execute_columns(self, sql: str, params: list[Any] | None = None) -> list[list[Any]]:
        """The result of ``sql`` as one list per column, in select order."""
        ...

    def derivation(self, store: Any, session_counts: list[tuple[str, int]]) -> EngineDerivation | None:
        """The engine's own derivation of the keyword tables from ``store`` (the page's,
        done in JS from IndexedDB), or None: the index derives them in Python."""
        ...

    async def nearest(
        self,
        model_key: int,
        dim: int,
        vector: Sequence[float],
        k: int,
        candidates: int,
        filter: NearestFilter | None = None,
    ) -> list[list[Any]] | None:
        """The ``k`` rows of model ``model_key`` and ``dim`` dimensions nearest to the unit
        ``vector`` among those ``filter`` admits, from the engine's approximate index
        (``index.nearest``), best first: one list per column ``message_id, created_at, sim,
        rsim``. None: the engine keeps no approximate index (search scans the vectors)."""
        ...

    async def close(self) -> None: ...


#: the in-memory database a cached index is copied into and queried in (``cache``); a
#: statement names it, or no database at all, when it writes the index's own tables
WORK = "chatmem_work"

#: the statements that move the whole working database (another one made the default, a
#: copy, an undone transaction): every row may have changed
_WHOLE = ("ROLLBACK", "USE", "COPY", "ATTACH", "DETACH")
_NAME = r'(?:"[^"]*"|[A-Za-z_][A-Za-z_0-9$]*)'
#: the table a write statement writes: INSERT INTO, DELETE FROM, UPDATE, CREATE / DROP /
#: ALTER / TRUNCATE TABLE, as one to three dotted names
_TARGET = re.compile(
    r"^\s*(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|DELETE\s+FROM|UPDATE|"
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\s+|TEMPORARY\s+)?TABLE(?:\s+IF\s+NOT\s+EXISTS)?|"
    r"DROP\s+TABLE(?:\s+IF\s+EXISTS)?|ALTER\s+TABLE|TRUNCATE(?:\s+TABLE)?)\s+"
    rf"({_NAME}(?:\s*\.\s*{_NAME}){{0,2}})",
    re.IGNORECASE,
)


def may_rewrite_embeddings(sql: str) -> bool:
    """Whether a statement of the library's may change the working ``embeddings`` rows other
    than by appending them (``load_rows``): a write whose target is that table (in no other
    database), or a statement that moves the whole working database (``_WHOLE``). A write
    into another table or into the cache file (``INSERT INTO "file".main.embeddings``) is
    not; a statement whose target cannot be read counts when it names ``embeddings``.
    ``web/js/query-engine.js`` (``mayRewrite``) applies the same rule in the page."""
    head = sql.lstrip()[:8].upper()
    if head.startswith(_WHOLE):
        return True
    if "embeddings" not in sql.lower() or head.startswith(("SELECT", "WITH", "EXPLAIN", "FROM", "PRAGMA")):
        return False
    m = _TARGET.match(sql)
    if m is None:
        return True
    parts: list[str] = [p.strip().strip('"').lower() for p in re.findall(_NAME, m.group(1))]
    if parts[-1] != "embeddings":
        return False
    if len(parts) == 3 or (len(parts) == 2 and parts[0] not in ("main", "temp")):
        return parts[0] == WORK
    return True


def rows_to_columns(rows: list[dict[str, Any]]) -> list[list[Any]]:
    """Rows as one list per column, in select order (``[]`` for no rows)."""
    return [list(c) for c in zip(*(r.values() for r in rows))]


#: the second wall around a user's statement: DuckDB refuses any write inside it (the
#: locked configuration alone does not stop ``DROP``, ``DELETE`` or ``CREATE``)
BEGIN_READ_ONLY = "BEGIN TRANSACTION READ ONLY"
#: the words of DuckDB's refusal of a write inside ``BEGIN_READ_ONLY``
READ_ONLY_REFUSAL = "transaction is launched in read-only mode"
WRITE_REFUSED = "the query writes, and only read-only queries are allowed"
#: the statement types a user's query may be, as ``duckdb``'s parser names them
_READ_KINDS = frozenset({"SELECT", "EXPLAIN"})

_SMALL_BATCH = 4  # rows up to which one multi-row INSERT ... VALUES beats a CSV file (the duckdb
# package binds a parameter in ~0.1 ms: 100 message rows 118 ms as VALUES, 10 ms through a CSV file)
_LIST_START, _LIST_SEP = "\x1e", "\x1f"


def _csv_field(v: Any) -> str:
    if v is None:
        return "\\N"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        v = _LIST_START + _LIST_SEP.join("" if x is None else str(x) for x in v)
    return '"' + str(v).replace('"', '""') + '"'


class _Call:
    """One engine call: whether it was cancelled before it started."""

    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False


def _number_lists_as_text(row: Row, at: list[int]) -> list[Any]:
    """``row`` with its number lists at the positions ``at`` as DuckDB list text (``[1,2]``)."""
    out = list(row)
    for i in at:
        v = out[i]
        if v is not None:
            out[i] = "[" + ",".join(map(str, v)) + "]"
    return out


def _pandas_known_absent() -> None:
    """Where pandas is not installed, say so in ``sys.modules`` (as a failed import means).

    The ``duckdb`` package looks for pandas on every bound parameter, to recognise its
    types, and when pandas is missing it searches ``sys.path`` for it again each time:
    about 0.1 ms a parameter, most of a small query's cost. With ``None`` recorded the
    lookup fails at once. An import of pandas fails the same way either way; one
    installed into the running process after this is not seen until it restarts."""
    if "pandas" not in sys.modules and importlib.util.find_spec("pandas") is None:
        sys.modules["pandas"] = None  # type: ignore[assignment]


class DuckDBEngine:
    """``SQLEngine`` over the ``duckdb`` package (CPython only).

    Each call runs in a worker thread, one at a time (a lock), so the event loop
    never blocks on a query. ``path`` is ``":memory:"`` or a database file.
    Bulk loads go through a temporary CSV file read by DuckDB's core CSV reader
    (about 2 M rows/s here; ``executemany`` manages a few thousand) from a
    private temporary folder: the only place the locked-down engine may read.
    """

    def __init__(self, path: str = ":memory:"):
        import duckdb  # imported here: the package is optional and absent in the browser

        _pandas_known_absent()
        self._duckdb = duckdb
        self.path = path
        #: a database file outlives this engine: ``LiveIndex`` reopens it and catches up
        self.persistent = path != ":memory:"
        #: a sentence for the user when an older index file was replaced (``LiveIndex.notice``)
        self.notice: str | None = None
        self.open_ms: dict[str, float] = {}
        self.in_thread = True
        self.columnar = False
        #: bulk loads into ``embeddings`` (appends: their rows take rowids past every other's)
        self.embeddings_appended = 0
        #: every other write that may touch ``embeddings`` (a statement naming it that is not a
        #: read, a rollback): what ``partitions.VectorPartitions`` keeps its copies exact by
        self.embeddings_rewritten = 0
        self._con = self._connect(path)
        self._con.execute("SET autoload_known_extensions=false")
        self._con.execute("SET autoinstall_known_extensions=false")
        #: bulk-load files live here; the engine may read nothing else
        self._tmp = tempfile.mkdtemp(prefix="chatmem-index-")
        allowed = os.path.join(os.path.realpath(self._tmp), "").replace("'", "''")
        self._con.execute(f"SET allowed_directories=['{allowed}']")
        self._con.execute("SET enable_external_access=false")
        self._con.execute("SET lock_configuration=true")
        self._lock = threading.Lock()
        self._running: _Call | None = None
        self._types: dict[str, dict[str, str]] = {}
        self._closed = False

    def _connect(self, path: str) -> Any:
        """Connect to ``path``; a new file gets ``schema.STORAGE_VERSION``, and an index file
        of an older storage version (a derived copy: nothing is lost) is replaced by a new one."""
        duckdb = self._duckdb
        config = {"storage_compatibility_version": STORAGE_VERSION}
        con = duckdb.connect(path, config=config)
        if not self.persistent:
            return con
        row = con.execute(
            "SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = current_database()"
        ).fetchone()
        if storage_at_least(row[0] if row else None, STORAGE_VERSION):
            return con
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        if tables and "index_meta" not in tables:
            return con  # not an index file: left as it is
        con.close()
        for f in (path, path + ".wal"):
            if os.path.exists(f):
                os.remove(f)
        self.notice = OLDER_INDEX
        return duckdb.connect(path, config=config)

    # ------------------------------------------------------------------ plumbing
    def _run(self, call: _Call | None, fn: Any, *args: Any) -> Any:
        with self._lock:
            if self._closed:
                raise DatabaseClosed("the query index is closed")
            if call is not None and call.cancelled:
                raise QueryError("cancelled before it started")
            self._running = call
            try:
                return fn(*args)
            except self._duckdb.Error as e:
                raise QueryError(f"{type(e).__name__}: {e}") from e
            finally:
                self._running = None

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(self._run, None, fn, *args)

    async def _interruptible(self, fn: Any, *args: Any) -> Any:
        """Like ``_call``, but a cancellation interrupts the statement and waits until it stopped."""
        call = _Call()
        fut = asyncio.ensure_future(asyncio.to_thread(self._run, call, fn, *args))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            call.cancelled = True

            def interrupt() -> None:
                if self._running is call:
                    self._con.interrupt()

            await settle(fut, poke=interrupt, interval=0.05)  # the engine is free when we return
            raise

    def _count_write(self, sql: str) -> None:
        if may_rewrite_embeddings(sql):
            self.embeddings_rewritten += 1

    def _execute(self, sql: str, params: list[Any] | None) -> list[dict[str, Any]]:
        if not may_rewrite_embeddings(sql):
            cur = self._con.execute(sql, params or [])
            if cur.description is None:
                return []
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]
        try:
            cur = self._con.execute(sql, params or [])
            names = [d[0] for d in cur.description or []]
            rows = cur.fetchall() if cur.description is not None else []
        except BaseException:
            self.embeddings_rewritten += 1
            raise
        # a DELETE or UPDATE that changed no row (DuckDB answers its ``Count``) left the table as it was
        if not (names == ["Count"] and rows and rows[0][0] == 0):
            self.embeddings_rewritten += 1
        return [dict(zip(names, row)) for row in rows]

    def _execute_read_only(self, sql: str, params: list[Any] | None) -> list[dict[str, Any]]:
        statements = self._con.extract_statements(sql)
        if len(statements) != 1:
            raise ReadOnlySQLError(
                f"only one statement is allowed (DuckDB reads {len(statements)})", field="query"
            )
        kind = str(statements[0].type.name)
        if kind not in _READ_KINDS:
            raise ReadOnlySQLError(
                f"only read-only queries are allowed; DuckDB reads a {kind} statement", field="query"
            )
        self._con.execute(BEGIN_READ_ONLY)
        try:
            return self._execute(sql, params)
        except self._duckdb.TransactionException as e:
            if READ_ONLY_REFUSAL in str(e):
                raise ReadOnlySQLError(WRITE_REFUSED, field="query") from e
            raise
        finally:
            self._con.execute("ROLLBACK")

    def _executemany(self, sql: str, rows: Sequence[Row]) -> None:
        self._count_write(sql)
        if rows:
            self._con.executemany(sql, [list(r) for r in rows])

    def _column_types(self, table: str) -> dict[str, str]:
        types = self._types.get(table)
        if types is None:
            got = self._con.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = ? AND table_schema = current_schema()",
                [table],
            ).fetchall()
            types = {name: dtype for name, dtype in got}
            self._types[table] = types
        return types

    def _load_rows(self, table: str, columns: list[str], rows: Sequence[Row]) -> None:
        if not rows:
            return
        if table == "embeddings":
            self.embeddings_appended += 1
        cols = ", ".join(f'"{c}"' for c in columns)
        if len(rows) <= _SMALL_BATCH:
            types = self._types.get(table) or self._column_types(table)
            # a number list bound as a Python list costs about 0.2 ms per element in the
            # duckdb package (an embedding row: 50 ms); as its text, cast in SQL, 1 ms a row
            numbers = [
                i
                for i, c in enumerate(columns)
                if types.get(c, "").endswith("[]") and not types[c].startswith("VARCHAR")
            ]
            marks = ["?"] * len(columns)
            for i in numbers:
                marks[i] = f"CAST(? AS {types[columns[i]]})"
            one = "(" + ", ".join(marks) + ")"
            sql = f'INSERT INTO "{table}" ({cols}) VALUES ' + ", ".join(one for _ in rows)
            if numbers:
                rows = [_number_lists_as_text(r, numbers) for r in rows]
            self._con.execute(sql, [v for r in rows for v in r])
            return
        self._types.pop(table, None)  # the schema may have been recreated since
        types = self._column_types(table)
        fd, path = tempfile.mkstemp(prefix="load-", suffix=".csv", dir=self._tmp)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                f.writelines(",".join(map(_csv_field, r)) + "\n" for r in rows)
            exprs = []
            for i, c in enumerate(columns):
                t = types[c]
                if t.endswith("[]"):
                    exprs.append(
                        f"CASE WHEN c{i} IS NULL THEN NULL WHEN c{i} = chr(30) THEN []::{t} "
                        f"ELSE string_split(c{i}[2:], chr(31))::{t} END"
                    )
                else:
                    exprs.append(f"CAST(c{i} AS {t})")
            spec = ", ".join(f"'c{i}': 'VARCHAR'" for i in range(len(columns)))
            self._con.execute(
                f'INSERT INTO "{table}" ({cols}) SELECT {", ".join(exprs)} FROM read_csv(?, '
                f"columns = {{{spec}}}, header = false, delim = ',', quote = '\"', escape = '\"', "
                "nullstr = '\\N', allow_quoted_nulls = false, auto_detect = false, "
                "strict_mode = true, parallel = true)",
                [path],
            )
        finally:
            os.unlink(path)

    # ------------------------------------------------------------------ protocol
    async def execute(
        self, sql: str, params: list[Any] | None = None, *, interruptible: bool = False
    ) -> list[dict[str, Any]]:
        run = self._interruptible if interruptible else self._call
        result: list[dict[str, Any]] = await run(self._execute, sql, params)
        return result

    async def execute_read_only(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        """A user's statement (``mem.sql``): counted with DuckDB's own parser (exactly one, or
        ``ReadOnlySQLError``), run inside a read-only transaction that is rolled back, and
        interrupted when the awaiting task is cancelled."""
        result: list[dict[str, Any]] = await self._interruptible(self._execute_read_only, sql, params)
        return result

    async def execute_small(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        """``execute`` for a statement the caller knows to be small (a few thousand rows
        at most): run on the calling thread when the engine is free, which saves the
        hop to a worker thread and back (it blocks the event loop for the statement's
        short time); in a worker thread, as ``execute``, when another call holds it."""
        if not self._lock.acquire(blocking=False):
            return await self.execute(sql, params)
        try:
            if self._closed:
                raise DatabaseClosed("the query index is closed")
            try:
                return self._execute(sql, params)
            except self._duckdb.Error as e:
                raise QueryError(f"{type(e).__name__}: {e}") from e
        finally:
            self._lock.release()

    async def execute_columns(self, sql: str, params: list[Any] | None = None) -> list[list[Any]]:
        return rows_to_columns(await self.execute(sql, params))

    def derivation(self, store: Any, session_counts: list[tuple[str, int]]) -> EngineDerivation | None:
        return None

    async def nearest(
        self,
        model_key: int,
        dim: int,
        vector: Sequence[float],
        k: int,
        candidates: int,
        filter: NearestFilter | None = None,
    ) -> list[list[Any]] | None:
        """None: DuckDB scans the vectors on all cores here, and a filtered search reads a
        copy of the rows its filter admits (``partitions``)."""
        return None

    async def executemany(self, sql: str, rows: Sequence[Row]) -> None:
        await self._call(self._executemany, sql, rows)

    async def load_rows(self, table: str, columns: list[str], rows: Sequence[Row]) -> None:
        await self._call(self._load_rows, table, columns, rows)

    async def close(self) -> None:
        def _close() -> None:
            with self._lock:
                if not self._closed:
                    self._closed = True
                    self._con.close()
                    shutil.rmtree(self._tmp, ignore_errors=True)

        await asyncio.to_thread(_close)
