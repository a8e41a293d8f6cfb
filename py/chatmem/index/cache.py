"""A cached copy of the query index in a database file.

The engine's own database is the cache file (an OPFS file in the browser, a
DuckDB file on CPython). A valid file is queried where it is, so the first
answer after a reload waits for no copy (copying 100,000 messages into memory
took 2-3 s in the page); ``to_memory`` later attaches an in-memory database,
copies the file into it and makes it the default (queries over a file-backed
database pay for its block handling on every scan). A file that is rebuilt is
rebuilt in memory (``to_memory(copy=False)``).

``save``: while the file is the working database, a checkpoint (every write
already went into it, transaction by transaction); once in memory, the file's
old tables are dropped and checkpointed first, so that their blocks are free,
then the in-memory tables are copied in one transaction, their ART indexes
built, and ``index_meta`` (the mark of a complete index) copied last, then
checkpointed: the copy fills the freed blocks instead of growing the file by a
second copy of the index (replacing both in one transaction kept the old
blocks until its checkpoint, so every save after the first left the file twice
the index's size). A save interrupted on the way leaves a file without
``index_meta``, which the next opening rebuilds from the store.

A save is a run of short steps (a table, or ``COPY_PART`` postings, per
transaction), each under the caller's ``hold``: queries run between two steps
(a save of 100,000 messages' index in one transaction held every query ~1 s,
0.6 s of it its commit). Each table is copied as it is at its step.

``compress``: whether the file's storage version has the compression the schema
asks for (``schema.COMPRESSION``, ``STORAGE_VERSION``): True for ``DuckDBEngine``'s
files, False for the page's OPFS file (DuckDB-Wasm's default storage version).

What is durable: the cache file as of the last committed write (on the file) or
the last ``save`` (in memory). Writes after that are lost with the page, and the
next opening catches up from the store (the store is the source of truth).
"""

from __future__ import annotations

import contextlib
from typing import Any, AsyncContextManager, Callable

from .schema import (
    INDEXES,
    SCHEMA_VERSION,
    STORAGE_VERSION,
    TABLES,
    index_statement,
    storage_at_least,
    table_statement,
)
from .sql_engine import WORK, SQLEngine

__all__ = ["COPY_PART", "IndexCache", "WORK"]

#: postings copied into the file per transaction of a save (about 0.2 s each in the page)
COPY_PART = 2_000_000


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class IndexCache:
    """The cache file behind ``engine`` (whose default database it is when created)."""

    def __init__(self, engine: SQLEngine):
        self.engine = engine
        self.file_db: str | None = None
        #: the working database is the in-memory copy (else the file itself)
        self.in_memory = False
        #: the file's storage version has ``schema.COMPRESSION``
        self.compress = True

    async def attach_work(self) -> None:
        """Note the file's database (the working one until ``to_memory``) and whether its
        storage version has the schema's compression."""
        rows = await self.engine.execute(
            "SELECT database_name AS d, tags['storage_version'] AS v FROM duckdb_databases() "
            "WHERE database_name = current_database()"
        )
        self.file_db = str(rows[0]["d"])
        self.compress = storage_at_least(rows[0]["v"], STORAGE_VERSION)

    async def to_memory(self, copy: bool = True) -> None:
        """Attach the in-memory working database, copy the file's index into it (tables
        and ART indexes; not with ``copy=False``) and make it the default."""
        assert self.file_db is not None
        if self.in_memory:
            return
        await self.engine.execute(f"ATTACH ':memory:' AS {WORK}")
        try:
            if copy:
                await self.engine.execute(f"COPY FROM DATABASE {_q(self.file_db)} TO {WORK}")
            await self.engine.execute(f"USE {WORK}")
        except BaseException:
            await self.engine.execute(f"DETACH {WORK}")
            raise
        self.in_memory = True

    async def _tables(self) -> set[str]:
        rows = await self.engine.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main'",
            [self.file_db],
        )
        return {r["table_name"] for r in rows}

    async def state(self) -> str:
        """``"valid"`` (a complete index of this schema version), ``"empty"`` (a new
        file), ``"unfinished"`` (this schema version, but a derivation or a save that
        did not end) or ``"stale"`` (something else: an older schema)."""
        tables = await self._tables()
        if not tables:
            return "empty"
        if not set(TABLES) <= tables:
            return "stale"
        meta = await self._meta()
        if meta.get("schema") != SCHEMA_VERSION:
            return "stale"
        return "valid" if meta.get("complete") == "1" else "unfinished"

    async def valid(self) -> bool:
        """The file holds a complete index of this schema version."""
        if not set(TABLES) <= await self._tables():
            return False
        meta = await self._meta()
        return meta.get("schema") == SCHEMA_VERSION and meta.get("complete") == "1"

    async def _meta(self) -> dict[str, str]:
        assert self.file_db is not None
        rows = await self.engine.execute(
            f"SELECT key, value FROM {_q(self.file_db)}.main.index_meta WHERE key IN ('schema', 'complete')"
        )
        return {str(r["key"]): str(r["value"]) for r in rows}

    async def save(self, hold: Callable[[], AsyncContextManager[Any]] = contextlib.nullcontext) -> None:
        """Make the file hold the working database: a checkpoint while the file is it;
        else replace the file's contents with the in-memory ones and checkpoint, in steps
        each entered under ``hold()`` (e.g. the index's lock: queries run between them)."""
        assert self.file_db is not None
        db = _q(self.file_db)
        ex = self.engine.execute
        if not self.in_memory:
            async with hold():
                await ex(f"CHECKPOINT {db}")
            return
        async with hold():
            old = await self._tables()
            if old:
                await self._in_transaction([f"DROP TABLE IF EXISTS {db}.main.{_q(t)}" for t in sorted(old)])
        if old:
            async with hold():
                await ex(f"CHECKPOINT {db}")  # their blocks are free for the copy
        file_db, last = self.file_db, "index_meta"  # the mark of a complete copy comes last
        for t in TABLES:
            if t == last:
                continue
            async with hold():
                parts = await self._parts(t)
                await self._in_transaction(
                    [table_statement(t, compress=self.compress, into=file_db), self._copy(t, parts[0])]
                )
            for where in parts[1:]:
                async with hold():
                    await self._in_transaction([self._copy(t, where)])
        # each ART index on its own: created in the transaction of its table, or in one that
        # follows a drop of its namesake, DuckDB 1.4 fails the commit ("Could not commit
        # creation of dependency")
        for ix in INDEXES:
            async with hold():
                await ex(index_statement(*ix, into=file_db))
        async with hold():
            await self._in_transaction(
                [table_statement(last, compress=self.compress, into=file_db), self._copy(last, "")]
            )
        async with hold():
            await ex(f"CHECKPOINT {db}")

    def _copy(self, table: str, where: str) -> str:
        assert self.file_db is not None
        return f"INSERT INTO {_q(self.file_db)}.main.{table} SELECT * FROM {WORK}.main.{table}{where}"

    async def _parts(self, table: str) -> list[str]:
        """The ``WHERE`` clauses that cut ``table``'s copy into transactions: postings by
        ranges of term ids of about ``COPY_PART`` rows, in order (the file keeps them
        sorted as they are); any other table whole."""
        if table != "postings":
            return [""]
        rows = await self.engine.execute(
            f"SELECT min(tid) AS b FROM (SELECT tid, sum(df) OVER (ORDER BY tid) AS c FROM {WORK}.main.terms) "
            f"GROUP BY c // {COPY_PART} ORDER BY b"
        )
        cuts = [int(r["b"]) for r in rows[1:] if r["b"] is not None]
        if not cuts:
            return [""]
        edges = [f" WHERE tid < {cuts[0]}"]
        edges += [f" WHERE tid >= {a} AND tid < {b}" for a, b in zip(cuts, cuts[1:])]
        return edges + [f" WHERE tid >= {cuts[-1]} OR tid IS NULL"]

    async def _in_transaction(self, statements: list[str]) -> None:
        ex = self.engine.execute
        await ex("BEGIN TRANSACTION")
        try:
            for sql in statements:
                await ex(sql)
        except BaseException:
            await ex("ROLLBACK")
            raise
        await ex("COMMIT")

    async def info(self) -> dict[str, Any]:
        """The file database's name and tables (for status displays and tests)."""
        return {"file_db": self.file_db, "in_memory": self.in_memory, "tables": sorted(await self._tables())}
