"""The SQLite store's schema: one migration per version, never dropping data."""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA_VERSION"]

#: each entry migrates from version i to i+1; never drops data
MIGRATIONS: list[str] = [
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        record TEXT NOT NULL
    );
    CREATE INDEX sessions_updated ON sessions(updated_at);
    CREATE TABLE messages (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        role TEXT NOT NULL,
        record TEXT NOT NULL,
        UNIQUE (session_id, seq)
    );
    CREATE INDEX messages_created ON messages(created_at);
    CREATE TABLE outbox (
        key INTEGER PRIMARY KEY AUTOINCREMENT,
        op_id TEXT UNIQUE NOT NULL,
        record TEXT NOT NULL
    );
    CREATE TABLE dead_letter (op_id TEXT PRIMARY KEY, record TEXT NOT NULL);
    CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
    # the outbox fills only once sync was turned on (kv 'sync.outbox'): a file with a
    # sync config keeps its queue and is marked on; any other drops the queue it kept
    # for nothing (turning sync on uploads the history from the store)
    """
    INSERT INTO kv (key, value) SELECT 'sync.outbox', '{"at": 0, "sessions": []}'
        WHERE EXISTS (SELECT 1 FROM kv WHERE key = 'sync.config');
    DELETE FROM outbox WHERE NOT EXISTS (SELECT 1 FROM kv WHERE key = 'sync.outbox');
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)
