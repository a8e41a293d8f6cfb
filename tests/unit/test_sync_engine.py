"""mem.sync on CPython against the real reference server on 127.0.0.1 (with
injected faults): delivery rules, dead letters, offline, auth, crashes,
random faults, pull/merge between devices. Backoff sleeps go through an
injected fake clock, so nothing here waits for a retry."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import chatmem
from chatmem.errors import TransportError, ValidationError
from chatmem.runtime import CPythonRuntime, UrllibTransport
from chatmem.server import running_server
from chatmem.server.faults import Fault
from chatmem.sync import SyncConfig, Synchronizer
from chatmem.sync.synchronizer import CONFIG_KEY, CURSOR_KEY
from sync_checks import (
    PushRecorder,
    check_apply_changes,
    drain,
    local_snapshot,
    server_snapshot,
    undelivered,
    workload,
)

KEY = "k-sync-Engine-42"


class FakeTime:
    """A clock that only moves when the engine sleeps (or the test says so)."""

    def __init__(self) -> None:
        # starts at the real time: the reference server refuses HLCs far ahead of its own clock
        self.now = int(time.time() * 1000)
        self.slept: list[float] = []

    def clock(self) -> int:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += int(seconds * 1000)
        await asyncio.sleep(0)

    def runtime(self) -> CPythonRuntime:
        """CPython with this fake time; backoff = half the ceiling (rand 0): 500, 1000, 2000 ms ..."""
        return CPythonRuntime(clock=self.clock, sleep=self.sleep, rand=lambda: 0.0)


def cfg(url: str, **kw: Any) -> SyncConfig:
    base: dict[str, Any] = {
        "enabled": True,
        "endpoint": url,
        "api_key": KEY,
        "timeout": 2_000,
        "backoff_base": 1_000,
        "backoff_max": 60_000,
    }
    base.update(kw)
    return SyncConfig(**base)


async def device(
    url: str, t: FakeTime | None = None, persist: str | None = None, **kw: Any
) -> chatmem.Memory:
    t = t or FakeTime()
    mem = await chatmem.open(persist=persist, runtime=t.runtime())
    await mem.sync.configure(cfg(url, **kw))
    return mem


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def srv() -> Any:
    with running_server(api_keys=[KEY, "other-key"]) as s:
        yield s


def applied(srv: Any) -> int:
    return srv.storage.applied_op_count(srv.space(KEY))


# --------------------------------------------------------------------------- retries


@pytest.mark.parametrize("after", [False, True], ids=["fail-before-apply", "lose-the-answer"])
async def test_three_500s_then_200_apply_once_with_the_same_op_ids(srv: Any, after: bool) -> None:
    """500 x3 then 200: every op applied exactly once, same op_id on every attempt,
    backoff 0.5 s / 1 s / 2 s (jitter pinned), attempts counted on the op."""
    rec = PushRecorder(srv)
    srv.faults.fail(3, after=after)

    t = FakeTime()
    mem = await device(srv.url, t)
    s = await mem.sessions.create(title="retry me")
    await mem.messages.append(s.session_id, "user", "hello")
    ids = [o["op_id"] for o in await mem.store.outbox_list()]
    report = await mem.sync.push()
    slept = t.slept
    assert report.acknowledged == 2 and report.remaining == 0 and report.dead_lettered == 0
    assert report.requests == 4 and report.state == "idle"
    assert slept == [0.5, 1.0, 2.0]
    assert applied(srv) == 2
    if after:  # the server applied the first attempt; the three repeats were duplicates
        assert [[i for i, _ in b] for b in rec.batches] == [ids] * 4
        assert [sorted({a for _, a in b}) for b in rec.batches] == [[0], [1], [2], [3]]
        assert [sorted(set(r.values())) for r in rec.results] == [["applied"]] + [["duplicate"]] * 3
    else:
        assert rec.batches == [[(i, 3) for i in ids]]
    assert server_snapshot(srv, KEY)["sessions"] != {}


async def test_four_500s_dead_letter_with_reason_then_replay_applies_once(srv: Any) -> None:
    """The 4th failed attempt (max_retries=3) dead-letters with reason and last response;
    replay puts them back and they are applied once; discard drops for good."""
    srv.faults.fail(4, status=503)

    mem = await device(srv.url)
    s = await mem.sessions.create(title="doomed")
    await mem.messages.append(s.session_id, "user", "x")
    first = await mem.sync.push()
    dead = await mem.sync.dead_letters()
    st = await mem.sync.status()
    assert await mem.sync.replay("all") == 2
    second = await mem.sync.push()
    after = await mem.sync.status()
    assert first.dead_lettered == 2 and first.remaining == 0
    assert len(dead) == 2 and all(d["attempts"] == 4 for d in dead)
    assert all("gave up after 4 failed attempts" in d["reason"] and "HTTP 503" in d["reason"] for d in dead)
    assert all(d["status"] == 503 and d["response"] for d in dead)
    assert st.dead_letters == 2 and st.pending == 0
    assert second.acknowledged == 2 and applied(srv) == 2
    assert after.dead_letters == 0 and after.pending == 0 and after.state == "idle"


async def test_rejected_op_goes_to_dead_letter_and_discard_removes_it(srv: Any) -> None:
    """A per-op rejection (update of a session the server never saw) is dead-lettered at once
    with the server's reason; other ops of the batch are acknowledged."""

    mem = await device(srv.url)
    await mem.sessions.create(title="fine")
    op = await mem._core.outbox.op("update", "session", "never-created", "never-created", {"title": "x"})
    await mem.store.outbox_put([op])
    report = await mem.sync.push()
    dead = await mem.sync.dead_letters()
    n = await mem.sync.discard(dead[0]["op_id"])
    st = await mem.sync.status()
    assert report.acknowledged == 1 and report.dead_lettered == 1
    assert dead[0]["id"] == "never-created" and "does not exist" in dead[0]["reason"]
    assert '"rejected"' in dead[0]["response"] and dead[0]["attempts"] == 0
    assert n == 1 and st.dead_letters == 0


async def test_retry_after_is_honoured(srv: Any) -> None:
    """429 with Retry-After: 7 waits 7 s (not the 0.5 s backoff)."""
    srv.faults.rate_limit(1, retry_after=7)

    t = FakeTime()
    mem = await device(srv.url, t)
    await mem.sessions.create(title="slow down")
    await mem.sync.push()
    result = t.slept
    assert result == [7.0]
    assert applied(srv) == 1


async def test_a_failing_op_holds_back_its_session_only(srv: Any) -> None:
    """batch_size=1: the first op of session A fails; B's ops go through at once, A's second
    op is not sent before A's first; later everything arrives in per-session order."""
    rec = PushRecorder(srv)
    srv.faults.fail(1)

    mem = await device(srv.url, batch_size=1)
    a = await mem.sessions.create(title="A")
    await mem.messages.append(a.session_id, "user", "a1")
    b = await mem.sessions.create(title="B")
    await mem.messages.append(b.session_id, "user", "b1")
    order = [o["op_id"] for o in await mem.store.outbox_list()]
    first = await mem.sync.push(wait=False)
    left = await mem.store.outbox_list()
    second = await mem.sync.push()
    assert first.acknowledged == 2 and first.state == "error"
    assert [o["op_id"] for o in left] == order[:2]  # A's two ops wait
    assert left[0]["attempts"] == 1 and left[0]["next_attempt_at"] > 0 and "HTTP 500" in left[0]["last_error"]
    assert left[1]["attempts"] == 0  # never sent: held back behind A's first op
    assert second.acknowledged == 2 and second.remaining == 0
    assert rec.op_ids == [order[2], order[3], order[0], order[1]]


# --------------------------------------------------------------------------- offline, auth


async def test_offline_start_nothing_failed_then_auto_sync_drains_when_the_server_comes_up() -> None:
    """No server: state offline, attempts 0, nothing dead; auto-sync (1 s interval) drains
    the queue by itself once a server listens on the endpoint."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    with pytest.raises(ValidationError):  # push before configure: a clear error
        await _push_unconfigured()
    mem = await chatmem.open()
    s = await mem.sessions.create(title="offline first")
    await mem.messages.append_many(s.session_id, [{"role": "user", "content": f"m{i}"} for i in range(5)])
    await mem.sync.configure(cfg(url))
    report = await mem.sync.push()  # not auto yet: one explicit attempt
    await mem.sync.configure(cfg(url, auto_sync=True, sync_interval=1_000))
    await asyncio.sleep(0.3)
    ops = await mem.store.outbox_list()
    offline = await mem.sync.status()
    holder: dict[str, Any] = {}

    def serve() -> None:
        with running_server(api_keys=[KEY], port=port) as srv:
            holder["srv"] = srv
            holder["done"].wait(20)
            holder["applied"] = applied(srv)

    holder["done"] = threading.Event()
    th = threading.Thread(target=serve)
    th.start()
    t0 = time.monotonic()
    while (await mem.sync.status()).pending and time.monotonic() - t0 < 10:
        await asyncio.sleep(0.05)
    took = time.monotonic() - t0
    st = await mem.sync.status()
    holder["done"].set()
    th.join()
    await mem.close()
    (offline, st, n) = (offline, st, holder["applied"])
    assert report.state == "offline" and report.requests == 1 and report.remaining == 6
    assert offline.state == "offline" and offline.dead_letters == 0 and offline.pending == 6
    assert all(o["attempts"] == 0 and not o.get("next_attempt_at") for o in ops)
    assert st.pending == 0 and st.dead_letters == 0 and n == 6
    assert took < 5


async def _push_unconfigured() -> None:
    mem = await chatmem.open()
    await mem.sync.push()


async def test_401_pauses_sync_and_dead_letters_nothing(srv: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A refused key: paused-auth with a 'check your key' message, nothing dead-lettered or
    counted; nothing is sent until configure(); the key is never in status, repr or logs."""
    caplog.set_level(logging.DEBUG)
    bad = "wrong-Key-999"

    mem = await device(srv.url, api_key=bad)
    s = await mem.sessions.create(title="auth")
    await mem.messages.append(s.session_id, "user", "x")
    first = await mem.sync.push()
    seen = srv.faults.seen["/v1/push"]
    again = await mem.sync.run()
    sent_again = srv.faults.seen["/v1/push"] - seen
    st = await mem.sync.status()
    ops = await mem.store.outbox_list()
    await mem.sync.configure(cfg(srv.url))
    fixed = await mem.sync.push()
    text = repr(mem.sync) + repr(mem.sync.config) + repr(st) + repr(again)
    assert first.state == "paused-auth" and st.state == "paused-auth"
    assert "check your key" in (st.last_error or "")
    assert st.dead_letters == 0 and st.pending == 2 and all(o["attempts"] == 0 for o in ops)
    assert sent_again == 0
    assert fixed.acknowledged == 2 and applied(srv) == 2
    assert bad not in text and KEY not in text
    assert bad not in caplog.text and KEY not in caplog.text


async def test_config_is_validated_and_stored_without_leaking_the_key(tmp_path: Path) -> None:
    """http to a public host is refused (nothing stored); a good config survives reopening."""
    db = str(tmp_path / "c.db")

    mem = await chatmem.open(persist=db)
    with pytest.raises(ValidationError) as e:
        await mem.sync.configure({"enabled": True, "endpoint": "http://sync.example.com", "apiKey": KEY})
    nothing = await mem.store.kv_get(CONFIG_KEY)
    await mem.sync.configure({"enabled": True, "endpoint": "https://sync.example.com/", "apiKey": KEY})
    await mem.close()
    again = await chatmem.open(persist=db)
    await again.sync.status()
    loaded = again.sync.config
    await again.close()
    err = e.value
    assert err.field == "endpoint" and nothing is None
    assert loaded is not None and loaded.endpoint == "https://sync.example.com" and loaded.api_key == KEY
    assert KEY not in repr(loaded) and KEY not in str(loaded.to_public_dict())


# --------------------------------------------------------------------------- crash, faults


async def test_crash_mid_push_resends_the_same_op_ids_after_the_lease(srv: Any, tmp_path: Path) -> None:
    """A push cancelled in flight (the process 'dies') leaves its ops leased in the SQLite
    outbox; a new Memory on the file waits out the lease, then re-sends the same op_ids:
    each is applied exactly once."""
    rec = PushRecorder(srv)
    srv.faults.delay(1.0)
    db = str(tmp_path / "crash.db")
    t = FakeTime()

    a = await device(srv.url, t, persist=db)
    s = await a.sessions.create(title="in flight")
    await a.messages.append_many(s.session_id, [{"role": "user", "content": f"m{i}"} for i in range(3)])
    ids = [o["op_id"] for o in await a.store.outbox_list()]
    task = asyncio.ensure_future(a.sync.push())
    while srv.faults.seen["/v1/push"] == 0:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    b = await chatmem.open(persist=db, runtime=t.runtime())  # "after the restart"
    blocked = await b.sync.push(wait=False)  # leased by the dead process: not yet
    await asyncio.sleep(1.3)  # the held request completes on the server meanwhile
    t.now += 2_000 + 5_000  # the lease (timeout + margin) runs out
    done = await b.sync.push()
    left = [o["op_id"] for o in await b.store.outbox_list()]
    await b.close()
    assert blocked.requests == 0 and blocked.remaining == 4
    assert done.acknowledged == 4 and left == []
    assert [sorted(i for i, _ in b) for b in rec.batches] == [sorted(ids)] * 2
    assert applied(srv) == 4
    assert set(rec.results[1].values()) == {"duplicate"}


async def test_thousand_ops_with_20_percent_random_faults_arrive_exactly_once(srv: Any) -> None:
    """1,000+ ops, 20% of pushes fail (500, a 1.5 s hold past the 0.5 s timeout, a dropped
    connection; half of them after the server applied the push). max_retries=10, so no op is
    dead-lettered: the server ends up with exactly the client's data, each op applied once,
    and a second device pulling it holds the same."""
    srv.faults.random(0.2, seed=7, kinds=(Fault("status", 500), Fault("delay", seconds=1.5), Fault("drop")))

    mem = await device(srv.url, max_retries=10, batch_size=25, timeout=500)
    n = await workload(mem)
    t0 = time.monotonic()
    states = await drain(mem)
    took = time.monotonic() - t0
    st = await mem.sync.status()
    other = await device(srv.url)
    await other.sync.pull()
    mine = await local_snapshot(mem)
    theirs = await local_snapshot(other)
    pushes = len(states)
    srv.faults.clear()
    fired = [f for _, f in srv.faults.fired]
    assert n >= 1000
    assert len(fired) >= 5 and {"500", "drop", "delay:1.5"} <= {f.removeprefix("after:") for f in fired}
    assert st.pending == 0 and st.dead_letters == 0
    assert applied(srv) == n - undelivered()
    assert server_snapshot(srv, KEY) == mine
    assert theirs == mine
    assert len(mine["messages"]) == 10 * 90 - 90 - 90 + 10  # cleared, deleted, forked
    print(f"\n1,000-op drain: {n} ops, {len(fired)} faults, {pushes} push() calls, {took:.2f}s")


# --------------------------------------------------------------------------- pull / merge


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_apply_changes_rules(backend: str, tmp_path: Path) -> None:
    """The store's apply_changes merge rules (same check runs on IndexedDB in the browser)."""

    mem = await chatmem.open(persist=str(tmp_path / "a.db") if backend == "sqlite" else None)
    await check_apply_changes(mem)
    await mem.close()


async def test_two_devices_converge_to_the_later_title_and_a_delete_removes_it(srv: Any) -> None:
    """A edits the title, then B edits it later; B pushes first, A's older edit arrives after
    it: both end with B's title. A's delete then removes the session and its messages on B.
    Pulling enqueues nothing."""
    t = FakeTime()

    a = await device(srv.url, t)
    b = await device(srv.url, t)
    s = await a.sessions.create(title="shared")
    await a.messages.append_many(s.session_id, [{"role": "user", "content": f"m{i}"} for i in range(3)])
    await a.sync.run()
    await b.sync.run()
    got = (await b.sessions.get(s.session_id)).title, await b.messages.count(s.session_id)
    t.now += 10
    await a.sessions.update(s.session_id, title="from A (earlier)")
    t.now += 10
    await b.sessions.update(s.session_id, title="from B (later)")
    await b.sync.run()
    await a.sync.run()
    await b.sync.run()
    titles = [(await a.sessions.get(s.session_id)).title, (await b.sessions.get(s.session_id)).title]
    b_outbox = await b.store.outbox_counts()
    await a.sessions.delete(s.session_id)
    await a.sync.run()
    await b.sync.run()
    gone = [
        await b.sessions.exists(s.session_id),
        await b.store.count_messages(s.session_id),
        len(b.store._messages),
    ]
    b_after = await b.store.outbox_counts()
    assert got == ("shared", 3)
    assert titles == ["from B (later)", "from B (later)"]
    assert b_outbox == (0, 0) and b_after == (0, 0)
    assert gone == [False, 0, 0]


async def test_pull_keeps_a_newer_pending_local_edit(srv: Any) -> None:
    """A remote title older than a local unsent edit does not overwrite it; once pushed,
    the local edit wins everywhere."""
    t = FakeTime()

    a = await device(srv.url, t)
    b = await device(srv.url, t)
    s = await a.sessions.create(title="v0")
    await a.sync.run()
    await b.sync.run()
    t.now += 10
    await a.sessions.update(s.session_id, title="A, older")
    t.now += 10
    await b.sessions.update(s.session_id, title="B, newer, unsent")
    await a.sync.push()
    await b.sync.pull()
    kept = (await b.sessions.get(s.session_id)).title
    await b.sync.run()
    await a.sync.run()
    result = [kept, (await a.sessions.get(s.session_id)).title]
    assert result == ["B, newer, unsent", "B, newer, unsent"]


async def test_both_devices_appending_at_seq_1_end_in_one_order(srv: Any) -> None:
    """Both devices append at seq 1 while apart; after syncing each holds both messages in
    the same order, with the same seqs and a correct count."""

    a = await device(srv.url)
    b = await device(srv.url)
    s = await a.sessions.create(title="race")
    await a.messages.append(s.session_id, "user", "first")
    await a.sync.run()
    await b.sync.run()
    await a.messages.append(s.session_id, "user", "from A")
    await b.messages.append(s.session_id, "user", "from B")
    await a.sync.run()
    await b.sync.run()
    await a.sync.run()
    out = []
    for m in (a, b):
        msgs = await m.messages.list(s.session_id, limit=None)
        out.append(
            (
                [(x.seq, x.content) for x in msgs],
                (await m.sessions.get(s.session_id)).message_count,
            )
        )
    (order_a, count_a), (order_b, count_b) = out
    assert order_a == order_b and [seq for seq, _ in order_a] == [0, 1, 2]
    assert sorted(t for _, t in order_a) == ["first", "from A", "from B"] and order_a[0] == (0, "first")
    assert count_a == count_b == 3


async def test_pull_pages_and_saves_the_cursor(srv: Any, tmp_path: Path) -> None:
    """1,200 messages come in 3 pages (500 per page) on SQLite; the cursor is saved and a
    second pull fetches nothing new."""

    a = await device(srv.url)
    s = await a.sessions.create(title="big")
    await a.messages.append_many(s.session_id, [{"role": "user", "content": f"m{i}"} for i in range(1200)])
    await a.sync.push()
    b = await device(srv.url, persist=str(tmp_path / "b.db"))
    first = await b.sync.pull()
    cursor = await b.store.kv_get(CURSOR_KEY)
    second = await b.sync.pull()
    msgs = await b.messages.list(s.session_id, limit=None)
    await b.close()
    pages = first.pages
    changes = first.changes
    again = second.changes
    dense = [m.seq for m in msgs] == list(range(1200))
    assert pages == 3 and changes == 1201 and cursor == "1201" and again == 0 and dense


async def test_engine_injection_and_stop(srv: Any) -> None:
    """A Synchronizer built with its own transport works like mem.sync; stop() ends auto-sync."""

    mem = await chatmem.open()
    eng = Synchronizer(mem._core, transport=UrllibTransport())
    await eng.configure(cfg(srv.url, auto_sync=True, sync_interval=1_000))
    running = eng.running
    await mem.sessions.create(title="x")
    await eng.stop()
    r = await eng.run()
    await eng.close()
    result = [running, eng.running, r.pending]
    assert result == [True, False, 0]


async def test_start_after_reopening_resumes_auto_sync_from_the_stored_config(
    srv: Any, tmp_path: Path
) -> None:
    """Auto-sync configured once; after reopening, start() alone drains new changes."""
    db = str(tmp_path / "auto.db")

    a = await chatmem.open(persist=db)
    await a.sync.configure(cfg(srv.url, auto_sync=True, sync_interval=60_000))
    await a.close()
    b = await chatmem.open(persist=db)
    await b.sessions.create(title="after reopen")
    b.sync.start()
    t0 = time.monotonic()
    while (await b.store.outbox_counts())[0] and time.monotonic() - t0 < 5:
        await asyncio.sleep(0.02)
    out = [await b.store.outbox_counts(), b.sync.running]
    await b.close()
    result = [*out, b.sync.running]
    assert result == [(0, 0), True, False]
    assert applied(srv) == 1


# --------------------------------------------------------------------------- transport


async def test_incomplete_read_is_a_transport_error() -> None:
    """A body cut short (Content-Length larger than what arrives) is a TransportError."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]

    def serve() -> None:
        conn, _ = sock.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
        conn.close()

    th = threading.Thread(target=serve)
    th.start()
    with pytest.raises(TransportError) as e:
        await UrllibTransport().request("GET", f"http://127.0.0.1:{port}/", timeout=5)
    th.join()
    sock.close()
    assert "cut off" in str(e.value)
