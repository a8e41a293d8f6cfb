"""Live sync in real Chromium: the page follows /v1/stream through fetch and pulls a change
another device (CPython) pushed, long before its ten-minute sync_interval."""

from __future__ import annotations

import time

import pytest
from test_sync_browser import py

import chatmem
from chatmem.server import running_server
from chatmem.sync import SyncConfig
from conftest import Page, run, unique_name

pytestmark = pytest.mark.browser

KEY = "browser-live-Key-3"


def test_the_page_pulls_another_devices_change_through_the_stream(page: Page) -> None:
    """A CPython device pushes a session; the page has it while its poll is minutes away."""
    with running_server(api_keys=[KEY]) as srv:
        db = unique_name("live")
        py(
            page,
            f"""
mem = await sync_checks.open_synced({db!r}, endpoint={srv.url!r}, api_key={KEY!r},
                                    auto_sync=True, sync_interval=600_000)
1""",
        )
        t0 = time.monotonic()
        while srv.hub.streams < 1:  # the page's stream is open
            assert time.monotonic() - t0 < 30, "the page never opened /v1/stream"
            time.sleep(0.05)
        assert py(page, f"sync_checks.MEMS[{db!r}].sync.live_state") == "following"

        async def other_device() -> str:
            mem = await chatmem.open()
            await mem.sync.configure(SyncConfig(enabled=True, endpoint=srv.url, api_key=KEY))
            sid = (await mem.sessions.create(title="from CPython")).session_id
            await mem.sync.run()
            await mem.close()
            return sid

        sid = run(other_device())
        t0 = time.monotonic()
        while not py(page, f"await sync_checks.MEMS[{db!r}].sessions.exists({sid!r})"):
            assert time.monotonic() - t0 < 30, "the page never pulled the change"
            time.sleep(0.05)
        assert py(page, f"(await sync_checks.MEMS[{db!r}].sessions.get({sid!r})).title") == "from CPython"
        py(page, f"await sync_checks.MEMS[{db!r}].sync.stop()\n1")
