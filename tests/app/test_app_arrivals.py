"""What arrives appears without a reload: another tab's writes (the list and the open
conversation) and what a background pull brings from another device."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import chatmem
from app.conftest import SENT_JS, AppPage, shot
from chatmem.server import running_server
from chatmem.sync import SyncConfig
from conftest import run, unique_name

KEY = "arrivals"


def shown(app: AppPage, text: str, timeout: float = 20.0) -> None:
    """Wait until the open conversation shows a stored user message ``text``."""
    app.page.wait_for_function(f"t => ({SENT_JS})(t).length > 0", arg=text, timeout=timeout * 1000)


def test_another_tabs_writes_appear_in_the_list_and_the_open_conversation(
    app_factory: Callable[..., AppPage],
) -> None:
    db = unique_name("tabs")
    a = app_factory(db=db)
    b = app_factory(db=db)
    a.new_session()
    a.send("Written in the first tab")
    b.expect_titles(a.titles())  # the list, without a reload
    b.page.click("#session-list .session")
    shown(b, "Written in the first tab")
    a.send("And one more from the first tab")
    shown(b, "And one more from the first tab")  # the open conversation, without a reload
    assert not a.errors and not b.errors, a.errors + b.errors


@pytest.fixture
def srv() -> Iterator[Any]:
    with running_server(api_keys=[KEY], db=":memory:") as s:
        yield s


def test_what_a_background_pull_brings_appears(browser: Any, site: str, srv: Any) -> None:
    """Auto-sync pulls a conversation another device wrote: it is listed, and once open,
    a later message from that device appears in it, with no click on "Sync now"."""
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.set_default_timeout(60_000)
        app = AppPage(page, site, unique_name("pulled"))
        app.py(
            "import chatmem_app\nfrom chatmem.sync import SyncConfig\n"
            f"await chatmem_app.app.mem.sync.configure(SyncConfig(enabled=True, endpoint={srv.url!r}, "
            f"api_key={KEY!r}, auto_sync=True, sync_interval=1000))\n"
            "chatmem_app.app.mem.sync.start()\nNone"
        )

        async def device(text: str, sid: str | None = None) -> str:
            mem = await chatmem.open()
            await mem.sync.configure(SyncConfig(enabled=True, endpoint=srv.url, api_key=KEY))
            await mem.sync.run()
            if sid is None:
                sid = (await mem.sessions.create(title="From the other device")).session_id
            await mem.messages.append(sid, "user", text)
            await mem.sync.run()
            await mem.close()
            return sid

        sid = run(device("Hello from elsewhere"))
        app.expect_titles(["From the other device"], timeout=20)
        page.click("#session-list .session")
        shown(app, "Hello from elsewhere")
        run(device("A second message from elsewhere", sid))
        shown(app, "A second message from elsewhere")
        shot(page, "arrival")
        assert not app.errors, app.errors
    finally:
        ctx.close()
