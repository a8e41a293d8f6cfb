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
contents are replaced by the in-memory ones in one transaction, then
checkpointed.

What is durable: the cache file as of the last committed write (on the file) or
the last ``save`` (in memory). Writes after that are lost with the page, and the
next opening catches up from the store (the store is the source of truth).
"""

from __future__ import annotations

from typing import Any

from .engine import SQLEngine
from .schema import SCHEMA_VERSION, TABLES

__all__ = ["IndexCache", "WORK"]

#: the in-memory database every index statement runs against
WORK = "chatmem_work"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class IndexCache:
    """The cache file behind ``engine`` (whose default database it is when created)."""

    def __init__(self, engine: SQLEngine):
        self.engine = engine
        self.file_db: str | None = None
        #: the working database is the in-memory copy (else the file itself)
        self.in_memory = False

    async def attach_work(self) -> None:
        """Note the file's database (the working one until ``to_memory``)."""
        rows = await self.engine.execute("SELECT current_database() AS d")
        self.file_db = str(rows[0]["d"])

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
            [self.file_db])
        return {r["table_name"] for r in rows}

    async def state(self) -> str:
        """``"valid"`` (a complete index of this schema version), ``"empty"`` (a new
        file) or ``"stale"`` (something else: an older schema, an unfinished save)."""
        tables = await self._tables()
        if not tables:
            return "empty"
        return "valid" if await self.valid() else "stale"

    async def valid(self) -> bool:
        """The file holds a complete index of this schema version."""
        assert self.file_db is not None
        if not set(TABLES) <= await self._tables():
            return False
        rows = await self.engine.execute(
            f"SELECT key, value FROM {_q(self.file_db)}.main.index_meta WHERE key IN ('schema', 'complete')")
        meta = {r["key"]: r["value"] for r in rows}
        return meta.get("schema") == SCHEMA_VERSION and meta.get("complete") == "1"

    async def save(self) -> None:
        """Make the file hold the working database: a checkpoint while the file is it;
        else replace the file's contents with the in-memory ones, atomically, and checkpoint."""
        assert self.file_db is not None
        db = _q(self.file_db)
        if not self.in_memory:
            await self.engine.execute(f"CHECKPOINT {db}")
            return
        old = await self._tables()
        ex = self.engine.execute
        await ex("BEGIN TRANSACTION")
        try:
            for t in sorted(old):
                await ex(f"DROP TABLE IF EXISTS {db}.main.{_q(t)}")
            await ex(f"COPY FROM DATABASE {WORK} TO {db}")
        except BaseException:
            await ex("ROLLBACK")
            raise
        await ex("COMMIT")
        await ex(f"CHECKPOINT {db}")

    async def info(self) -> dict[str, Any]:
        """The file database's name and tables (for status displays and tests)."""
        return {"file_db": self.file_db, "in_memory": self.in_memory, "tables": sorted(await self._tables())}
