"""SQLite store (standard-library ``sqlite3``): one connection, guarded by an
``asyncio.Lock``, each call run in a worker thread so the event loop never
blocks on disk. Each write method is one ``BEGIN IMMEDIATE`` transaction.

Durability: ``relaxed`` (WAL, ``synchronous=NORMAL``: survives a process crash)
or ``strict`` (``synchronous=FULL``: survives a power cut too).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Mapping
from typing import Any, Callable, TypeVar

from ..errors import (
    ConstraintViolation,
    DatabaseClosed,
    DuplicateId,
    QuotaExceeded,
    SessionNotFound,
    StorageError,
    ValidationError,
    VersionConflict,
)
from .base import ORDER_KEY, OUTBOX_KEY, Ops, gate_ops, next_seq_after, snapshot_of
from .changes import apply_changes_to
from .sqlite_schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["SQLiteStore", "SCHEMA_VERSION"]

T = TypeVar("T")


def _translate(e: sqlite3.Error) -> StorageError:
    """The one place sqlite3 errors become chatmem errors."""
    msg = str(e)
    err: StorageError
    if isinstance(e, sqlite3.IntegrityError):
        err = DuplicateId(msg) if "UNIQUE" in msg or "PRIMARY KEY" in msg else ConstraintViolation(msg)
    elif "database or disk is full" in msg:
        err = QuotaExceeded(msg)
    elif isinstance(e, sqlite3.ProgrammingError) and "closed" in msg:
        err = DatabaseClosed(msg)
    else:
        err = StorageError(msg)
    err.dom_name = type(e).__name__
    return err


def _dumps(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


class SQLiteStore:
    kind = "sqlite"
    name = "chatmem"
    streams_batches = False

    def __init__(self, path: str, *, durability: str = "relaxed"):
        if durability not in ("relaxed", "strict"):
            raise ValidationError("durability must be 'relaxed' or 'strict'", field="durability")
        self.path = path
        self.durability = durability
        #: orders calls from the event loop (first come, first served)
        self._lock = asyncio.Lock()
        #: held by the worker thread while it uses the connection: a call whose awaiting task
        #: was cancelled keeps running in its thread, and the next call (or ``close``) must
        #: not touch the connection until it has finished (sqlite3 is not safe for that)
        self._guard = threading.Lock()
        self._closed = False
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._db.execute(
                "PRAGMA journal_mode=WAL" if path != ":memory:" else "PRAGMA journal_mode=MEMORY"
            )
            self._db.execute("PRAGMA synchronous=" + ("FULL" if durability == "strict" else "NORMAL"))
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
            self._data_version: int = int(self._db.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error as e:
            raise _translate(e) from e

    def _migrate(self) -> None:
        (version,) = self._db.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise VersionConflict(
                f"{self.path} has schema version {version}; this chatmem knows {SCHEMA_VERSION}"
            )
        for v in range(version, SCHEMA_VERSION):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for stmt in MIGRATIONS[v].split(";"):
                    if stmt.strip():
                        self._db.execute(stmt)
                self._db.execute(f"PRAGMA user_version={v + 1}")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    async def _run(self, fn: Callable[[sqlite3.Connection], T], write: bool = False) -> T:
        async with self._lock:
            return await asyncio.to_thread(self._call, fn, write)

    async def changed_elsewhere(self) -> bool:
        """True if another connection (another process, say) committed to the file since the
        last call (``PRAGMA data_version``); the caller then drops what it cached."""
        if self.path == ":memory:":
            return False

        def probe(db: sqlite3.Connection) -> int:
            return int(db.execute("PRAGMA data_version").fetchone()[0])

        version = await self._run(probe)
        changed = version != self._data_version
        self._data_version = version
        return changed

    def subscribe(self, fn: Callable[[str], None]) -> None:
        pass  # other processes' writes are found by ``changed_elsewhere``

    def _call(self, fn: Callable[[sqlite3.Connection], T], write: bool) -> T:
        with self._guard:
            if self._closed:
                raise DatabaseClosed("the store is closed")
            return self._call_locked(fn, write)

    def _call_locked(self, fn: Callable[[sqlite3.Connection], T], write: bool) -> T:
        db = self._db
        try:
            if not write:
                return fn(db)
            db.execute("BEGIN IMMEDIATE")
            try:
                result = fn(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result
        except sqlite3.Error as e:
            raise _translate(e) from e

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _put_session(db: sqlite3.Connection, rec: dict[str, Any], insert: bool) -> None:
        verb = "INSERT" if insert else "REPLACE"
        db.execute(
            f"{verb} INTO sessions (id, created_at, updated_at, record) VALUES (?, ?, ?, ?)",
            (rec["sessionId"], rec["createdAt"], rec["updatedAt"], _dumps(rec)),
        )

    @staticmethod
    def _put_messages(db: sqlite3.Connection, recs: list[dict[str, Any]]) -> None:
        db.executemany(
            "INSERT INTO messages (id, session_id, seq, created_at, role, record) VALUES (?,?,?,?,?,?)",
            [(r["id"], r["sessionId"], r["seq"], r["createdAt"], r["role"], _dumps(r)) for r in recs],
        )

    @staticmethod
    def _enqueue(db: sqlite3.Connection, ops: Ops, created: bool = True, gated: bool = True) -> None:
        if not ops:
            return
        if gated and db.execute("SELECT 1 FROM kv WHERE key = ?", (OUTBOX_KEY,)).fetchone() is None:
            return
        filled = gate_ops(ops, created)
        if filled:
            db.executemany(
                "INSERT INTO outbox (op_id, record) VALUES (?, ?)",
                [(op["op_id"], _dumps(op)) for op in filled],
            )

    @staticmethod
    def _order(db: sqlite3.Connection, session_id: str) -> list[tuple[str, int, str | None]]:
        """``(id, seq, hlc)`` of the session's messages, by ``seq``."""
        return [
            (r[0], int(r[1]), r[2])
            for r in db.execute(
                f"SELECT id, seq, json_extract(record, '$.{ORDER_KEY}') FROM messages "
                "WHERE session_id = ? ORDER BY seq",
                (session_id,),
            )
        ]

    @staticmethod
    def _set_seqs(db: sqlite3.Connection, seqs: Mapping[str, int]) -> None:
        """Move messages to new positions (a permutation of them together with the
        unmoved ones): first out of the way (negative, so ``UNIQUE(session_id, seq)``
        holds throughout), then to their places, in the column and the record."""
        db.executemany("UPDATE messages SET seq = ? WHERE id = ?", [(-1 - q, m) for m, q in seqs.items()])
        db.executemany(
            "UPDATE messages SET seq = ?, record = json_set(record, '$.seq', ?) WHERE id = ?",
            [(q, q, m) for m, q in seqs.items()],
        )

    @staticmethod
    def _drop_session(db: sqlite3.Connection, session_id: str) -> bool:
        db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
        return db.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount > 0

    @staticmethod
    def _session(db: sqlite3.Connection, session_id: str) -> dict[str, Any] | None:
        row = db.execute("SELECT record FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return json.loads(row[0]) if row else None

    # ------------------------------------------------------------------ sessions
    async def create_session(
        self, record: dict[str, Any], messages: list[dict[str, Any]], ops: Ops = None
    ) -> None:
        rec = dict(record, nextSeq=next_seq_after(messages), messageCount=len(messages))

        def tx(db: sqlite3.Connection) -> None:
            self._put_session(db, rec, insert=True)
            self._put_messages(db, messages)
            self._enqueue(db, ops)

        await self._run(tx, write=True)

    async def get_session(self, session_id: str) -> dict[str, Any] | None:
        return await self._run(lambda db: self._session(db, session_id))

    async def all_sessions(self) -> list[dict[str, Any]]:
        rows = await self._run(lambda db: db.execute("SELECT record FROM sessions").fetchall())
        return [json.loads(r[0]) for r in rows]

    async def update_session(
        self, session_id: str, changes: dict[str, Any], ops: Ops = None
    ) -> dict[str, Any]:
        def tx(db: sqlite3.Connection) -> dict[str, Any]:
            rec = self._session(db, session_id)
            if rec is None:
                raise SessionNotFound(session_id)
            rec.update(changes)
            self._put_session(db, rec, insert=False)
            self._enqueue(db, ops)
            return rec

        return await self._run(tx, write=True)

    async def delete_session(self, session_id: str, ops: Ops = None) -> bool:
        def tx(db: sqlite3.Connection) -> bool:
            if not self._drop_session(db, session_id):
                return False
            self._enqueue(db, ops)
            return True

        return await self._run(tx, write=True)

    async def clear_session(self, session_id: str, now: int, ops: Ops = None) -> dict[str, Any]:
        def tx(db: sqlite3.Connection) -> dict[str, Any]:
            rec = self._session(db, session_id)
            if rec is None:
                raise SessionNotFound(session_id)
            db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            rec.update(messageCount=0, nextSeq=0, updatedAt=now)
            self._put_session(db, rec, insert=False)
            self._enqueue(db, ops)
            return rec

        return await self._run(tx, write=True)

    # ------------------------------------------------------------------ messages
    async def append_messages(
        self,
        session_id: str,
        records: list[dict[str, Any]],
        now: int,
        create: dict[str, Any] | None = None,
        ops: Ops = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        ops = (
            ops() if callable(ops) else ops
        )  # here, not in the worker thread: ids and clocks are not thread-safe

        def tx(db: sqlite3.Connection) -> tuple[list[dict[str, Any]], dict[str, Any]]:
            sess = self._session(db, session_id)
            insert = sess is None
            if sess is None:
                if create is None:
                    raise SessionNotFound(session_id)
                sess = dict(create, nextSeq=0, messageCount=0)
            seq = sess.get("nextSeq", sess.get("messageCount", 0))
            out = []
            for r in records:
                out.append(dict(r, seq=seq, sessionId=session_id))
                seq += 1
            sess.update(nextSeq=seq, messageCount=sess.get("messageCount", 0) + len(out), updatedAt=now)
            self._put_session(db, sess, insert=insert)
            self._put_messages(db, out)
            self._enqueue(db, ops, created=insert)
            return out, sess

        return await self._run(tx, write=True)

    async def delete_messages(
        self, session_id: str, message_ids: list[str], ops: Ops = None
    ) -> dict[str, Any]:
        def tx(db: sqlite3.Connection) -> dict[str, Any]:
            sess = self._session(db, session_id)
            if sess is None:
                raise SessionNotFound(session_id)
            seqs = [
                int(r[0])
                for mid in dict.fromkeys(message_ids)
                for r in db.execute(
                    "SELECT seq FROM messages WHERE id = ? AND session_id = ?", (mid, session_id)
                )
            ]
            db.executemany(
                "DELETE FROM messages WHERE id = ? AND session_id = ?",
                [(mid, session_id) for mid in message_ids],
            )
            # the positions after the first one deleted close up: seq stays dense
            first = min(seqs, default=None)
            if first is not None:
                later = db.execute(
                    "SELECT id, seq FROM messages WHERE session_id = ? AND seq > ? ORDER BY seq",
                    (session_id, first),
                ).fetchall()
                self._set_seqs(db, {mid: first + i for i, (mid, seq) in enumerate(later) if seq != first + i})
            (count,) = db.execute(
                "SELECT count(*) FROM messages WHERE session_id = ?", (session_id,)
            ).fetchone()
            sess.update(messageCount=count, nextSeq=count)
            self._put_session(db, sess, insert=False)
            self._enqueue(db, ops)
            return sess

        return await self._run(tx, write=True)

    async def import_sessions(
        self, items: list[tuple[dict[str, Any], list[dict[str, Any]]]], replace: bool, ops: Ops = None
    ) -> None:
        ops = (
            ops() if callable(ops) else ops
        )  # here, not in the worker thread: ids and clocks are not thread-safe

        def tx(db: sqlite3.Connection) -> None:
            for rec, msgs in items:
                if replace:
                    self._drop_session(db, rec["sessionId"])
                sess = dict(rec, nextSeq=next_seq_after(msgs), messageCount=len(msgs))
                self._put_session(db, sess, insert=True)
                self._put_messages(db, msgs)
            self._enqueue(db, ops)

        await self._run(tx, write=True)

    async def get_message(self, message_id: str) -> dict[str, Any] | None:
        row = await self._run(
            lambda db: db.execute("SELECT record FROM messages WHERE id = ?", (message_id,)).fetchone()
        )
        return json.loads(row[0]) if row else None

    async def get_messages(self, message_ids: list[str]) -> list[dict[str, Any] | None]:
        def read(db: sqlite3.Connection) -> dict[str, str]:
            found: dict[str, str] = {}
            for i in range(0, len(message_ids), 500):
                chunk = message_ids[i : i + 500]
                marks = ",".join("?" * len(chunk))
                found.update(
                    db.execute(f"SELECT id, record FROM messages WHERE id IN ({marks})", chunk).fetchall()
                )
            return found

        found = await self._run(read)
        return [json.loads(found[mid]) if mid in found else None for mid in message_ids]

    async def list_messages(
        self, session_id: str, offset: int, limit: int | None, newest_first: bool
    ) -> list[dict[str, Any]]:
        order = "DESC" if newest_first else "ASC"
        rows = await self._run(
            lambda db: db.execute(
                f"SELECT record FROM messages WHERE session_id = ? ORDER BY seq {order} LIMIT ? OFFSET ?",
                (session_id, -1 if limit is None else limit, offset),
            ).fetchall()
        )
        return [json.loads(r[0]) for r in rows]

    async def list_sessions_messages(self, session_ids: list[str]) -> list[dict[str, Any]]:
        def read(db: sqlite3.Connection) -> list[str]:
            out: list[str] = []
            for sid in session_ids:
                out.extend(
                    r[0]
                    for r in db.execute(
                        "SELECT record FROM messages WHERE session_id = ? ORDER BY seq", (sid,)
                    )
                )
            return out

        return [json.loads(r) for r in await self._run(read)]

    async def message_ids(self, session_id: str) -> list[str]:
        rows = await self._run(
            lambda db: db.execute(
                "SELECT id FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
            ).fetchall()
        )
        return [r[0] for r in rows]

    async def count_messages(self, session_id: str) -> int:
        row = await self._run(
            lambda db: db.execute(
                "SELECT count(*) FROM messages WHERE session_id = ?", (session_id,)
            ).fetchone()
        )
        return int(row[0])

    # ------------------------------------------------------------------ facts
    @staticmethod
    def _put_facts(db: sqlite3.Connection, records: list[dict[str, Any]]) -> None:
        db.executemany(
            "INSERT OR REPLACE INTO facts (id, user_id, record) VALUES (?, ?, ?)",
            [(r["factId"], r["userId"], _dumps(r)) for r in records],
        )

    async def put_facts(self, records: list[dict[str, Any]], ops: Ops = None) -> None:
        def tx(db: sqlite3.Connection) -> None:
            self._put_facts(db, records)
            self._enqueue(db, ops)

        await self._run(tx, write=True)

    async def get_fact(self, fact_id: str) -> dict[str, Any] | None:
        row = await self._run(
            lambda db: db.execute("SELECT record FROM facts WHERE id = ?", (fact_id,)).fetchone()
        )
        return json.loads(row[0]) if row else None

    async def list_facts(self, user_id: str | None = None) -> list[dict[str, Any]]:
        def read(db: sqlite3.Connection) -> list[Any]:
            if user_id is None:
                return db.execute("SELECT record FROM facts").fetchall()
            return db.execute("SELECT record FROM facts WHERE user_id = ?", (user_id,)).fetchall()

        return [json.loads(r[0]) for r in await self._run(read)]

    async def delete_facts(self, fact_ids: list[str], ops: Ops = None) -> int:
        def tx(db: sqlite3.Connection) -> int:
            n = sum(
                db.execute("DELETE FROM facts WHERE id = ?", (fid,)).rowcount
                for fid in dict.fromkeys(fact_ids)
            )
            self._enqueue(db, ops)
            return n

        return await self._run(tx, write=True)

    # ------------------------------------------------------------------ pulled changes
    async def apply_changes(
        self, changes: list[dict[str, Any]], kv: dict[str, Any] | None = None
    ) -> list[str]:
        def tx(db: sqlite3.Connection) -> list[str]:
            touched = apply_changes_to(_SQLiteTarget(db), changes)
            for k, v in (kv or {}).items():
                db.execute("REPLACE INTO kv (key, value) VALUES (?, ?)", (k, _dumps(v)))
            return touched

        return await self._run(tx, write=True)

    # ------------------------------------------------------------------ kv
    async def kv_get(self, key: str) -> Any:
        row = await self._run(lambda db: db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone())
        return json.loads(row[0]) if row else None

    async def kv_set(self, key: str, value: Any) -> None:
        await self._run(
            lambda db: db.execute("REPLACE INTO kv (key, value) VALUES (?, ?)", (key, _dumps(value))),
            write=True,
        )

    # ------------------------------------------------------------------ outbox
    async def outbox_activate(self, now: int) -> dict[str, Any]:
        def tx(db: sqlite3.Connection) -> dict[str, Any]:
            row = db.execute("SELECT value FROM kv WHERE key = ?", (OUTBOX_KEY,)).fetchone()
            if row:
                return json.loads(row[0])  # type: ignore[no-any-return]
            snap = snapshot_of((json.loads(r[0]) for r in db.execute("SELECT record FROM sessions")), now)
            db.execute("INSERT INTO kv (key, value) VALUES (?, ?)", (OUTBOX_KEY, _dumps(snap)))
            return snap

        return await self._run(tx, write=True)

    async def outbox_put(self, ops: list[dict[str, Any]]) -> None:
        await self._run(lambda db: self._enqueue(db, ops, gated=False), write=True)

    async def outbox_list(self, limit: int | None = None) -> list[dict[str, Any]]:
        rows = await self._run(
            lambda db: db.execute(
                "SELECT record FROM outbox ORDER BY key LIMIT ?", (-1 if limit is None else limit,)
            ).fetchall()
        )
        return [json.loads(r[0]) for r in rows]

    async def outbox_update(self, ops: list[dict[str, Any]]) -> None:
        await self._run(
            lambda db: db.executemany(
                "UPDATE outbox SET record = ? WHERE op_id = ?", [(_dumps(op), op["op_id"]) for op in ops]
            ),
            write=True,
        )

    async def outbox_ack(self, op_ids: list[str]) -> None:
        await self._run(
            lambda db: db.executemany("DELETE FROM outbox WHERE op_id = ?", [(i,) for i in op_ids]),
            write=True,
        )

    async def outbox_to_dead(self, entries: list[dict[str, Any]]) -> None:
        def tx(db: sqlite3.Connection) -> None:
            db.executemany("DELETE FROM outbox WHERE op_id = ?", [(e["op_id"],) for e in entries])
            db.executemany(
                "REPLACE INTO dead_letter (op_id, record) VALUES (?, ?)",
                [(e["op_id"], _dumps(e)) for e in entries],
            )

        await self._run(tx, write=True)

    async def dead_list(self) -> list[dict[str, Any]]:
        rows = await self._run(
            lambda db: db.execute("SELECT record FROM dead_letter ORDER BY rowid").fetchall()
        )
        return [json.loads(r[0]) for r in rows]

    def _dead_ids(self, db: sqlite3.Connection, op_ids: list[str] | None) -> list[str]:
        rows = db.execute("SELECT op_id FROM dead_letter ORDER BY rowid").fetchall()
        have = [r[0] for r in rows]
        return have if op_ids is None else [i for i in have if i in set(op_ids)]

    async def dead_replay(self, op_ids: list[str] | None) -> int:
        def tx(db: sqlite3.Connection) -> int:
            ids = self._dead_ids(db, op_ids)
            for oid in ids:
                (raw,) = db.execute("SELECT record FROM dead_letter WHERE op_id = ?", (oid,)).fetchone()
                e = json.loads(raw)
                for k in ("reason", "response"):
                    e.pop(k, None)
                e.update(attempts=0, next_attempt_at=0, last_error=None)
                db.execute("DELETE FROM dead_letter WHERE op_id = ?", (oid,))
                db.execute("DELETE FROM outbox WHERE op_id = ?", (oid,))
                db.execute("INSERT INTO outbox (op_id, record) VALUES (?, ?)", (oid, _dumps(e)))
            return len(ids)

        return await self._run(tx, write=True)

    async def dead_discard(self, op_ids: list[str] | None) -> int:
        def tx(db: sqlite3.Connection) -> int:
            ids = self._dead_ids(db, op_ids)
            db.executemany("DELETE FROM dead_letter WHERE op_id = ?", [(i,) for i in ids])
            return len(ids)

        return await self._run(tx, write=True)

    async def outbox_counts(self) -> tuple[int, int]:
        def q(db: sqlite3.Connection) -> tuple[int, int]:
            (a,) = db.execute("SELECT count(*) FROM outbox").fetchone()
            (b,) = db.execute("SELECT count(*) FROM dead_letter").fetchone()
            return int(a), int(b)

        return await self._run(q)

    async def close(self) -> None:
        def shut() -> None:
            with self._guard:
                if not self._closed:
                    self._closed = True
                    self._db.close()

        async with self._lock:
            await asyncio.to_thread(shut)


class _SQLiteTarget:
    """``ChangeTarget`` over an open SQLite transaction."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        return SQLiteStore._session(self.db, session_id)

    def put_session(self, record: dict[str, Any]) -> None:
        SQLiteStore._put_session(self.db, record, insert=False)

    def drop_session(self, session_id: str) -> bool:
        return SQLiteStore._drop_session(self.db, session_id)

    def get_message(self, message_id: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT record FROM messages WHERE id = ?", (message_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def last_message(self, session_id: str) -> dict[str, Any] | None:
        row = self.db.execute(
            "SELECT record FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT 1", (session_id,)
        ).fetchone()
        return json.loads(row[0]) if row else None

    def session_order(self, session_id: str) -> list[tuple[str, int, str | None]]:
        return SQLiteStore._order(self.db, session_id)

    def set_seqs(self, session_id: str, seqs: Mapping[str, int]) -> None:
        SQLiteStore._set_seqs(self.db, seqs)

    def set_key(self, message_id: str, hlc: str) -> None:
        self.db.execute(
            f"UPDATE messages SET record = json_set(record, '$.{ORDER_KEY}', ?) WHERE id = ?",
            (hlc, message_id),
        )

    def put_message(self, record: dict[str, Any]) -> None:
        SQLiteStore._put_messages(self.db, [record])

    def drop_message(self, message_id: str) -> None:
        self.db.execute("DELETE FROM messages WHERE id = ?", (message_id,))

    def put_fact(self, record: dict[str, Any]) -> None:
        SQLiteStore._put_facts(self.db, [record])

    def drop_fact(self, fact_id: str) -> None:
        self.db.execute("DELETE FROM facts WHERE id = ?", (fact_id,))

    def pending_ops(self) -> list[dict[str, Any]]:
        return [json.loads(r[0]) for r in self.db.execute("SELECT record FROM outbox ORDER BY key")]
