"""One order everywhere: devices that write to one session between syncs end with the
same messages in the same order (``seq`` included), each keeping its own order, on the
memory and SQLite stores through the reference server; stores written before messages
had an order key keep their order and take part."""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

import chatmem
from chatmem.runtime import CPythonRuntime
from chatmem.server import running_server
from chatmem.sync import SyncConfig

KEY = "order-key"


def now() -> int:
    """The shared time starts at the real time: the server checks HLCs against its clock."""
    return time.time_ns() // 1_000_000


class Clock:
    """One device's wall clock: the shared time plus its own offset (clocks disagree)."""

    def __init__(self, world: list[int], offset: int) -> None:
        self.world, self.offset = world, offset

    def __call__(self) -> int:
        return self.world[0] + self.offset

    async def sleep(self, seconds: float) -> None:
        self.world[0] += int(seconds * 1000)


async def device(url: str, world: list[int], offset: int = 0, persist: str | None = None) -> chatmem.Memory:
    clock = Clock(world, offset)
    mem = await chatmem.open(persist=persist, runtime=CPythonRuntime(clock=clock, sleep=clock.sleep))
    await mem.sync.configure(SyncConfig(enabled=True, endpoint=url, api_key=KEY, timeout=5_000))
    return mem


async def view(mem: chatmem.Memory, sid: str) -> list[tuple[int, str]]:
    return [(m.seq, m.content) for m in await mem.messages.list(sid, limit=None)]  # type: ignore[misc]


async def window(mem: chatmem.Memory, sid: str) -> tuple[list[str], list[Any]]:
    w = await mem.build_window(sid, max_tokens=100_000)
    return w.kept_ids, [m for m in w.messages if m["role"] != "system"]


@pytest.fixture
def srv() -> Any:
    with running_server(api_keys=[KEY]) as s:
        yield s


async def test_two_devices_writing_between_syncs_agree_on_the_order(srv: Any) -> None:
    """The issue's case: A and B both write to one conversation between syncs; both end
    with one order, with the same seqs, and the same window for the model."""
    world = [now()]

    a = await device(srv.url, world, offset=0)
    b = await device(srv.url, world, offset=-40_000)  # B's clock runs 40 s behind
    s = await a.sessions.create(title="shared")
    await a.messages.append(s.session_id, "user", "hello 1")
    await a.sync.run()
    await b.sync.run()
    world[0] += 1_000
    await a.messages.append(s.session_id, "user", "A second")
    world[0] += 1_000
    await a.messages.append(s.session_id, "user", "A third")
    world[0] += 1_000
    await b.messages.append(s.session_id, "user", "B second")
    for m in (a, b, a):
        await m.sync.run()
    va, vb, wa, wb = [
        await view(a, s.session_id),
        await view(b, s.session_id),
        await window(a, s.session_id),
        await window(b, s.session_id),
    ]
    assert va == vb, (va, vb)
    assert [seq for seq, _ in va] == [0, 1, 2, 3]
    texts = [t for _, t in va]
    assert texts[0] == "hello 1" and texts.index("A second") < texts.index("A third")
    assert wa == wb


async def test_a_late_arrival_that_belongs_first_goes_first_everywhere(srv: Any, tmp_path: Path) -> None:
    """B writes while apart, before A's messages; A syncs first. When B's message arrives
    it goes before A's on A (a SQLite store) as it is on B, and search and recency read the
    new order."""
    world = [now()]

    a = await device(srv.url, world, persist=str(tmp_path / "a.db"))
    b = await device(srv.url, world)
    s = await a.sessions.create(title="late")
    await a.sync.run()
    await b.sync.run()
    world[0] += 1_000
    await b.messages.append(s.session_id, "user", "early from B about zebras")
    world[0] += 1_000
    for i in range(3):
        await a.messages.append(s.session_id, "assistant", f"later from A {i}")
    await a.search("zebras")  # the index is open and current before the arrival
    await a.sync.run()
    await b.sync.run()
    await a.sync.run()
    hits = await a.search("zebras")
    recent = await a.build_window(s.session_id, max_tokens=100_000)
    va = await view(a, s.session_id)
    vb = await view(b, s.session_id)
    kept = recent.kept_ids
    assert (
        va
        == vb
        == [
            (0, "early from B about zebras"),
            (1, "later from A 0"),
            (2, "later from A 1"),
            (3, "later from A 2"),
        ]
    )
    assert [(h.message.seq, h.message.content) for h in hits][:1] == [(0, "early from B about zebras")]
    assert len(kept) == 4


@pytest.mark.parametrize("seed", range(6))
async def test_three_devices_in_random_interleavings_agree(srv: Any, tmp_path: Path, seed: int) -> None:
    """Three devices (memory, SQLite, memory; clocks up to a minute apart) append, delete
    and sync in a random interleaving; after everyone syncs twice they hold the same
    messages in the same order with the same seqs and windows, and each device's own
    messages are in the order it wrote them."""
    rnd = random.Random(seed)
    world = [now()]

    devs = [
        await device(srv.url, world, offset=0),
        await device(srv.url, world, offset=-60_000, persist=str(tmp_path / f"b{seed}.db")),
        await device(srv.url, world, offset=45_000),
    ]
    s = await devs[0].sessions.create(title="three")
    await devs[0].sync.run()
    for d in devs[1:]:
        await d.sync.run()
    written: list[list[str]] = [[], [], []]
    for step in range(40):
        world[0] += rnd.randint(1, 1_500)
        i = rnd.randrange(3)
        d = devs[i]
        roll = rnd.random()
        if roll < 0.55:
            n = rnd.randint(1, 3)
            items = [{"role": "user", "content": f"d{i} s{step} #{k}"} for k in range(n)]
            if n == 1:
                await d.messages.append(s.session_id, "user", items[0]["content"])
            else:
                await d.messages.append_many(s.session_id, items)
            written[i] += [str(x["content"]) for x in items]
        elif roll < 0.65:
            held = await d.messages.list(s.session_id, limit=None)  # type: ignore[misc]
            if held:
                gone = rnd.choice(held)
                await d.sessions.delete_messages(s.session_id, [gone.id])
        else:
            await d.sync.run()
    for _ in range(2):
        for d in devs:
            await d.sync.run()
    *views, windows, written = [await view(d, s.session_id) for d in devs] + [
        [await window(d, s.session_id) for d in devs],
        written,
    ]
    assert views[0] == views[1] == views[2], views
    assert [seq for seq, _ in views[0]] == list(range(len(views[0])))
    assert windows[0] == windows[1] == windows[2]
    texts = [t for _, t in views[0]]
    for own in written:
        kept = [t for t in own if t in texts]
        assert [t for t in texts if t in set(own)] == kept, "a device's own order is kept"


def _as_written_before_order_keys(path: Path, seqs: dict[str, int] | None = None) -> None:
    """Turn a SQLite file into one an older chatmem wrote: schema version 2, no order keys,
    seq as given per message id (default: gaps, 0, 2, 4...)."""
    db = sqlite3.connect(path)
    with db:
        rows = db.execute("SELECT id, session_id FROM messages ORDER BY session_id, seq").fetchall()
        db.execute("UPDATE messages SET seq = -1 - seq, record = json_remove(record, '$.hlc')")
        for i, (mid, _) in enumerate(rows):
            q = seqs[mid] if seqs is not None else 2 * i
            db.execute(
                "UPDATE messages SET seq = ?, record = json_set(record, '$.seq', ?) WHERE id = ?", (q, q, mid)
            )
        db.execute("UPDATE sessions SET record = json_set(record, '$.nextSeq', 99)")
        db.execute("PRAGMA user_version = 2")
    db.close()


async def test_a_store_written_before_order_keys_keeps_its_order_and_joins(srv: Any, tmp_path: Path) -> None:
    """A SQLite file whose messages have no order key and gaps in seq (as older chatmem
    wrote them) opens with its messages in their order, numbered densely; its history
    reaches another device in that order, and new messages from both go after it."""
    world = [now()]
    path = tmp_path / "old.db"

    mem = await chatmem.open(persist=str(path))
    s = await mem.sessions.create(title="old")
    await mem.messages.append_many(
        s.session_id, [{"role": "user", "content": f"old {i}", "created_at": 1_000 - i} for i in range(5)]
    )
    await mem.close()
    sid = s.session_id
    _as_written_before_order_keys(path)

    clock = Clock(world, 0)
    old = await chatmem.open(persist=str(path), runtime=CPythonRuntime(clock=clock, sleep=clock.sleep))
    before = await view(old, sid)
    keys = [m["hlc"] for m in await old.store.list_messages(sid, 0, None, False)]
    assert keys == [f"0000000001000-000{i}-0" for i in range(5)], "as the page's migration keys them"
    await old.sync.configure(SyncConfig(enabled=True, endpoint=srv.url, api_key=KEY, timeout=5_000))
    await old.sync.run()
    peer = await device(srv.url, world)
    await peer.sync.run()
    world[0] += 1_000
    await peer.messages.append(sid, "assistant", "new from elsewhere")
    await peer.sync.run()
    await old.sync.run()
    await old.messages.append(sid, "user", "and here")
    await old.sync.run()
    await peer.sync.run()
    after, other = await view(old, sid), await view(peer, sid)
    assert before == [(i, f"old {i}") for i in range(5)]
    assert after == list(enumerate([*(f"old {i}" for i in range(5)), "new from elsewhere", "and here"]))
    assert other == after


async def test_a_synced_store_from_before_order_keys_takes_the_servers_order(
    srv: Any, tmp_path: Path
) -> None:
    """A device whose older chatmem numbered a shared conversation its own way (the old
    defect) pulls everything again after the upgrade and ends in the order every other
    device has: each message takes the key the server holds."""
    world = [now()]
    path = tmp_path / "synced.db"

    a = await device(srv.url, world, persist=str(path))
    b = await device(srv.url, world)
    s = await a.sessions.create(title="shared")
    await a.messages.append(s.session_id, "user", "hello")
    await a.sync.run()
    await b.sync.run()
    world[0] += 500
    await a.messages.append(s.session_id, "user", "A one")
    world[0] += 500
    await b.messages.append(s.session_id, "user", "B one")
    for d in (a, b, a):
        await d.sync.run()
    await a.close()
    sid, on_b = s.session_id, await view(b, s.session_id)
    ids = await _ids(path, sid)
    # the old client's own numbering: its own message last, the other device's before it
    by_text = dict(ids)
    _as_written_before_order_keys(path, {by_text["hello"]: 0, by_text["B one"]: 1, by_text["A one"]: 2})

    clock = Clock(world, 0)
    a = await chatmem.open(persist=str(path), runtime=CPythonRuntime(clock=clock, sleep=clock.sleep))
    before = await view(a, sid)
    await a.sync.run()
    after = await view(a, sid)
    assert [t for _, t in before] == ["hello", "B one", "A one"]
    assert after == on_b and [t for _, t in after] == ["hello", "A one", "B one"]


async def _ids(path: Path, sid: str) -> list[tuple[str, str]]:
    mem = await chatmem.open(persist=str(path))
    out = [(str(m.content), m.id) for m in await mem.messages.list(sid, limit=None)]  # type: ignore[misc]
    await mem.close()
    return out


async def test_two_connections_to_one_file_keep_the_order_they_wrote_in(tmp_path: Path) -> None:
    """Two connections to one SQLite file (one device) write alternately within the same
    millisecond: the order keys follow the order of the writes."""
    frozen = now()

    runtime = CPythonRuntime(clock=lambda: frozen)
    path = str(tmp_path / "one.db")
    a = await chatmem.open(persist=path, runtime=runtime)
    b = await chatmem.open(persist=path, runtime=runtime)
    s = await a.sessions.create(title="two connections")
    for i in range(6):
        await (a, b)[i % 2].messages.append(s.session_id, "user", f"write {i}")
    rows = sorted(
        await b.store.list_messages(s.session_id, 0, None, False), key=lambda r: (r["hlc"], r["id"])
    )
    await a.close()
    await b.close()
    result = [r["content"] for r in rows]
    assert result == [f"write {i}" for i in range(6)]
