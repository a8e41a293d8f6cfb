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
    # one order (chatmem.stores.changes): every message gets an order key, an HLC of device
    # "0" that keeps the session's seq order (the running maximum of createdAt, counted
    # within one millisecond), and seq becomes the dense position; pulling again from the
    # start lets every message synced before take the server's key
    """
    WITH walls AS (
        SELECT id, session_id, seq,
            max(created_at) OVER (PARTITION BY session_id ORDER BY seq ROWS UNBOUNDED PRECEDING) AS wall
        FROM messages WHERE json_extract(record, '$.hlc') IS NULL
    ), keyed AS (
        SELECT id, wall, row_number() OVER (PARTITION BY session_id, wall ORDER BY seq) - 1 AS n FROM walls
    )
    UPDATE messages SET record = json_set(record, '$.hlc', printf('%013d-%04d-0',
        min(max(keyed.wall, 0) + keyed.n / 10000, 9999999999999), keyed.n % 10000))
    FROM keyed WHERE messages.id = keyed.id;
    CREATE TEMP TABLE dense (id TEXT PRIMARY KEY, pos INTEGER NOT NULL);
    INSERT INTO dense SELECT id, row_number() OVER (PARTITION BY session_id ORDER BY seq) - 1 FROM messages;
    UPDATE messages SET seq = -1 - seq;
    UPDATE messages SET seq = (SELECT pos FROM dense WHERE dense.id = messages.id);
    UPDATE messages SET record = json_set(record, '$.seq', seq);
    DROP TABLE dense;
    UPDATE sessions SET record = json_set(record,
        '$.nextSeq', (SELECT count(*) FROM messages WHERE session_id = sessions.id),
        '$.messageCount', (SELECT count(*) FROM messages WHERE session_id = sessions.id));
    DELETE FROM kv WHERE key = 'sync.cursor';
    """,
    # facts (chatmem.facts): one row per fact version (kept if a file marked older has it)
    """
    CREATE TABLE IF NOT EXISTS facts (id TEXT PRIMARY KEY, user_id TEXT NOT NULL, record TEXT NOT NULL);
    CREATE INDEX IF NOT EXISTS facts_user ON facts(user_id);
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)
