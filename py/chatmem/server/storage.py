"""Where the reference server keeps its data: the ``SyncStorage`` interface
and its SQLite implementation (standard library ``sqlite3``).

The storage is deliberately dumb: it keeps, per *space* (one per api key),
the latest state of every record with the feed position (``seq``) of its
last change, and the set of applied ``op_id``s. The merge rules (LWW by HLC,
tombstones, immutability) live in ``service.py``, so another database only
has to implement these few methods. Methods are synchronous; the server
calls them from a worker thread.

Durability: a ``transaction()`` block commits when it exits normally (one
push = one transaction) and rolls everything back when it raises.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["StoredRecord", "SpaceTransaction", "SyncStorage", "SQLiteSyncStorage"]


@dataclass
class StoredRecord:
    resource: str
    id: str
    #: the merged record; None for a tombstone
    data: dict[str, Any] | None
    deleted: bool
    #: the latest HLC that changed this record (the tombstone's for a deleted one)
    hlc: str
    #: the HLC of the create that started this record's current life
    birth_hlc: str
    #: per field, the HLC of the write that set it (session records)
    field_hlc: dict[str, str] = field(default_factory=dict)
    #: a message's session (for the cascade of a session delete)
    session_id: str | None = None
    #: position in the change feed (assigned by ``put``)
    seq: int = 0


class SpaceTransaction(Protocol):
    """One open transaction over one space."""

    def op_seen(self, op_id: str) -> bool: ...

    def remember_op(self, op_id: str, device_id: str, now_ms: int) -> None: ...

    def get(self, resource: str, record_id: str) -> StoredRecord | None: ...

    def put(self, record: StoredRecord) -> int:
        """Insert or replace the record under a new, higher ``seq``; return that seq.

        Seqs of one space must become visible in order: a reader must never see
        seq N+1 committed while N is still uncommitted (else a pull could skip
        N). The SQLite implementation serializes a space's transactions; a
        concurrent database must do the same (e.g. lock the space's row).
        """
        ...

    def live_messages(self, session_id: str) -> list[StoredRecord]:
        """Messages of a session that are not tombstones."""
        ...

    def cursor(self) -> int:
        """The highest ``seq`` handed out in this space (0 if none)."""
        ...

    def meta_get(self, name: str) -> Any:
        """A space setting (JSON value) or None, e.g. the end-to-end key parameters."""
        ...

    def meta_put(self, name: str, value: Any) -> None:
        """Set (or, with None, remove) a space setting."""
        ...


class SyncStorage(Protocol):
    def transaction(self, space: str) -> Any:
        """A context manager yielding a ``SpaceTransaction``: commit on exit, rollback on error."""
        ...

    def changes(self, space: str, since: int, limit: int) -> list[StoredRecord]:
        """Records whose ``seq`` > ``since``, by ``seq``, at most ``limit``."""
        ...

    def cursor(self, space: str) -> int: ...

    def purge(self) -> None:
        """Make replaced and deleted data unrecoverable from the database files
        (called after a space's records were re-encrypted)."""
        ...

    def close(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS spaces (
    space TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    space TEXT NOT NULL,
    resource TEXT NOT NULL,
    id TEXT NOT NULL,
    data TEXT,
    deleted INTEGER NOT NULL,
    hlc TEXT NOT NULL,
    birth_hlc TEXT NOT NULL,
    field_hlc TEXT NOT NULL,
    session_id TEXT,
    seq INTEGER NOT NULL,
    PRIMARY KEY (space, resource, id)
);
CREATE UNIQUE INDEX IF NOT EXISTS records_feed ON records (space, seq);
CREATE INDEX IF NOT EXISTS records_session ON records (space, session_id);
CREATE TABLE IF NOT EXISTS space_meta (
    space TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (space, name)
);
CREATE TABLE IF NOT EXISTS applied_ops (
    space TEXT NOT NULL,
    op_id TEXT NOT NULL,
    device_id TEXT NOT NULL,
    applied_at INTEGER NOT NULL,
    PRIMARY KEY (space, op_id)
);
"""

_COLUMNS = "resource, id, data, deleted, hlc, birth_hlc, field_hlc, session_id, seq"


def _row(r: tuple[Any, ...]) -> StoredRecord:
    return StoredRecord(
        resource=r[0],
        id=r[1],
        data=json.loads(r[2]) if r[2] is not None else None,
        deleted=bool(r[3]),
        hlc=r[4],
        birth_hlc=r[5],
        field_hlc=json.loads(r[6]),
        session_id=r[7],
        seq=r[8],
    )


class _SQLiteTransaction:
    def __init__(self, conn: sqlite3.Connection, space: str):
        self.conn = conn
        self.space = space
        row = conn.execute("SELECT last_seq FROM spaces WHERE space = ?", (space,)).fetchone()
        self._seq = row[0] if row else 0
        if row is None:
            conn.execute("INSERT INTO spaces (space, last_seq) VALUES (?, 0)", (space,))

    def op_seen(self, op_id: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM applied_ops WHERE space = ? AND op_id = ?", (self.space, op_id)
        ).fetchone()
        return row is not None

    def remember_op(self, op_id: str, device_id: str, now_ms: int) -> None:
        self.conn.execute(
            "INSERT INTO applied_ops (space, op_id, device_id, applied_at) VALUES (?, ?, ?, ?)",
            (self.space, op_id, device_id, now_ms),
        )

    def get(self, resource: str, record_id: str) -> StoredRecord | None:
        row = self.conn.execute(
            f"SELECT {_COLUMNS} FROM records WHERE space = ? AND resource = ? AND id = ?",
            (self.space, resource, record_id),
        ).fetchone()
        return _row(row) if row else None

    def put(self, record: StoredRecord) -> int:
        self._seq += 1
        record.seq = self._seq
        self.conn.execute(
            f"INSERT OR REPLACE INTO records (space, {_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                self.space,
                record.resource,
                record.id,
                json.dumps(record.data, ensure_ascii=False) if record.data is not None else None,
                int(record.deleted),
                record.hlc,
                record.birth_hlc,
                json.dumps(record.field_hlc),
                record.session_id,
                record.seq,
            ),
        )
        self.conn.execute("UPDATE spaces SET last_seq = ? WHERE space = ?", (self._seq, self.space))
        return self._seq

    def live_messages(self, session_id: str) -> list[StoredRecord]:
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} FROM records WHERE space = ? AND session_id = ? "
            "AND resource = 'message' AND deleted = 0 ORDER BY seq",
            (self.space, session_id),
        ).fetchall()
        return [_row(r) for r in rows]

    def cursor(self) -> int:
        return self._seq

    def meta_get(self, name: str) -> Any:
        row = self.conn.execute(
            "SELECT value FROM space_meta WHERE space = ? AND name = ?", (self.space, name)
        ).fetchone()
        return json.loads(row[0]) if row else None

    def meta_put(self, name: str, value: Any) -> None:
        if value is None:
            self.conn.execute("DELETE FROM space_meta WHERE space = ? AND name = ?", (self.space, name))
            return
        self.conn.execute(
            "INSERT OR REPLACE INTO space_meta (space, name, value) VALUES (?, ?, ?)",
            (self.space, name, json.dumps(value)),
        )


class SQLiteSyncStorage:
    """``SyncStorage`` in one SQLite file (or ``":memory:"``), safe to share between threads."""

    def __init__(self, path: str = ":memory:"):
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        if path != ":memory:":
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        # replaced rows (plain copies after encryption was turned on) are zeroed, not left in free pages
        self._conn.execute("PRAGMA secure_delete=ON")
        self._conn.executescript(_SCHEMA)

    @contextmanager
    def transaction(self, space: str) -> Iterator[_SQLiteTransaction]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield _SQLiteTransaction(self._conn, space)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def changes(self, space: str, since: int, limit: int) -> list[StoredRecord]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_COLUMNS} FROM records WHERE space = ? AND seq > ? ORDER BY seq LIMIT ?",
                (space, since, limit),
            ).fetchall()
        return [_row(r) for r in rows]

    def cursor(self, space: str) -> int:
        with self._lock:
            row = self._conn.execute(
                "SELECT last_seq FROM spaces WHERE space = ?", (space,)
            ).fetchone()
        return row[0] if row else 0

    def applied_op_count(self, space: str) -> int:
        """How many operations were applied in a space (for tests and operators)."""
        with self._lock:
            row = self._conn.execute(
                "SELECT COUNT(*) FROM applied_ops WHERE space = ?", (space,)
            ).fetchone()
        return int(row[0])

    def purge(self) -> None:
        """Fold the WAL into the database and truncate it, so no replaced page survives in it."""
        with self._lock:
            if self.path != ":memory:":
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self._lock:
            self._conn.close()
