"""mem.sync in real Chromium (fetch, IndexedDB, Web Locks, the online event)
against the reference server started by this test process on 127.0.0.1 (another
origin than the page: CORS)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chatmem.server import running_server
from chatmem.server.faults import Fault
from conftest import Page, run, unique_name
from sync_checks import PushRecorder, server_snapshot, undelivered

pytestmark = pytest.mark.browser

KEY = "browser-Key-7"
FAST = "backoff_base=20, backoff_max=200"


def load(page: Page) -> None:
    """Put sync_checks.py into the page's Python once."""
    if getattr(page, "_sync_loaded", False):
        return
    src = (Path(__file__).parents[1] / "sync_checks.py").read_text()
    page.py(
        "import sys, pathlib\n"
        "pathlib.Path('/home/pyodide/sync_checks.py').write_text(" + repr(src) + ")\n"
        "sys.path.insert(0, '/home/pyodide')\n"
        "import sync_checks\n"
        "len(sync_checks.__all__)"
    )
    page._sync_loaded = True  # type: ignore[attr-defined]


def py(page: Page, code: str) -> Any:
    load(page)
    return page.py("import sync_checks\n" + code)


def start(page: Page, code: str) -> None:
    load(page)
    page.page.evaluate(
        "code => { window.__syncJob = window.chatmem.runPython(code); }", "import sync_checks\n" + code
    )


def finish(page: Page) -> Any:
    return page.page.evaluate("window.__syncJob")


def wait_for(cond: Any, timeout: float = 10.0) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


@pytest.fixture
def srv() -> Iterator[Any]:
    with running_server(api_keys=[KEY]) as s:
        yield s


@pytest.fixture(scope="module")
def other_profile(browser: Any, site: str) -> Iterator[tuple[Any, Page]]:
    """A second browser profile (its own IndexedDB, locks and network state)."""
    ctx = browser.new_context()
    page = Page(ctx.new_page(), site).boot()
    yield ctx, page
    ctx.close()


def applied(srv: Any) -> int:
    return srv.storage.applied_op_count(srv.space(KEY))


def test_indexeddb_apply_changes_rules(page: Page) -> None:
    """bridge.js applyChanges follows the same merge rules as the Python stores."""
    db = unique_name("apply")
    assert (
        py(
            page,
            f"""
import chatmem, traceback
mem = await chatmem.open({db!r})
try:
    await sync_checks.check_apply_changes(mem)
    out = "ok"
except BaseException:
    out = traceback.format_exc()
out
""",
        )
        == "ok"
    )


def test_browser_retries_then_dead_letters_then_replays(page: Page, srv: Any) -> None:
    """In the page: 500 x3 (after applying) then 200 -> applied once with the same op_ids;
    500 x4 -> dead letters with reason; replay -> applied once."""
    db = unique_name("retry")
    rec = PushRecorder(srv)
    srv.faults.fail(3, after=True)
    ids, acked, requests = py(
        page,
        f"""
mem = await sync_checks.open_synced({db!r}, endpoint={srv.url!r}, api_key={KEY!r}, {FAST})
s = await mem.sessions.create(title="retry")
await mem.messages.append(s.session_id, "user", "hi")
ids = [o["op_id"] for o in await mem.store.outbox_list()]
r = await mem.sync.push()
[ids, r.acknowledged, r.requests]
""",
    )
    assert acked == 2 and requests == 4 and applied(srv) == 2
    assert [[i for i, _ in b] for b in rec.batches] == [ids] * 4
    assert [sorted({a for _, a in b}) for b in rec.batches] == [[0], [1], [2], [3]]

    srv.faults.fail(4)
    dead, status, replayed, after = py(
        page,
        f"""
mem = await sync_checks.open_synced({db!r})
await mem.messages.add("second", "user", "doomed")
r = await mem.sync.push()
dead = await mem.sync.dead_letters()
st = await mem.sync.status()
n = await mem.sync.replay("all")
await mem.sync.push()
[[[d["attempts"], d["reason"], d["status"]] for d in dead], [st.pending, st.dead_letters], n,
 [(await mem.sync.status()).pending, (await mem.sync.status()).dead_letters]]
""",
    )
    assert len(dead) == 2 and all(a == 4 and "gave up after 4" in r and s == 500 for a, r, s in dead)
    assert status == [0, 2] and replayed == 2 and after == [0, 0]
    assert applied(srv) == 4


def test_reload_during_a_push_applies_every_op_exactly_once(new_page: Any, srv: Any) -> None:
    """The page reloads while the server holds its push: after reopening (config from the
    store), the same op_ids are sent again and each is applied exactly once."""
    db = unique_name("reload")
    rec = PushRecorder(srv)
    srv.faults.delay(2.0)
    p = new_page()
    ids = py(
        p,
        f"""
mem = await sync_checks.open_synced({db!r}, endpoint={srv.url!r}, api_key={KEY!r}, {FAST})
s = await mem.sessions.create(title="reload me")
await mem.messages.append_many(s.session_id, [{{"role": "user", "content": f"m{{i}}"}} for i in range(20)])
[o["op_id"] for o in await mem.store.outbox_list()]
""",
    )
    start(p, f"mem = await sync_checks.open_synced({db!r})\n(await mem.sync.push()).acknowledged")
    wait_for(lambda: srv.faults.seen["/v1/push"] >= 1)
    leased = py(
        p,
        f"""
import chatmem
m2 = await chatmem.open({db!r})
[bool(o.get("lease_owner")) for o in await m2.store.outbox_list()]
""",
    )
    p.reload()
    p._sync_loaded = False  # a new interpreter
    out = py(
        p,
        f"""
import chatmem
mem = await chatmem.open({db!r})
r = await mem.sync.push()
[r.acknowledged, (await mem.sync.status()).pending, await sync_checks.local_snapshot(mem)]
""",
    )
    wait_for(lambda: len(rec.batches) >= 2 or applied(srv) == len(ids), timeout=10)
    time.sleep(2.2)  # let the held request finish on the server
    acked, pending, local = out
    assert leased == [True] * 21
    assert pending == 0 and acked == 21
    assert applied(srv) == 21
    assert all(sorted(i for i, _ in b) == sorted(ids) for b in rec.batches)
    assert server_snapshot(srv, KEY) == local


def test_browser_thousand_ops_with_random_faults(page: Page, srv: Any) -> None:
    """1,000+ ops from IndexedDB with 20% faults (500, a hold past the 0.5 s fetch timeout,
    dropped connections): max_retries=10; the server holds exactly the page's data."""
    db = unique_name("faults")
    srv.faults.random(0.2, seed=11, kinds=(Fault("status", 500), Fault("delay", seconds=1.5), Fault("drop")))
    t0 = time.monotonic()
    n, states, st, local = py(
        page,
        f"""
mem = await sync_checks.open_synced({db!r}, endpoint={srv.url!r}, api_key={KEY!r}, {FAST},
                                    max_retries=10, batch_size=25, timeout=500)
n = await sync_checks.workload(mem)
states = await sync_checks.drain(mem)
st = await mem.sync.status()
[n, states, [st.pending, st.dead_letters], await sync_checks.local_snapshot(mem)]
""",
    )
    took = time.monotonic() - t0
    srv.faults.clear()
    fired = [f.removeprefix("after:") for _, f in srv.faults.fired]
    assert n >= 1000 and st == [0, 0]
    assert {"500", "drop", "delay:1.5"} <= set(fired)
    assert applied(srv) == n - undelivered()
    assert server_snapshot(srv, KEY) == local
    print(f"\nbrowser 1,000-op drain: {n} ops, {len(fired)} faults, {len(states)} push() calls, {took:.1f}s")


def test_offline_then_the_online_event_drains_the_queue(other_profile: tuple[Any, Page], srv: Any) -> None:
    """Offline: auto-sync marks nothing failed; going online fires the `online` event and the
    queue drains (the interval is 10 minutes, so only the event explains it). Each step
    waits for the state it asserts, not for a time."""
    ctx, p = other_profile
    db = unique_name("offline")
    ctx.set_offline(True)
    try:
        before = py(
            p,
            f"""
import asyncio
mem = await sync_checks.open_synced({db!r})
s = await mem.sessions.create(title="offline")
await mem.messages.append(s.session_id, "user", "queued")
await mem.sync.configure(dict(enabled=True, endpoint={srv.url!r}, api_key={KEY!r},
                              auto_sync=True, sync_interval=600_000))
loop = asyncio.get_running_loop()
deadline = loop.time() + 60
while (st := await mem.sync.status()).state != "offline" and loop.time() < deadline:
    await asyncio.sleep(0.05)  # the first auto-sync run finds the network down
[st.state, st.pending, st.dead_letters, [o["attempts"] for o in await mem.store.outbox_list()]]
""",
        )
    finally:
        ctx.set_offline(False)
    # drained: nothing pending *and* the run over (pending reaches 0 while the state is still "syncing")
    deadline = time.monotonic() + 120  # far below the 10-minute interval: only the event can explain it
    while (st := py(p, f"st = await (sync_checks.MEMS[{db!r}]).sync.status()\n[st.state, st.pending]")) != [
        "idle",
        0,
    ] and time.monotonic() < deadline:
        time.sleep(0.1)
    py(p, f"await sync_checks.MEMS[{db!r}].sync.stop()")
    # written before sync was on: the history waits in the store (no outbox op), counted as pending
    assert before == ["offline", 2, 0, []]
    assert st == ["idle", 0]
    assert applied(srv) == 2


def test_two_profiles_converge_to_the_later_title_and_share_a_delete(
    page: Page, other_profile: tuple[Any, Page], srv: Any
) -> None:
    """Device A (this profile) and device B (another profile) edit one title: both end with
    the later edit; A's delete removes the session and its messages on B."""
    _, b = other_profile
    da, dbn = unique_name("devA"), unique_name("devB")
    conf = f"endpoint={srv.url!r}, api_key={KEY!r}, {FAST}"
    sid = py(
        page,
        f"""
mem = await sync_checks.open_synced({da!r}, {conf})
s = await mem.sessions.create(title="shared")
await mem.messages.append_many(s.session_id, [{{"role": "user", "content": f"m{{i}}"}} for i in range(3)])
await mem.sync.run()
s.session_id
""",
    )
    got = py(
        b,
        f"""
mem = await sync_checks.open_synced({dbn!r}, {conf})
await mem.sync.run()
[(await mem.sessions.get({sid!r})).title, await mem.messages.count({sid!r})]
""",
    )
    py(page, f"await (await sync_checks.open_synced({da!r})).sessions.update({sid!r}, title='A, earlier')")
    time.sleep(0.02)
    py(b, f"await (await sync_checks.open_synced({dbn!r})).sessions.update({sid!r}, title='B, later')")
    run = "(await sync_checks.open_synced({!r})).sync.run()"
    py(b, "await " + run.format(dbn))
    py(page, "await " + run.format(da))
    py(b, "await " + run.format(dbn))
    titles = [
        py(page, f"(await (await sync_checks.open_synced({da!r})).sessions.get({sid!r})).title"),
        py(b, f"(await (await sync_checks.open_synced({dbn!r})).sessions.get({sid!r})).title"),
    ]
    py(
        page,
        f"mem = await sync_checks.open_synced({da!r})\nawait mem.sessions.delete({sid!r})\nawait mem.sync.run()",
    )
    gone = py(
        b,
        f"""
mem = await sync_checks.open_synced({dbn!r})
await mem.sync.run()
[await mem.sessions.exists({sid!r}), await mem.store.count_messages({sid!r}), await mem.store.outbox_counts()]
""",
    )
    assert got == ["shared", 3]
    assert titles == ["B, later", "B, later"]
    assert gone == [False, 0, [0, 0]]


def test_three_tabs_send_each_op_once(page: Page, new_page: Any, srv: Any) -> None:
    """Three tabs on one database push at once: the Web Lock lets one drain (the others see
    its 'syncing' status from the store), and the server receives every op_id exactly once."""
    db = unique_name("tabs")
    rec = PushRecorder(srv)
    tabs = [page, new_page(), new_page()]
    conf = f"endpoint={srv.url!r}, api_key={KEY!r}, {FAST}"
    for t in tabs:
        py(t, f"await sync_checks.open_synced({db!r}, {conf})\nNone")
    n = py(
        page,
        f"""
mem = await sync_checks.open_synced({db!r})
for i in range(4):
    s = await mem.sessions.create(title=f"tab {{i}}")
    await mem.messages.append_many(s.session_id, [{{"role": "user", "content": f"m{{j}}"}} for j in range(9)])
(await mem.store.outbox_counts())[0]
""",
    )
    srv.faults.delay(1.5)
    push = f"r = await (await sync_checks.open_synced({db!r})).sync.push()\n[r.drained, r.acknowledged]"
    start(tabs[0], push)
    wait_for(lambda: srv.faults.seen["/v1/push"] >= 1)
    seen_elsewhere = py(tabs[1], f"st = await sync_checks.MEMS[{db!r}].sync.status()\n[st.state, st.pending]")
    start(tabs[1], push)
    start(tabs[2], push)
    results = [finish(t) for t in tabs]
    # round two: all three start together, no delay
    py(
        tabs[2],
        f"""
mem = await sync_checks.open_synced({db!r})
await mem.messages.append_many((await mem.sessions.list())[0].session_id,
                               [{{"role": "user", "content": f"more {{j}}"}} for j in range(20)])
""",
    )
    for t in tabs:
        start(t, push)
    again = [finish(t) for t in tabs]
    assert n == 40
    assert seen_elsewhere == ["syncing", 40]
    assert results[0] == [True, 40] and results[1][0] is False and results[2][0] is False
    assert sum(r[1] for r in again) == 20
    ids = rec.op_ids
    assert len(ids) == len(set(ids)) == 60
    assert applied(srv) == 60


def test_browser_401_pauses_and_dead_letters_nothing(page: Page, srv: Any) -> None:
    """A refused key in the page: paused-auth, pending unchanged, attempts 0, nothing dead."""
    db = unique_name("auth")
    out = py(
        page,
        f"""
mem = await sync_checks.open_synced({db!r}, endpoint={srv.url!r}, api_key="not-the-key", {FAST})
await mem.sessions.create(title="locked out")
r = await mem.sync.push()
st = await mem.sync.status()
[r.state, st.state, st.pending, st.dead_letters, "check your key" in st.last_error,
 "not-the-key" in repr(st) + repr(mem.sync.config),
 [o["attempts"] for o in await mem.store.outbox_list()]]
""",
    )
    assert out == ["paused-auth", "paused-auth", 1, 0, True, False, [0]]
    assert applied(srv) == 0


def test_two_profiles_and_cpython_agree_on_one_order(
    page: Page, other_profile: tuple[Any, Page], srv: Any, tmp_path: Path
) -> None:
    """Two profiles (IndexedDB) and a CPython device (SQLite) write to one conversation
    between syncs, one of them late and offline with an earlier message, and one deletes:
    all three list the same messages in the same order with the same seqs."""
    import chatmem
    from chatmem.sync import SyncConfig

    _, b = other_profile
    da, dbn = unique_name("ordA"), unique_name("ordB")
    conf = f"endpoint={srv.url!r}, api_key={KEY!r}, {FAST}"
    listing = "[[m.seq, m.content] for m in await mem.messages.list({sid!r}, limit=None)]"
    sid = py(
        page,
        f"""
mem = await sync_checks.open_synced({da!r}, {conf})
s = await mem.sessions.create(title="one order")
await mem.messages.append(s.session_id, "user", "hello 1")
await mem.sync.run()
s.session_id
""",
    )
    py(b, f"mem = await sync_checks.open_synced({dbn!r}, {conf})\nawait mem.sync.run()")
    py(
        b,
        f"mem = await sync_checks.open_synced({dbn!r})\nawait mem.messages.append({sid!r}, 'user', 'B early')",
    )
    time.sleep(0.01)

    async def cpython(step: str) -> Any:
        mem = await chatmem.open(persist=str(tmp_path / "c.db"))
        await mem.sync.configure(SyncConfig(enabled=True, endpoint=srv.url, api_key=KEY, timeout=5_000))
        await mem.sync.run()
        if step == "write":
            await mem.messages.append(sid, "assistant", "C reply")
            await mem.messages.append(sid, "user", "C more")
            held = await mem.messages.list(sid, limit=None)
            await mem.sessions.delete_messages(sid, [held[0].id])  # "hello 1"
            await mem.sync.run()
        out = [[m.seq, m.content] for m in await mem.messages.list(sid, limit=None)]
        await mem.close()
        return out

    run(cpython("write"))
    py(
        page,
        f"mem = await sync_checks.open_synced({da!r})\nawait mem.messages.append({sid!r}, 'user', 'A late')",
    )
    for _ in range(2):
        py(page, f"await (await sync_checks.open_synced({da!r})).sync.run()")
        py(b, f"await (await sync_checks.open_synced({dbn!r})).sync.run()")
        run(cpython("read"))
    views = [
        py(page, f"mem = await sync_checks.open_synced({da!r})\n" + listing.format(sid=sid)),
        py(b, f"mem = await sync_checks.open_synced({dbn!r})\n" + listing.format(sid=sid)),
        run(cpython("read")),
    ]
    assert views[0] == views[1] == views[2], views
    texts = [t for _, t in views[0]]
    assert [s for s, _ in views[0]] == list(range(4)) and set(texts) == {
        "B early",
        "C reply",
        "C more",
        "A late",
    }
    assert texts.index("C reply") < texts.index("C more") and texts.index("B early") < texts.index("C reply")
