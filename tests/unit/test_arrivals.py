"""What arrives from elsewhere is told to ``mem.on_change`` listeners: a pull
(``session-synced``), another process writing to the same SQLite file
(``changed-elsewhere``), as well as this process's own writes; so an app can show
it without a reload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import chatmem
from chatmem.memory import CHANGED_ELSEWHERE
from chatmem.server.runner import SyncServer
from chatmem.sync import SyncConfig

KEY = "arrivals-key"


async def test_another_connection_and_a_pull_are_told_to_listeners(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    server = SyncServer([KEY])
    server.start()

    try:
        a = await chatmem.open(persist=path)
        b = await chatmem.open(persist=path)
        heard: list[tuple[str, str]] = []
        b.on_change(lambda kind, sid, payload: heard.append((kind, sid)))
        s = await a.sessions.create(title="written by a")
        await a.messages.append(s.session_id, "user", "hello from a")
        assert await b.messages.count(s.session_id) == 1  # b looks: the store changed elsewhere
        assert (CHANGED_ELSEWHERE, "") in heard
        heard.clear()
        own = await b.messages.append(s.session_id, "user", "b's own")
        assert ("messages-appended", s.session_id) in heard and own.content == "b's own"

        c = await chatmem.open()  # another device: what it pulls is told as session-synced
        told: list[tuple[str, str]] = []
        c.on_change(lambda kind, sid, payload: told.append((kind, sid)))
        for mem in (b, c):
            await mem.sync.configure(SyncConfig(enabled=True, endpoint=server.url, api_key=KEY))
        await b.sync.run()
        await c.sync.run()
        assert ("session-synced", s.session_id) in told
        assert [m.content for m in await c.messages.list(s.session_id)] == ["hello from a", "b's own"]
        for mem in (a, b, c):
            await mem.close()
    finally:
        server.stop()


async def test_listeners_added_later_hear_every_kind_once() -> None:
    """Two listeners each hear a write once, in the order they were added."""

    mem = await chatmem.open()
    heard: list[Any] = []
    mem.on_change(lambda kind, sid, payload: heard.append(("first", kind)))
    mem.on_change(lambda kind, sid, payload: heard.append(("second", kind)))
    await mem.sessions.create(title="x")
    await mem.close()
    result = heard
    assert result == [("first", "session-created"), ("second", "session-created")]
