"""Live sync on CPython: a device follows /v1/stream and pulls another device's change at once
(the sync_interval is ten minutes here), across instances too; without a stream it polls."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import chatmem
from chatmem.errors import SyncAuthError
from chatmem.server import FaultPlan, running_server
from chatmem.server.faults import Fault
from chatmem.server.runner import SyncServer
from chatmem.sync import SyncConfig
from chatmem.sync.protocol import SyncClient
from chatmem.sync.stream import follow_stream

KEY = "k-live-1"
LONG = 600_000  # ms: polling alone would not deliver within any test's wait


async def device(url: str, **kw: Any) -> chatmem.Memory:
    mem = await chatmem.open()
    conf = {
        "enabled": True,
        "endpoint": url,
        "api_key": KEY,
        "timeout": 5_000,
        "auto_sync": True,
        "sync_interval": LONG,
    }
    conf.update(kw)
    await mem.sync.configure(SyncConfig(**conf))
    return mem


async def until(pred: Any, what: str, limit: float = 30.0) -> None:
    """Wait for a condition (the limit only turns a hang into a failure)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while not await pred():
        assert loop.time() < end, f"never happened: {what}"
        await asyncio.sleep(0.02)


async def shows(mem: chatmem.Memory, sid: str) -> bool:
    return await mem.sessions.exists(sid)


@pytest.fixture(params=["one-sqlite-server", "two-postgres-instances"])
def servers(request: Any) -> Iterator[tuple[SyncServer, SyncServer]]:
    """Where device A pushes and where device B listens."""
    if request.param == "one-sqlite-server":
        with running_server(api_keys=[KEY]) as s:
            yield s, s
        return
    db = request.getfixturevalue("pg_url")
    with running_server(api_keys=[KEY], db=db) as a, running_server(api_keys=[KEY], db=db) as b:
        yield a, b


async def test_another_device_sees_a_change_through_the_stream(
    servers: tuple[SyncServer, SyncServer],
) -> None:
    """B pulls A's new session long before its next poll would."""
    sa, sb = servers

    a, b = await device(sa.url), await device(sb.url)
    try:
        await until(lambda: asyncio.sleep(0, b.sync.live_state == "following"), "B follows")
        await until(lambda: asyncio.sleep(0, sb.hub.streams >= 1), "B's stream is open")
        sid = (await a.sessions.create(title="from A")).session_id
        await until(lambda: shows(b, sid), "B has A's session")
        assert (await b.sessions.get(sid)).title == "from A"
    finally:
        await a.close()
        await b.close()


async def test_a_dropped_stream_reconnects_and_loses_nothing() -> None:
    """The first stream connection is cut; B reconnects and still gets the change."""
    plan = FaultPlan().add(Fault(kind="drop", path="/v1/stream"))
    with running_server(api_keys=[KEY], faults=plan) as srv:
        a, b = await device(srv.url), await device(srv.url)
        try:
            await until(lambda: asyncio.sleep(0, srv.hub.streams >= 2), "both streams open")
            sid = (await a.sessions.create(title="after the drop")).session_id
            await until(lambda: shows(b, sid), "B has A's session")
        finally:
            await a.close()
            await b.close()
        assert ("/v1/stream", "drop") in plan.fired


async def test_without_a_stream_the_device_polls() -> None:
    """A server answering 404 on /v1/stream: following stops, polling still delivers."""
    plan = FaultPlan().add(Fault(kind="status", status=404, path="/v1/stream"), times=50)
    with running_server(api_keys=[KEY], faults=plan) as srv:
        a, b = await device(srv.url), await device(srv.url, sync_interval=1_000)
        try:
            await until(lambda: asyncio.sleep(0, b.sync.live_state == "unsupported"), "B gave up the stream")
            sid = (await a.sessions.create(title="polled")).session_id
            await until(lambda: shows(b, sid), "B polled A's session")
        finally:
            await a.close()
            await b.close()


async def test_live_can_be_turned_off() -> None:
    """live=False never opens a stream."""
    with running_server(api_keys=[KEY]) as srv:
        b = await device(srv.url, live=False)
        await b.sync.run()
        state = b.sync.live_state
        await b.close()
        assert state == "off"
        assert srv.faults.seen["/v1/stream"] == 0


async def test_follow_stream_stops_on_a_revoked_key(pg_url: str) -> None:
    """The server's `revoked` event ends following with "auth"."""
    from chatmem.server import add_account, issue_token, open_storage, revoke_token

    st = open_storage(pg_url)
    add_account(st, "amy")
    rec, token = issue_token(st, "amy")
    with running_server(api_keys=[], storage=st, heartbeat=0.3) as srv:
        client = SyncClient(SyncConfig(enabled=True, endpoint=srv.url, api_key=token), device_id="dev-1")
        seen: list[str] = []

        def on_cursor(c: str) -> None:
            seen.append(c)
            revoke_token(st, rec.id)

        assert (await follow_stream(client, on_cursor)) == "auth"
        assert seen == ["0"]

        async def again() -> None:
            async for _ in client.stream():
                pass

        with pytest.raises(SyncAuthError):
            await again()
