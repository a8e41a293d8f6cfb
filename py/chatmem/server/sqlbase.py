"""What the SQLite and PostgreSQL storages share: the schema and its versioned
migrations, the space transaction, the change feed and the account/token tables.

A dialect only supplies ``_session(space_lock)`` — one database transaction
yielding an ``Execute`` function (SQL written with ``?`` placeholders) — and
how to lock a space's row. Migrations only ever add (tables, columns,
indexes); none drops or rewrites data. Each is applied once, in order, and
recorded in ``schema_migrations``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Any, Protocol

from ..errors import DuplicateId, shown
from .storage import Account, StoredRecord, TokenRecord

__all__ = ["Execute", "MIGRATIONS", "SQLSpaceTransaction", "SQLSyncStorage", "record_size"]


class Execute(Protocol):
    """Run one statement and return its rows (``[]`` without a result); with ``many``,
    run it once per parameter tuple of ``params`` (batched by the driver)."""

    def __call__(self, sql: str, params: Sequence[Any], many: bool = False) -> list[tuple[Any, ...]]: ...


#: (version, statements); BIGINT and TEXT mean the same in SQLite and PostgreSQL
MIGRATIONS: list[tuple[int, list[str]]] = [
    (
        1,
        [
            "CREATE TABLE IF NOT EXISTS spaces (space TEXT PRIMARY KEY, last_seq BIGINT NOT NULL)",
            """CREATE TABLE IF NOT EXISTS records (
            space TEXT NOT NULL, resource TEXT NOT NULL, id TEXT NOT NULL, data TEXT,
            deleted INTEGER NOT NULL, hlc TEXT NOT NULL, birth_hlc TEXT NOT NULL,
            field_hlc TEXT NOT NULL, session_id TEXT, seq BIGINT NOT NULL,
            PRIMARY KEY (space, resource, id))""",
            "CREATE UNIQUE INDEX IF NOT EXISTS records_feed ON records (space, seq)",
            "CREATE INDEX IF NOT EXISTS records_session ON records (space, session_id)",
            """CREATE TABLE IF NOT EXISTS applied_ops (
            space TEXT NOT NULL, op_id TEXT NOT NULL, device_id TEXT NOT NULL,
            applied_at BIGINT NOT NULL, PRIMARY KEY (space, op_id))""",
        ],
    ),
    (
        2,
        [
            "ALTER TABLE spaces ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE records ADD COLUMN size BIGINT NOT NULL DEFAULT 0",
            "UPDATE records SET size = COALESCE(LENGTH(data), 0)",
            "UPDATE spaces SET bytes = (SELECT COALESCE(SUM(r.size), 0) FROM records r "
            "WHERE r.space = spaces.space)",
            """CREATE TABLE accounts (
            id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, space TEXT NOT NULL UNIQUE,
            created_at BIGINT NOT NULL, ops_per_minute BIGINT, max_bytes BIGINT)""",
            """CREATE TABLE tokens (
            id TEXT PRIMARY KEY, account TEXT NOT NULL REFERENCES accounts (id),
            label TEXT NOT NULL, hash TEXT NOT NULL, created_at BIGINT NOT NULL,
            revoked_at BIGINT)""",
            "CREATE INDEX tokens_account ON tokens (account)",
            """CREATE TABLE usage (
            space TEXT NOT NULL, minute BIGINT NOT NULL, ops BIGINT NOT NULL,
            PRIMARY KEY (space, minute))""",
        ],
    ),
    (
        3,
        [
            """CREATE TABLE IF NOT EXISTS space_meta (
            space TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (space, name))""",
        ],
    ),
]

_COLUMNS = "resource, id, data, deleted, hlc, birth_hlc, field_hlc, session_id, seq"
_ACCOUNT = "id, name, space, created_at, ops_per_minute, max_bytes"
_TOKEN = "id, account, label, hash, created_at, revoked_at"


def record_size(data: str | None) -> int:
    """The bytes a record's data counts against its account's storage quota."""
    return len(data.encode("utf-8")) if data is not None else 0


def _row(r: Sequence[Any]) -> StoredRecord:
    return StoredRecord(
        resource=r[0],
        id=r[1],
        data=json.loads(r[2]) if r[2] is not None else None,
        deleted=bool(r[3]),
        hlc=r[4],
        birth_hlc=r[5],
        field_hlc=json.loads(r[6]),
        session_id=r[7],
        seq=int(r[8]),
    )


def _account(r: Sequence[Any]) -> Account:
    return Account(r[0], r[1], r[2], int(r[3]), r[4], r[5])


def _token(r: Sequence[Any]) -> TokenRecord:
    return TokenRecord(r[0], r[1], r[2], r[3], int(r[4]), r[5])


class SQLSpaceTransaction:
    """One space's transaction; the space row is locked by the caller's dialect.

    Round trips are what a push costs while it holds the space's lock, so reads of
    a push's records come from one ``prefetch`` query and writes are buffered and
    sent as two batches (``flush``, before any query that must see them and at commit).
    """

    def __init__(self, ex: Execute, space: str, last_seq: int, stored_bytes: int):
        self.ex = ex
        self.space = space
        self._seq = last_seq
        self._first_seq = last_seq
        self._bytes = stored_bytes
        #: records read (None: known absent) with their data size, by (resource, id)
        self._known: dict[tuple[str, str], tuple[StoredRecord | None, int]] = {}
        self._writes: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._ops: list[tuple[Any, ...]] = []

    def op_seen(self, op_id: str) -> bool:
        return bool(self.seen_ops([op_id]))

    def seen_ops(self, op_ids: list[str]) -> set[str]:
        found: set[str] = set(o[1] for o in self._ops if o[1] in op_ids)
        unique = list(dict.fromkeys(op_ids))
        for i in range(0, len(unique), 500):
            chunk = unique[i : i + 500]
            marks = ",".join("?" * len(chunk))
            rows = self.ex(
                f"SELECT op_id FROM applied_ops WHERE space = ? AND op_id IN ({marks})", (self.space, *chunk)
            )
            found.update(r[0] for r in rows)
        return found

    def remember_op(self, op_id: str, device_id: str, now_ms: int) -> None:
        self._ops.append((self.space, op_id, device_id, now_ms))

    def prefetch(self, keys: list[tuple[str, str]]) -> None:
        """Read these records (and note the absent ones) in one query."""
        todo = [k for k in dict.fromkeys(keys) if k not in self._known and k not in self._writes]
        for i in range(0, len(todo), 300):
            chunk = todo[i : i + 300]
            cond = " OR ".join(["(resource = ? AND id = ?)"] * len(chunk))
            flat = [x for k in chunk for x in k]
            rows = self.ex(
                f"SELECT {_COLUMNS}, size FROM records WHERE space = ? AND ({cond})", (self.space, *flat)
            )
            for k in chunk:
                self._known[k] = (None, 0)
            for r in rows:
                self._known[(r[0], r[1])] = (_row(r), int(r[9]))

    def get(self, resource: str, record_id: str) -> StoredRecord | None:
        key = (resource, record_id)
        if key not in self._known:
            self.prefetch([key])
        rec = self._known[key][0]
        if rec is None:
            return None
        # a copy: the caller may change it before (or without) putting it back
        return replace(
            rec, data=dict(rec.data) if rec.data is not None else None, field_hlc=dict(rec.field_hlc)
        )

    def put(self, record: StoredRecord) -> int:
        self._seq += 1
        record.seq = self._seq
        data = json.dumps(record.data, ensure_ascii=False) if record.data is not None else None
        size = record_size(data)
        key = (record.resource, record.id)
        if key not in self._known:
            self.prefetch([key])
        self._bytes += size - self._known[key][1]
        self._known[key] = (
            replace(
                record,
                data=dict(record.data) if record.data is not None else None,
                field_hlc=dict(record.field_hlc),
            ),
            size,
        )
        self._writes[key] = (
            self.space,
            record.resource,
            record.id,
            data,
            int(record.deleted),
            record.hlc,
            record.birth_hlc,
            json.dumps(record.field_hlc),
            record.session_id,
            record.seq,
            size,
        )
        return self._seq

    def flush(self) -> None:
        """Send the buffered writes (one batch per table)."""
        if self._writes:
            self.ex(
                f"INSERT INTO records (space, {_COLUMNS}, size) VALUES (?,?,?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT (space, resource, id) DO UPDATE SET data = excluded.data, "
                "deleted = excluded.deleted, hlc = excluded.hlc, birth_hlc = excluded.birth_hlc, "
                "field_hlc = excluded.field_hlc, session_id = excluded.session_id, seq = excluded.seq, "
                "size = excluded.size",
                list(self._writes.values()),
                many=True,
            )
            self._writes.clear()
        if self._ops:
            self.ex(
                "INSERT INTO applied_ops (space, op_id, device_id, applied_at) VALUES (?, ?, ?, ?)",
                self._ops,
                many=True,
            )
            self._ops = []

    def live_messages(self, session_id: str) -> list[StoredRecord]:
        self.flush()
        rows = self.ex(
            f"SELECT {_COLUMNS}, size FROM records WHERE space = ? AND session_id = ? "
            "AND resource = 'message' AND deleted = 0 ORDER BY seq",
            (self.space, session_id),
        )
        for r in rows:
            self._known[("message", r[1])] = (_row(r), int(r[9]))
        return [_row(r) for r in rows]

    def cursor(self) -> int:
        return self._seq

    @property
    def changed(self) -> bool:
        """True once this transaction handed out a new ``seq``."""
        return self._seq != self._first_seq

    def stored_bytes(self) -> int:
        return self._bytes

    def meta_get(self, name: str) -> Any:
        rows = self.ex("SELECT value FROM space_meta WHERE space = ? AND name = ?", (self.space, name))
        return json.loads(rows[0][0]) if rows else None

    def meta_put(self, name: str, value: Any) -> None:
        if value is None:
            self.ex("DELETE FROM space_meta WHERE space = ? AND name = ?", (self.space, name))
            return
        self.ex(
            "INSERT INTO space_meta (space, name, value) VALUES (?, ?, ?) "
            "ON CONFLICT (space, name) DO UPDATE SET value = excluded.value",
            (self.space, name, json.dumps(value)),
        )

    def count_ops(self, minute: int, n: int) -> int:
        """Add ``n`` to this space's operation count of ``minute``; return the count before."""
        self.ex("DELETE FROM usage WHERE space = ? AND minute < ?", (self.space, minute))
        rows = self.ex("SELECT ops FROM usage WHERE space = ? AND minute = ?", (self.space, minute))
        before = int(rows[0][0]) if rows else 0
        self.ex(
            "INSERT INTO usage (space, minute, ops) VALUES (?, ?, ?) "
            "ON CONFLICT (space, minute) DO UPDATE SET ops = excluded.ops",
            (self.space, minute, before + n),
        )
        return before


class SQLSyncStorage(ABC):
    """``SyncStorage`` over a SQL database; subclasses supply the connection handling."""

    #: appended to the SELECT of the space row (``" FOR UPDATE"`` where rows can be locked)
    space_lock = ""
    #: the driver's unique-constraint errors (translated to ``DuplicateId``)
    integrity_errors: tuple[type[Exception], ...] = ()

    @abstractmethod
    def _session(self) -> AbstractContextManager[Execute]:
        """One database transaction: commit on normal exit, rollback on error."""

    def _announce(self, ex: Execute, space: str, cursor: int) -> None:
        """Called inside a transaction that moved a space's cursor (before commit)."""
        return None

    def migrate(self) -> int:
        """Apply the migrations not yet applied; return the schema version."""
        with self._session() as ex:
            self._migration_lock(ex)
            ex(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, "
                "applied_at BIGINT NOT NULL)",
                (),
            )
            done = {int(r[0]) for r in ex("SELECT version FROM schema_migrations", ())}
            import time

            for version, statements in MIGRATIONS:
                if version in done:
                    continue
                for sql in statements:
                    ex(sql, ())
                ex(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    (version, int(time.time() * 1000)),
                )
            return max([v for v, _ in MIGRATIONS])

    def _migration_lock(self, ex: Execute) -> None:
        """Keep two processes from migrating at once (the dialect's way)."""
        return None

    def schema_version(self) -> int:
        with self._session() as ex:
            rows = ex("SELECT MAX(version) FROM schema_migrations", ())
        return int(rows[0][0] or 0)

    # ------------------------------------------------------------------ the feed
    @contextmanager
    def transaction(self, space: str) -> Iterator[SQLSpaceTransaction]:
        with self._session() as ex:
            ex(
                "INSERT INTO spaces (space, last_seq, bytes) VALUES (?, 0, 0) ON CONFLICT (space) DO NOTHING",
                (space,),
            )
            row = ex(f"SELECT last_seq, bytes FROM spaces WHERE space = ?{self.space_lock}", (space,))[0]
            txn = SQLSpaceTransaction(ex, space, int(row[0]), int(row[1]))
            yield txn
            txn.flush()
            if txn.changed:
                ex(
                    "UPDATE spaces SET last_seq = ?, bytes = ? WHERE space = ?",
                    (txn.cursor(), txn.stored_bytes(), space),
                )
                self._announce(ex, space, txn.cursor())

    def changes(self, space: str, since: int, limit: int) -> list[StoredRecord]:
        with self._session() as ex:
            rows = ex(
                f"SELECT {_COLUMNS} FROM records WHERE space = ? AND seq > ? ORDER BY seq LIMIT ?",
                (space, since, limit),
            )
        return [_row(r) for r in rows]

    def cursor(self, space: str) -> int:
        with self._session() as ex:
            rows = ex("SELECT last_seq FROM spaces WHERE space = ?", (space,))
        return int(rows[0][0]) if rows else 0

    def stored_bytes(self, space: str) -> int:
        with self._session() as ex:
            rows = ex("SELECT bytes FROM spaces WHERE space = ?", (space,))
        return int(rows[0][0]) if rows else 0

    def applied_op_count(self, space: str) -> int:
        """How many operations were applied in a space (for tests and operators)."""
        with self._session() as ex:
            rows = ex("SELECT COUNT(*) FROM applied_ops WHERE space = ?", (space,))
        return int(rows[0][0])

    def purge(self) -> None:
        """Make replaced data unrecoverable from the files (the dialect's way)."""
        return None

    def ping(self) -> None:
        """Raise if the database cannot answer a query."""
        with self._session() as ex:
            ex("SELECT 1", ())

    # ------------------------------------------------------------------ accounts
    def add_account(self, account: Account) -> None:
        """``DuplicateId`` if the name (or id) is taken."""
        try:
            with self._session() as ex:
                ex(
                    f"INSERT INTO accounts ({_ACCOUNT}) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        account.id,
                        account.name,
                        account.space,
                        account.created_at,
                        account.ops_per_minute,
                        account.max_bytes,
                    ),
                )
        except self.integrity_errors as e:
            raise DuplicateId(f"account {shown(account.name)} already exists") from e

    def set_account_quota(self, name: str, ops_per_minute: int | None, max_bytes: int | None) -> bool:
        with self._session() as ex:
            found = ex("SELECT id FROM accounts WHERE name = ?", (name,))
            if found:
                ex(
                    "UPDATE accounts SET ops_per_minute = ?, max_bytes = ? WHERE name = ?",
                    (ops_per_minute, max_bytes, name),
                )
        return bool(found)

    def account(self, name: str) -> Account | None:
        with self._session() as ex:
            rows = ex(f"SELECT {_ACCOUNT} FROM accounts WHERE name = ?", (name,))
        return _account(rows[0]) if rows else None

    def accounts(self) -> list[Account]:
        with self._session() as ex:
            rows = ex(f"SELECT {_ACCOUNT} FROM accounts ORDER BY name", ())
        return [_account(r) for r in rows]

    def add_token(self, token: TokenRecord) -> None:
        with self._session() as ex:
            ex(
                f"INSERT INTO tokens ({_TOKEN}) VALUES (?, ?, ?, ?, ?, ?)",
                (token.id, token.account, token.label, token.hash, token.created_at, token.revoked_at),
            )

    def token(self, token_id: str) -> tuple[TokenRecord, Account] | None:
        """A token's record and its account (revoked tokens too), or None."""
        cols = (
            ", ".join(f"t.{c}" for c in _TOKEN.split(", "))
            + ", "
            + ", ".join(f"a.{c}" for c in _ACCOUNT.split(", "))
        )
        with self._session() as ex:
            rows = ex(
                f"SELECT {cols} FROM tokens t JOIN accounts a ON a.id = t.account WHERE t.id = ?", (token_id,)
            )
        return (_token(rows[0][:6]), _account(rows[0][6:])) if rows else None

    def tokens(self, account_id: str) -> list[TokenRecord]:
        with self._session() as ex:
            rows = ex(f"SELECT {_TOKEN} FROM tokens WHERE account = ? ORDER BY created_at, id", (account_id,))
        return [_token(r) for r in rows]

    def revoke_token(self, token_id: str, now_ms: int) -> bool:
        """Mark a token revoked; False if there is no such token (revoking twice is fine)."""
        with self._session() as ex:
            found = ex("SELECT revoked_at FROM tokens WHERE id = ?", (token_id,))
            if found and found[0][0] is None:
                ex("UPDATE tokens SET revoked_at = ? WHERE id = ?", (now_ms, token_id))
        return bool(found)

    @abstractmethod
    def close(self) -> None: ...
