"""``SyncStorage`` in one SQLite file (standard library ``sqlite3``): the embedded
default, for one server process. Writes are serialized by a lock and ``BEGIN
IMMEDIATE``; WAL mode for a file.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .sqlbase import Execute, SQLSyncStorage

__all__ = ["SQLiteSyncStorage"]


class SQLiteSyncStorage(SQLSyncStorage):
    """``SyncStorage`` in one SQLite file (or ``":memory:"``), safe to share between threads."""

    integrity_errors = (sqlite3.IntegrityError,)

    def __init__(self, path: str = ":memory:"):
        self.path = path
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        if path != ":memory:":
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA busy_timeout=10000")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        # replaced rows (plain copies after encryption was turned on) are zeroed, not left in free pages
        self._conn.execute("PRAGMA secure_delete=ON")
        self.migrate()

    def _execute(self, sql: str, params: Sequence[Any], many: bool = False) -> list[tuple[Any, ...]]:
        if many:
            self._conn.executemany(sql, params)
            return []
        return self._conn.execute(sql, tuple(params)).fetchall()

    @contextmanager
    def _session(self) -> Iterator[Execute]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._execute
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def purge(self) -> None:
        """Fold the WAL into the database and truncate it, so no replaced page survives in it."""
        with self._lock:
            if self.path != ":memory:":
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self._lock:
            self._conn.close()
