"""Reading the store for a derivation (``chatmem.index.reading``): every message once, in
session order and by seq, small sessions many a read, a big one page by page, the next
read under way while the caller works on the last."""

from __future__ import annotations

import asyncio
from typing import Any

import chatmem
from chatmem.index import reading


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _filled(sizes: list[int]) -> tuple[chatmem.Memory, list[dict[str, Any]], list[str]]:
    mem = await chatmem.open(":memory:")
    want: list[str] = []
    for n in sizes:
        s = await mem.sessions.create()
        if n:
            await mem.messages.append_many(
                s.session_id, [{"role": "user", "content": f"{s.session_id} {i}"} for i in range(n)]
            )
        want += [f"{s.session_id} {i}" for i in range(n)]
    return mem, await mem.store.all_sessions(), want


async def test_every_message_in_session_order_small_sessions_batched_big_ones_paged(monkeypatch) -> None:
    monkeypatch.setattr(reading, "PAGE", 10)
    monkeypatch.setattr(reading, "BATCH", 12)

    # 3+4+5 make a batch of 12, 25 is paged (10, 10, 5), 10 (= PAGE) paged too: 10, then an empty page
    mem, metas, want = await _filled([3, 4, 5, 25, 0, 2, 10, 1])
    calls: list[tuple[str, Any]] = []
    store = mem.store
    many, paged = store.list_sessions_messages, store.list_messages

    async def list_sessions_messages(ids: list[str]) -> list[dict[str, Any]]:
        calls.append(("many", len(ids)))
        return await many(ids)

    async def list_messages(sid: str, offset: int, limit: int | None, newest: bool) -> list[dict[str, Any]]:
        calls.append(("page", offset))
        return await paged(sid, offset, limit, newest)

    store.list_sessions_messages = list_sessions_messages  # type: ignore[method-assign]
    store.list_messages = list_messages  # type: ignore[method-assign]
    got = [m["content"] async for m in reading.each_message(store, metas)]
    assert got == want
    assert calls == [
        ("many", 3),
        ("page", 0),
        ("page", 10),
        ("page", 20),
        ("many", 2),
        ("page", 0),
        ("page", 10),
        ("many", 1),
    ], calls
    await mem.close()


async def test_the_next_read_is_under_way_while_the_caller_works(monkeypatch) -> None:
    monkeypatch.setattr(reading, "BATCH", 4)

    mem, metas, want = await _filled([2, 2, 2, 2, 2, 2])
    started: list[int] = []
    seen = 0
    many = mem.store.list_sessions_messages

    async def list_sessions_messages(ids: list[str]) -> list[dict[str, Any]]:
        started.append(seen)
        return await many(ids)

    mem.store.list_sessions_messages = list_sessions_messages  # type: ignore[method-assign]
    got = []
    async for m in reading.each_message(mem.store, metas):
        got.append(m["content"])
        seen += 1
        await asyncio.sleep(0)  # the caller's own work yields, as tokenising does
    assert got == want
    # reads of 4 messages; each after the first starts at the caller's first yield
    # in the batch before it, not after its last record (which would be 4, 8)
    assert started == [0, 1, 5], started
    await mem.close()


async def test_a_reader_left_early_cancels_its_read_ahead() -> None:
    mem, metas, _ = await _filled([1] * 3)
    reading_ = reading.each_message(mem.store, metas)
    first = await reading_.__anext__()
    assert first["seq"] == 0
    await reading_.aclose()  # nothing left running
    assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    await mem.close()
