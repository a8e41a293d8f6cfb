"""A persistent (cached) query index: reopened, it catches up with the store instead of rebuilding.

On CPython the cache is a DuckDB file (``DuckDBEngine(path)``); in the browser
it is an OPFS file (tests/browser/test_search_browser.py). The store is SQLite,
reopened for every phase like a page reload.
"""

from __future__ import annotations

import asyncio

import pytest

from chatmem import Memory
from chatmem.errors import QuotaExceeded
from chatmem.index import DuckDBEngine
from chatmem.stores.sqlite import SQLiteStore
from conftest import sqlite_memory as _mem


def run(coro):
    return asyncio.run(coro)


class RefusesCommit(DuckDBEngine):
    """An engine whose file refuses every commit (the storage quota); memory takes them."""

    async def execute(self, sql, params=None, **kw):
        if sql == "COMMIT":
            rows = await super().execute("SELECT current_database() AS d")
            if rows[0]["d"] != "chatmem_work":
                raise QuotaExceeded("injected: the file cannot grow")
        return await super().execute(sql, params, **kw)


def _tamper(path: str, sql: str) -> None:
    import duckdb

    con = duckdb.connect(path)
    con.execute(sql)
    con.close()


async def _answers(mem: Memory) -> dict:
    out = {}
    for q in ["apple", "banana cherry", '"ripe banana"', "zebra"]:
        out[q] = [(h.message.id, h.score) for h in await mem.search(q, limit=10)]
    out["sql"] = await mem.sql(
        "SELECT session_id, title, message_count, pinned, tags FROM sessions ORDER BY session_id"
    )
    out["n"] = await mem.sql("SELECT count(*) AS n FROM messages")
    out["df"] = await mem.sql("SELECT term, df FROM terms ORDER BY term")
    out["stats"] = await mem.sql("SELECT n, total FROM stats")
    return out


async def test_reopened_cache_catches_up_only_changed_sessions(tmp_path):
    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    mem = _mem(db, idx)
    ids = {}
    for name in ["a", "b", "c", "d"]:
        s = await mem.sessions.create(title=name)
        ids[name] = s.session_id
        await mem.messages.append_many(
            s.session_id, [{"role": "user", "content": f"apple banana {name} {i}"} for i in range(5)]
        )
    assert len(await mem.search("apple", limit=50)) == 20
    assert mem.index.hydrations == 1 and mem.index.last_open["mode"] == "rebuilt"
    await mem.close()

    # writes while no index is open (another tab, or a page with no query yet)
    other = _mem(db, None)
    await other.messages.append(ids["a"], "user", "a ripe banana and a cherry")
    await other.sessions.delete(ids["b"])
    await other.sessions.update(ids["c"], title="renamed", pinned=True, tags=["x"])
    e = await other.sessions.create(title="e")
    await other.messages.append(e.session_id, "assistant", "zebra apple")
    await other.close()

    mem = _mem(db, idx)
    got = await _answers(mem)
    assert mem.index.hydrations == 0 and mem.index.catchups == 1
    assert mem.index.last_open == {
        "mode": "cached",
        "persistent": True,
        "sessions": 4,
        "refreshed": 3,
        "dropped": 1,
    }
    assert [h.message.session_id for h in await mem.search("zebra")] == [e.session_id]
    assert got["zebra"] and got['"ripe banana"']
    # a live write after the catch-up is seen at once, and the cache keeps it
    await mem.messages.append(ids["d"], "user", "apple apple apple")
    got = await _answers(mem)
    await mem.close()

    # the same answers as an index derived from scratch
    fresh = _mem(db, None)
    assert await _answers(fresh) == got
    await fresh.close()

    # unchanged store: nothing re-read; rebuild_index re-derives the cached file
    mem = _mem(db, idx)
    assert await _answers(mem) == got
    assert mem.index.last_open["refreshed"] == 0 and mem.index.last_open["dropped"] == 0
    await mem.rebuild_index()
    assert mem.index.hydrations == 1 and await _answers(mem) == got
    await mem.close()


async def test_catch_up_adds_only_new_messages_and_reloads_any_other_change(tmp_path):
    """A session only appended to gets just its new messages; one with a message deleted,
    cleared and refilled, or replaced by an import with the same ids but another text is
    dropped and loaded whole. Either way the answers are those of a fresh derivation.
    (The comparison reads the rows' scalars and term counts, not the text: see catchup.py.)"""
    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    mem = _mem(db, idx)
    ids = {}
    for name in ["appended", "deleted", "cleared", "replaced", "same"]:
        s = await mem.sessions.create(title=name)
        ids[name] = s.session_id
        await mem.messages.append_many(
            s.session_id, [{"role": "user", "content": f"apple banana {name} {i}"} for i in range(4)]
        )
    assert len(await mem.search("apple", limit=50)) == 20
    backup = await mem.export([ids["replaced"]])
    await mem.close()

    other = _mem(db, None)
    await other.messages.append(ids["appended"], "assistant", "a ripe banana and a cherry")
    await other.messages.append(ids["appended"], "user", "zebra")
    victim = (await other.messages.list(ids["deleted"]))[1]
    await other.sessions.delete_messages(ids["deleted"], [victim.id])
    await other.sessions.clear(ids["cleared"])
    await other.messages.append(ids["cleared"], "user", "cherry after the clear")
    backup["sessions"][0]["meta"]["title"] = "restored"
    for m in backup["sessions"][0]["messages"]:  # the same ids, another text (of more words)
        m["content"] = m["content"].replace("apple", "zebra and zebra")
    await other.import_sessions(backup, preserve_ids=True)
    await other.close()

    mem = _mem(db, idx)
    got = await _answers(mem)
    assert mem.index.hydrations == 0 and mem.index.catchups == 1
    assert mem.index.last_open["refreshed"] == 4
    assert mem.index.query_index.last_resync == {"whole": 3, "appended": 1, "loaded": 2 + 3 + 1 + 4}
    assert len(await mem.search("apple", limit=50)) == 4 + 3 + 0 + 0 + 4
    assert {h.message.session_id for h in await mem.search("zebra", limit=50)} == {
        ids["appended"],
        ids["replaced"],
    }
    assert victim.id not in {h.message.id for h in await mem.search("apple", limit=50)}
    await mem.close()

    fresh = _mem(db, None)
    assert await _answers(fresh) == got
    await fresh.close()
    # reopened: the file kept the catch-up (its size: test_index_size.py)
    mem = _mem(db, idx)
    assert await _answers(mem) == got and mem.index.last_open["refreshed"] == 0
    await mem.close()


async def test_cache_of_another_schema_or_unfinished_is_rebuilt(tmp_path):
    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    mem = _mem(db, idx)
    s = await mem.sessions.create(title="t")
    await mem.messages.append(s.session_id, "user", "apple")
    assert len(await mem.search("apple")) == 1
    await mem.close()
    _tamper(idx, "UPDATE index_meta SET value = 'old' WHERE key = 'schema'")
    mem = _mem(db, idx)
    assert len(await mem.search("apple")) == 1
    assert mem.index.hydrations == 1 and mem.index.catchups == 0
    assert mem.index.notice and "older version" in mem.index.notice
    await mem.close()
    _tamper(idx, "DELETE FROM index_meta WHERE key = 'complete'")
    mem = _mem(db, idx)
    assert len(await mem.search("apple")) == 1 and mem.index.hydrations == 1
    assert mem.index.notice and "unfinished" in mem.index.notice  # e.g. a page closed mid-derivation
    await mem.close()
    _tamper(idx, "DROP TABLE postings")
    mem = _mem(db, idx)
    assert len(await mem.search("apple")) == 1 and mem.index.hydrations == 1
    await mem.close()
    mem = _mem(db, idx)
    assert len(await mem.search("apple")) == 1 and mem.index.catchups == 1
    await mem.close()


async def test_many_changed_sessions_rebuild_instead(tmp_path):
    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    mem = _mem(db, idx)
    await mem.sql("SELECT 1 AS x")
    await mem.close()
    other = _mem(db, None)
    for i in range(60):
        s = await other.sessions.create(title=f"s{i}")
        await other.messages.append(s.session_id, "user", f"apple {i}")
    await other.close()
    mem = _mem(db, idx)
    assert len(await mem.search("apple", limit=100)) == 60
    assert mem.index.hydrations == 1 and mem.index.last_open["mode"] == "rebuilt"
    await mem.close()


def _history(n_sessions: int = 5):
    async def fill(mem: Memory) -> None:
        for k in range(n_sessions):
            s = await mem.sessions.create(title=f"s{k}")
            await mem.messages.append_many(
                s.session_id,
                [{"role": "user", "content": f"apple banana {k} {i} ripe banana cherry"} for i in range(8)],
            )
        await mem.messages.append(s.session_id, "assistant", "zebra apple")

    return fill


async def _saved_history(db: str, idx: str) -> None:
    """The store ``db`` with ``_history()``, and its index saved in the file ``idx``."""
    mem = _mem(db, idx)
    await _history()(mem)
    await mem.search("apple")
    await mem.close()


async def test_a_cache_that_cannot_be_loaded_or_saved_loses_nothing(tmp_path):
    """A cached file that cannot be read is rebuilt from the store, and a save that fails
    (the storage quota) leaves the index in memory; each time a notice says so and the
    answers equal those of an index derived from scratch."""

    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    class Failing(DuckDBEngine):
        fail_on: tuple[str, ...] = ()

        async def execute(self, sql, params=None, **kw):
            for f in self.fail_on:
                if f in sql:
                    raise QuotaExceeded(f"injected failure of: {f}")
            return await super().execute(sql, params, **kw)

    def mem_failing(*fail_on: str) -> Memory:
        async def engine():
            e = Failing(idx)
            e.fail_on = fail_on
            return e

        return Memory(SQLiteStore(db), engine_factory=engine)

    await _saved_history(db, idx)
    fresh = _mem(db, None)
    want = await _answers(fresh)
    await fresh.close()

    # the cached file cannot be read: rebuilt from the store, said so
    mem = mem_failing("index_meta WHERE key IN", "FROM chatmem_work.main")
    assert await _answers(mem) == want
    assert mem.index.hydrations == 1 and "could not be read" in (mem.index.notice or "")
    # ... and its save fails too (the copy back to the file): kept in memory, said so
    assert await mem.index.save() is True
    assert "kept in memory" in mem.index.notice and mem.index.last_open["persistent"] is False
    await mem.messages.append((await mem.sessions.list())[0].session_id, "user", "apple late")
    assert len(await mem.search("late")) == 1, "writes still reach the in-memory index"
    assert await mem.index.save() is False
    await mem.close()

    # only the save fails (quota): answers unchanged, notice, nothing lost
    mem = mem_failing("CHECKPOINT")
    got = await _answers(mem)
    await mem.rebuild_index()
    await mem.index.save()  # the save the rebuild scheduled, now rather than after its delay
    fresh = _mem(db, None)
    assert await _answers(mem) == got == await _answers(fresh)
    await mem.index.save()  # the save after the rebuild, now rather than in the background
    assert "cannot be saved" in (mem.index.notice or "")
    await fresh.close()
    await mem.close()


async def test_a_valid_cache_answers_from_the_file_then_moves_into_memory(tmp_path):
    """The first query after a reopening is answered from the file itself (no copy into
    memory first); the copy follows in the background, and answers stay the same."""
    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    mem = _mem(db, idx)
    await _history()(mem)
    want = await _answers(mem)
    await mem.close()

    mem = _mem(db, idx)
    mem.index.move_delay = 3600  # the copy waits until this test makes it below
    assert await _answers(mem) == want
    assert mem.index.last_open["mode"] == "cached" and not mem.index._cache.in_memory
    assert mem.index._moving is not None and not mem.index._moving.done()
    mem.index.move_delay = 0
    await mem.index._move_later()  # what the scheduled copy does when its delay is over
    assert mem.index._cache.in_memory
    assert await _answers(mem) == want
    # a write after the move is kept by the next save
    await mem.messages.append((await mem.sessions.list())[0].session_id, "user", "apple quince")
    await mem.close()
    mem = _mem(db, idx)
    assert len(await mem.search("quince")) == 1 and mem.index.hydrations == 0
    await mem.close()


async def test_a_write_the_file_refuses_moves_the_index_into_memory(tmp_path):
    """While the index is the file, a write it refuses (the quota) is applied in memory
    instead: the message is found, nothing is lost or hidden."""
    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    await _saved_history(db, idx)

    async def engine():
        return RefusesCommit(idx)

    mem = Memory(SQLiteStore(db), engine_factory=engine)
    mem.index.move_delay = 3600  # stays on the file until the write
    assert await mem.search("apple")
    assert not mem.index._cache.in_memory
    sid = (await mem.sessions.list())[0].session_id
    await mem.messages.append(sid, "user", "a quince on the file")
    assert [h.message.text for h in await mem.search("quince")] == ["a quince on the file"]
    assert mem.index._cache.in_memory
    fresh = _mem(db, None)
    assert await _answers(mem) == await _answers(fresh)
    await fresh.close()
    await mem.close()


async def test_a_catch_up_the_file_refuses_is_made_in_memory(tmp_path):
    """A reopening's catch-up is written into the file; when the file refuses it (the
    quota), it is made in an in-memory copy instead: no rebuild, nothing hidden."""
    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    await _saved_history(db, idx)
    other = _mem(db, None)
    sid = (await other.sessions.list())[0].session_id
    await other.messages.append(sid, "user", "a quince written while no index was open")
    await other.close()

    async def engine():
        return RefusesCommit(idx)

    mem = Memory(SQLiteStore(db), engine_factory=engine)
    mem.index.move_delay = 3600
    assert [h.message.session_id for h in await mem.search("quince")] == [sid]
    assert mem.index.hydrations == 0 and mem.index.last_open["refreshed"] == 1
    assert mem.index._cache.in_memory and "catchup: copy into memory" in mem.index.open_ms
    assert mem.index.notice is None
    fresh = _mem(db, None)
    assert await _answers(mem) == await _answers(fresh)
    await fresh.close()
    await mem.close()


async def test_a_bulk_of_queued_appends_is_caught_up_in_one_pass(tmp_path):
    """Appends of more than BULK_EVENTS messages queued before a query (an import) are
    not applied one transaction each: the store is compared in one pass; the answers
    equal those of a fresh index."""
    from chatmem.index.live import BULK_EVENTS

    db = str(tmp_path / "store.db")

    mem = _mem(db, None)
    await _history()(mem)
    assert await mem.search("apple")
    per = BULK_EVENTS // 8 + 1
    for k in range(8):
        s = await mem.sessions.create(title=f"bulk {k}")
        await mem.messages.append_many(
            s.session_id, [{"role": "user", "content": f"melon {k} {i}"} for i in range(per)]
        )
    assert mem.index._pending, "queued, not applied yet"
    got = await _answers(mem)
    assert mem.index.last_open["mode"] == "cached" and mem.index.last_open["refreshed"] == 8
    assert len(await mem.search("melon", limit=1000)) == 1000
    fresh = _mem(db, None)
    assert got == await _answers(fresh)
    assert (await mem.sql("SELECT count(*) AS n FROM messages")) == (
        await fresh.sql("SELECT count(*) AS n FROM messages")
    )
    await fresh.close()
    await mem.close()


async def test_a_write_while_the_opening_reads_the_sessions_is_not_lost(tmp_path):
    """An opening reads the store's sessions beside the engine's opening, before the
    index queues writes: a message acknowledged in that window (here, while the engine
    takes its time) is re-read from the store before the first answer."""
    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    mem = _mem(db, idx)
    s = await mem.sessions.create(title="a")
    await mem.messages.append(s.session_id, "user", "apple banana")
    t = await mem.sessions.create(title="t")
    assert len(await mem.search("apple")) == 1
    await mem.index.save()
    await mem.close()

    engine_wanted, go_on = asyncio.Event(), asyncio.Event()

    async def slow_engine():
        engine_wanted.set()
        await go_on.wait()
        return DuckDBEngine(idx)

    read = asyncio.Event()

    class Store(SQLiteStore):
        async def all_sessions(self):
            try:
                return await super().all_sessions()
            finally:
                read.set()

    mem = Memory(Store(db), engine_factory=slow_engine)
    first = asyncio.ensure_future(mem.search("zebra"))
    await engine_wanted.wait()
    await read.wait()  # the sessions read beside the opening is answered
    await mem.messages.append(s.session_id, "user", "zebra apple")
    await mem.messages.append(t.session_id, "assistant", "a zebra too")
    go_on.set()
    hits = await first
    assert mem.index.last_open["mode"] == "cached"
    fresh = _mem(db, None)
    want = [(h.message.id, h.score) for h in await fresh.search("zebra")]
    assert [(h.message.id, h.score) for h in hits] == want and len(want) == 2
    assert await _answers(mem) == await _answers(fresh)
    await fresh.close()
    await mem.close()


async def test_an_opening_whose_sessions_read_fails_closes_its_engine(tmp_path):
    """The store's sessions are read beside the engine's opening: when that read fails,
    the search raises its error, the engine opened for nothing is closed (in the page,
    its worker would otherwise keep the OPFS file), and the next search opens again."""
    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")
    engines: list[DuckDBEngine] = []
    closed: list[DuckDBEngine] = []

    class Engine(DuckDBEngine):
        async def close(self):
            closed.append(self)
            await super().close()

    async def factory():
        engines.append(Engine(idx))
        return engines[-1]

    class Store(SQLiteStore):
        fail = True

        async def all_sessions(self):
            if Store.fail:
                Store.fail = False
                raise OSError("the store is unreachable")
            return await super().all_sessions()

    seed = _mem(db, None)
    s = await seed.sessions.create(title="a")
    await seed.messages.append(s.session_id, "user", "apple banana")
    await seed.close()
    mem = Memory(Store(db), engine_factory=factory)
    with pytest.raises(OSError, match="unreachable"):
        await mem.search("apple")
    assert len(engines) == 1 and closed == engines
    assert mem.index.query_index is None
    hits = await mem.search("apple")
    assert [h.message.content for h in hits] == ["apple banana"]
    assert len(engines) == 2 and engines[1] not in closed
    await mem.close()
    assert closed == engines


async def test_background_saves_wait_after_a_costly_one_but_not_at_the_end_or_on_close(tmp_path):
    """A save copies the whole index (seconds at 100,000 messages): after one that took
    ``s`` seconds the next background save waits ``s * (1 - SAVE_SHARE) / SAVE_SHARE``.
    The end of a background embedding saves after ``save_delay`` only, and ``close``
    saves at once instead of waiting: the reopened file holds every write."""
    import time

    from chatmem.embedding import HashingEmbedder
    from chatmem.index.live import SAVE_SHARE

    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    async def saved(live) -> None:
        for _ in range(3000):  # the condition itself, not a sleep: at most 30 s
            if not live._dirty and (live._saving is None or live._saving.done()):
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the background save did not happen")

    def costly(live) -> None:
        live._save_cost, live._saved_at = 50.0, time.monotonic()

    mem = _mem(db, idx)
    mem.index.save_delay = 0.01
    s = await mem.sessions.create(title="t")
    await mem.messages.append_many(
        s.session_id, [{"role": "user", "content": f"apple {i}"} for i in range(5)]
    )
    assert len(await mem.search("apple", limit=10)) == 5
    await saved(mem.index)  # the rebuilt index, saved once

    costly(mem.index)
    mem.index.changed_in_background()
    await asyncio.sleep(0)
    assert mem.index._save_waiting and mem.index._save_wait() > 50 * (1 - SAVE_SHARE) / SAVE_SHARE - 5
    before = mem.index._saved_at
    assert await mem.index.embed_in_background(HashingEmbedder(16)) == 5
    await saved(mem.index)  # the end of the embedding: saved soon, not 450 s later
    assert mem.index._saved_at > before

    await mem.messages.append(s.session_id, "user", "apple zebra")
    assert len(await mem.search("zebra")) == 1
    costly(mem.index)
    mem.index.changed_in_background()
    await asyncio.wait_for(mem.close(), 30)  # saves now instead of waiting

    mem = _mem(db, idx)
    assert [h.message.content for h in await mem.search("zebra")] == ["apple zebra"]
    assert mem.index.last_open["mode"] == "cached" and mem.index.last_open["refreshed"] == 0
    rows = await mem.sql("SELECT count(*) AS n FROM embeddings")
    await mem.close()
    result = rows
    assert result[0]["n"] == 5


async def test_a_save_runs_in_steps_that_let_queries_and_vector_writes_through(tmp_path, monkeypatch):
    """A save of the in-memory index copies it to the file in short steps (the postings
    in parts of ``COPY_PART`` rows), each under the index's lock: a search during the
    save is answered between two steps, a vector write then makes the index dirty and
    it is saved again, and the file holds the working index's rows in its order."""
    import contextlib

    from chatmem.embedding import HashingEmbedder
    from chatmem.index import cache as cache_module

    monkeypatch.setattr(cache_module, "COPY_PART", 12)
    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    await _saved_history(db, idx)

    mem = _mem(db, idx)
    live = mem.index
    live.move_delay, live.save_delay = 0, 0
    assert await mem.search("apple")
    await live._moving  # answered from the file, then copied into memory
    assert live._cache.in_memory
    sid = (await mem.sessions.list())[0].session_id
    await mem.messages.append(sid, "user", "apple quince")
    assert len(await mem.search("quince")) == 1

    steps: list[str] = []
    paused, go_on = asyncio.Event(), asyncio.Event()
    save = live._cache.save

    async def stepped(hold):
        @contextlib.asynccontextmanager
        async def logged():
            if len(steps) == 3:  # between two steps: the lock is free
                paused.set()
                await go_on.wait()
            async with hold():
                steps.append("step")
                yield

        await save(hold=logged)

    live._cache.save = stepped
    live._schedule_save(soon=True)
    first = live._saving
    await asyncio.wait_for(paused.wait(), 30)
    assert live._copying
    hits = await asyncio.wait_for(mem.search("quince"), 30)
    assert [h.message.content for h in hits] == ["apple quince"]
    n = await asyncio.wait_for(live.query_index.embed_missing(HashingEmbedder(16)), 30)
    assert n == 42
    live.changed_in_background()
    assert not first.done() and live._dirty
    go_on.set()
    await asyncio.wait_for(first, 30)
    assert live._saving is not first  # written to during the copy: saved again
    await asyncio.wait_for(live._saving, 30)
    assert not live._dirty
    postings = await mem.sql("SELECT tid, doc, tf FROM postings ORDER BY tid, doc")
    parts = await live._cache._parts("postings")
    assert len(parts) >= 5 and len(steps) >= 3 + len(parts)
    await mem.close()

    mem = _mem(db, idx)
    mem.index.move_delay = 3600  # answered from the file as saved
    assert await mem.sql("SELECT tid, doc, tf FROM postings") == postings
    assert await mem.sql("SELECT model, count(*) AS n FROM embeddings GROUP BY model") == [
        {"model": HashingEmbedder(16).model, "n": 42}
    ]
    got = await _answers(mem)
    assert not mem.index._cache.in_memory and mem.index.last_open["refreshed"] == 0
    fresh = _mem(db, None)
    assert got == await _answers(fresh)
    await fresh.close()
    await mem.close()
