"""A cached copy of the query index in a database file, worked on in memory.

The engine's own database is the cache file (an OPFS file in the browser, a
DuckDB file on CPython). Queries against a file-backed database pay for its
block handling on every scan (about 6 ms per search in DuckDB-Wasm over
OPFS), so the index is never queried there: ``attach_work`` attaches an
in-memory database and makes it the default, ``load`` copies the cache into it
(about 1 s for 100,000 messages), and ``save`` copies it back in one
transaction, then checkpoints.

What is durable: the cache file as of the last ``save``. What is not: the
in-memory copy; writes after the last save are lost with the page, and the
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

    async def attach_work(self) -> None:
        """Attach the in-memory working database and make it the default."""
        rows = await self.engine.execute("SELECT current_database() AS d")
        self.file_db = str(rows[0]["d"])
        await self.engine.execute(f"ATTACH ':memory:' AS {WORK}")
        await self.engine.execute(f"USE {WORK}")

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

    async def load(self) -> None:
        """Copy the cached index (tables and ART indexes) into the working database."""
        assert self.file_db is not None
        await self.engine.execute(f"COPY FROM DATABASE {_q(self.file_db)} TO {WORK}")

    async def save(self) -> None:
        """Replace the file's contents with the working database, atomically, and checkpoint."""
        assert self.file_db is not None
        db = _q(self.file_db)
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
        return {"file_db": self.file_db, "tables": sorted(await self._tables())}
