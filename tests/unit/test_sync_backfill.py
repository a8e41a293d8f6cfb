"""Turning sync on for a store with history: nothing was queued before, the history is
uploaded from the store (stable op ids, exactly once at the server) before the outbox,
against the real reference server on 127.0.0.1 with injected faults."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_sync_engine import KEY, FakeTime, cfg

import chatmem
from chatmem.runtime import CPythonRuntime
from chatmem.server import running_server
from chatmem.stores.sqlite import SQLiteStore
from chatmem.sync.backfill import BACKFILL_KEY, backfill_op_id
from conftest import run
from sync_checks import PushRecorder, local_snapshot, server_snapshot


@pytest.fixture
def srv() -> Any:
    with running_server(api_keys=[KEY]) as s:
        yield s


async def _history(mem: chatmem.Memory, sessions: int = 4, messages: int = 60) -> list[str]:
    ids = []
    for s in range(sessions):
        meta = await mem.sessions.create(title=f"old {s}")
        await mem.messages.append_many(
            meta.session_id, [{"role": "user", "content": f"s{s} m{i}"} for i in range(messages)]
        )
        ids.append(meta.session_id)
    return ids


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_history_then_changes_arrive_exactly_once(srv: Any, backend: str, tmp_path: Path) -> None:
    """History written before sync, then changes after turning it on (appends to an old
    session, a delete of an old message and of an old session, a title edit), pushed
    through lost answers: the server holds exactly the device's data, every op id once."""
    rec = PushRecorder(srv)

    t = FakeTime()
    mem = await chatmem.open(
        persist=str(tmp_path / "a.db") if backend == "sqlite" else None,
        runtime=CPythonRuntime(clock=t.clock, sleep=t.sleep, rand=lambda: 0.0),
    )
    ids = await _history(mem)
    queued_before = await mem.store.outbox_counts()
    await mem.sync.configure(cfg(srv.url, batch_size=25))
    pending_at_start = (await mem.sync.status()).pending
    await mem.messages.append_many(ids[0], [{"role": "assistant", "content": f"new {i}"} for i in range(5)])
    first = (await mem.messages.list(ids[1], limit=1))[0]
    await mem.sessions.delete_messages(ids[1], [first.id])
    await mem.sessions.delete(ids[2])
    await mem.sessions.update(ids[3], title="renamed after sync on")
    srv.faults.fail(2, after=True)  # applied, answer lost: re-sent with the same op ids
    report = await mem.sync.push()
    st = await mem.sync.status()
    other = await chatmem.open()
    await other.sync.configure(cfg(srv.url))
    await other.sync.pull()
    out = (
        queued_before,
        pending_at_start,
        report,
        st,
        await local_snapshot(mem),
        await local_snapshot(other),
        first.id,
        ids,
    )
    await mem.close()
    await other.close()
    queued_before, pending_at_start, report, st, mine, theirs, gone_id, ids = out
    assert queued_before == (0, 0), "nothing queued while sync was never on"
    assert pending_at_start == 4 * 61, "the status counts the history still to upload"
    assert report.state == "idle" and st.pending == 0 and st.dead_letters == 0
    assert server_snapshot(srv, KEY) == mine == theirs
    assert len(mine["messages"]) == 4 * 60 + 5 - 1 - 60 and gone_id not in mine["messages"]
    assert mine["sessions"][ids[3]]["title"] == "renamed after sync on"
    applied_ids = [
        op for batch, res in zip(rec.batches, rec.results) for op, _ in batch if res[op] == "applied"
    ]
    assert len(applied_ids) == len(set(applied_ids)), "each op id applied once"
    assert len(rec.op_ids) > len(set(rec.op_ids)), "the lost answers made re-sends"
    # the history went first, with ids derived from the records
    assert rec.batches[0][0][0] == backfill_op_id("session", sorted(ids)[0])


async def test_a_crash_mid_history_resumes_with_the_same_op_ids(srv: Any, tmp_path: Path) -> None:
    """A push that stops in the middle of the history (offline-like error, then the
    process ends) resumes from the saved position after reopening the file; the server
    applies every record once."""
    path = str(tmp_path / "crash.db")

    async def first_part() -> tuple[Any, Any]:
        t = FakeTime()
        mem = await chatmem.open(
            persist=path, runtime=CPythonRuntime(clock=t.clock, sleep=t.sleep, rand=lambda: 0.0)
        )
        await _history(mem, sessions=3, messages=40)
        await mem.sync.configure(cfg(srv.url, batch_size=30, max_retries=0))
        await mem.sync.push()  # the whole history: 3 x 41 ops in 6 requests
        return await mem.store.kv_get(BACKFILL_KEY), mem

    # let two requests through, then refuse: the push stops inside session 2
    orig = srv.service.push
    calls = [0]

    def push(space: str, payload: Any) -> Any:
        calls[0] += 1
        if calls[0] > 3:
            raise ConnectionError("cut")
        return orig(space, payload)

    srv.service.push = push
    progress, mem = await first_part()
    await mem.close()
    srv.service.push = orig
    t = FakeTime()
    again = await chatmem.open(persist=path, clock=t.clock)
    again.sync.sleep = t.sleep
    report = await again.sync.push()
    done = await again.store.kv_get(BACKFILL_KEY)
    snap = await local_snapshot(again)
    await again.close()
    assert progress is not None and 0 < progress["pos"] < 3 and not progress["done"], progress
    assert report.state == "idle" and done["done"]
    assert server_snapshot(srv, KEY) == snap and len(snap["messages"]) == 120
    assert srv.storage.applied_op_count(srv.space(KEY)) == 3 * 41


async def test_a_file_from_before_keeps_its_queue_only_if_it_had_a_sync_config(tmp_path: Path) -> None:
    """Opening a version-1 SQLite file: with a sync config its queued ops stay and the
    outbox stays on; without one the queue it kept for nothing is dropped."""

    def v1(path: Path, config: bool) -> None:
        async def make() -> None:
            store = SQLiteStore(str(path))
            await store.close()

        run(make())
        db = sqlite3.connect(path)
        db.execute("PRAGMA user_version=1")
        db.execute("DELETE FROM kv")
        db.execute("INSERT INTO outbox (op_id, record) VALUES ('o1', '{\"op_id\": \"o1\"}')")
        if config:
            db.execute("INSERT INTO kv (key, value) VALUES ('sync.config', '{}')")
        db.commit()
        db.close()

    async def reopen(path: Path) -> tuple[Any, Any]:
        store = SQLiteStore(str(path))
        out = await store.outbox_counts(), await store.kv_get("sync.outbox")
        await store.close()
        return out

    for config in (True, False):
        path = tmp_path / f"v1-{config}.db"
        v1(path, config)
        counts, flag = await reopen(path)
        assert counts == ((1, 0) if config else (0, 0))
        assert (flag == {"at": 0, "sessions": []}) if config else flag is None
