"""CPython specifics: the SQLite file outlives its connection, schema versions,
the public API surface, ids and the cache."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

import chatmem
from chatmem import errors
from chatmem.records.ids import IdGenerator
from chatmem.stores.caches import LRUCache
from chatmem.stores.sqlite import SQLiteStore
from conftest import run


async def test_sqlite_file_survives_reopening(tmp_path: Path) -> None:
    """Sessions and messages written to a SQLite file are all there after reopening it."""
    path = str(tmp_path / "chat.db")

    async def write() -> str:
        async with await chatmem.open(persist=path) as mem:
            s = await mem.sessions.create(title="persisted", tags=["x"])
            await mem.messages.append_many(
                s.session_id, [{"role": "user", "content": f"m{i}"} for i in range(50)]
            )
            await mem.sessions.update(s.session_id, pinned=True)
            return s.session_id

    async def read(sid: str) -> tuple[list[int], bool, str]:
        async with await chatmem.open(persist=path) as mem:
            msgs = await mem.messages.list(sid, limit=None)
            meta = await mem.sessions.get(sid)
            nxt = await mem.messages.append(sid, "assistant", "after reopen")
            return [m.seq for m in msgs] + [nxt.seq], meta.pinned, meta.title

    sid = await write()
    seqs, pinned, title = await read(sid)
    assert seqs == list(range(51)) and pinned and title == "persisted"


async def test_cancelled_call_finishes_before_the_connection_is_used_again(tmp_path: Path) -> None:
    """A call whose task is cancelled keeps running in its worker thread; the next call and
    ``close`` wait for it instead of touching the connection at the same time (which crashes
    sqlite3), and a call after ``close`` gets ``DatabaseClosed``."""
    order: list[str] = []
    started = threading.Event()

    def slow(db: sqlite3.Connection) -> None:
        started.set()
        time.sleep(0.3)
        db.execute("SELECT 1").fetchone()
        order.append("slow done")

    async def main() -> None:
        store = SQLiteStore(str(tmp_path / "c.db"))
        task = asyncio.ensure_future(store._run(slow))
        while not started.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await store.kv_set("k", 1)
        order.append("kv_set done")
        await store.close()
        order.append("closed")
        with pytest.raises(errors.DatabaseClosed):
            await store.kv_get("k")

    await main()
    assert order == ["slow done", "kv_set done", "closed"]


async def test_sqlite_context_store_persists(tmp_path: Path) -> None:
    """SQLiteContextStore(path) keeps AIR's data across instances and has close()."""
    path = str(tmp_path / "air.db")

    cs = chatmem.SQLiteContextStore(path)
    await cs.add_message("s", "user", "hi", provider="openai", model="gpt-4o")
    await cs.close()
    cs2 = chatmem.SQLiteContextStore(path)
    try:
        result = await cs2.get_messages("s")
    finally:
        await cs2.close()
    assert result == [chatmem.Message("user", "hi")]


async def test_in_memory_context_store_is_standalone() -> None:
    """InMemoryContextStore() works with no Memory and creates no file."""

    cs = chatmem.InMemoryContextStore()
    await cs.add_message("a", "user", "x")
    result = await cs.list_sessions()
    assert result == ["a"]


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    """A database written by a newer chatmem is refused with VersionConflict, untouched."""
    path = tmp_path / "future.db"
    con = sqlite3.connect(path)
    con.execute("PRAGMA user_version=99")
    con.close()
    with pytest.raises(errors.VersionConflict):
        await chatmem.open(persist=str(path))


async def test_strict_durability_and_bad_options(tmp_path: Path) -> None:
    """durability='strict' opens; unknown durability or name is a ValidationError."""

    async with await chatmem.open(persist=str(tmp_path / "s.db"), durability="strict") as mem:
        s = await mem.sessions.create()
        result = (await mem.messages.append(s.session_id, "user", "x")).seq
    assert result == 0
    with pytest.raises(errors.ValidationError):
        run(chatmem.open(durability="sometimes"))
    with pytest.raises(errors.ValidationError):
        run(chatmem.open(""))


async def test_indexeddb_needs_a_browser() -> None:
    """Asking for IndexedDB on CPython is a clear UnsupportedEnvironment error."""
    from chatmem.memory import open_indexeddb

    with pytest.raises(errors.UnsupportedEnvironment):
        await open_indexeddb("x")


def test_public_api_is_pinned() -> None:
    """Every name in chatmem.__all__ exists, and the contract names are there."""
    for name in chatmem.__all__:
        assert hasattr(chatmem, name), name
    for name in [
        "open",
        "Memory",
        "SessionMeta",
        "ChatMessage",
        "ContextStore",
        "InMemoryContextStore",
        "SQLiteContextStore",
        "IndexedDBContextStore",
        "Session",
        "errors",
    ]:
        assert name in chatmem.__all__


def test_error_tree() -> None:
    """One root; NotFound, ValidationError and StorageError families as documented."""
    assert issubclass(errors.SessionNotFound, errors.NotFound)
    assert issubclass(errors.MessageNotFound, errors.NotFound)
    for cls in (errors.NotFound, errors.ValidationError, errors.StorageError, errors.UnsupportedEnvironment):
        assert issubclass(cls, errors.ChatmemError)
    for cls in (
        errors.QuotaExceeded,
        errors.ConstraintViolation,
        errors.TransactionAborted,
        errors.VersionConflict,
        errors.UpgradeBlocked,
        errors.DatabaseClosed,
    ):
        assert issubclass(cls, errors.StorageError)
    assert issubclass(errors.DuplicateId, errors.ConstraintViolation)
    e = errors.translate_dom_error("QuotaExceededError", "no room")
    assert isinstance(e, errors.QuotaExceeded) and e.dom_name == "QuotaExceededError"
    assert type(errors.translate_dom_error("SomethingNew", "?")) is errors.StorageError


def test_ids_are_unique_and_sort_by_time() -> None:
    """ULIDs from one generator are unique and strictly increasing, even within a millisecond."""
    t = [5]
    gen = IdGenerator(lambda: t[0])
    ids = [gen() for _ in range(1000)]
    t[0] = 6
    later = gen()
    assert len(set(ids)) == 1000 and ids == sorted(ids) and later > ids[-1]
    assert all(len(i) == 26 for i in ids)


def test_lru_cache_bounds_and_ttl() -> None:
    """The cache evicts the least recently used beyond max_size and expires after ttl."""
    now = [0]
    c: LRUCache[str, int] = LRUCache(max_size=2, ttl=100, clock=lambda: now[0])
    c.set("a", 1)
    c.set("b", 2)
    assert c.get("a") == 1
    c.set("c", 3)
    assert c.get("b") is None and c.get("a") == 1 and c.get("c") == 3
    now[0] = 100
    assert c.get("a") is None and len(c) == 1
