"""Two devices, one conversation: two browser profiles write to one conversation between
syncs through the reference server and show it in the same order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.conftest import AppPage, shot
from app.test_app_arrivals import shown
from chatmem.server import running_server
from conftest import unique_name

KEY = "one-order"

ORDER_JS = (
    "() => [...document.querySelectorAll('#messages > li.msg[data-id] .body')].map(b => b.innerText.trim())"
)


@pytest.fixture
def srv() -> Iterator[Any]:
    with running_server(api_keys=[KEY], db=":memory:") as s:
        yield s


def device(browser: Any, site: str, srv: Any, name: str) -> tuple[Any, AppPage]:
    ctx = browser.new_context(viewport={"width": 1100, "height": 760})
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    app = AppPage(page, site, unique_name(name))
    app.py(
        "import chatmem_app\nfrom chatmem.sync import SyncConfig\n"
        f"await chatmem_app.app.mem.sync.configure(SyncConfig(enabled=True, endpoint={srv.url!r}, "
        f"api_key={KEY!r}))\nNone"
    )
    return ctx, app


def sync(app: AppPage) -> None:
    app.py("import chatmem_app\nawait chatmem_app.app.mem.sync.run()\nNone")


def test_two_profiles_show_one_conversation_in_one_order(browser: Any, site: str, srv: Any) -> None:
    """A starts a conversation; both profiles then write to it while apart (each answered from
    memory); after they sync, both show the same messages in the same order."""
    ctx_a, a = device(browser, site, srv, "order-a")
    ctx_b, b = device(browser, site, srv, "order-b")
    try:
        a.new_session()
        a.send("Plan the picnic on Saturday")
        sync(a)
        sync(b)
        b.expect_titles(a.titles(), timeout=20)
        b.page.click("#session-list .session")
        shown(b, "Plan the picnic on Saturday")
        a.send("I will bring bread")
        b.send("I will bring cheese")
        for app in (a, b, a):
            sync(app)
        for app in (a, b):
            shown(app, "I will bring bread")
            shown(app, "I will bring cheese")
        order_a, order_b = a.page.evaluate(ORDER_JS), b.page.evaluate(ORDER_JS)
        assert order_a == order_b and len(order_a) == 6, (order_a, order_b)
        assert order_a.index("I will bring bread") < order_a.index("I will bring cheese")
        for app in (a, b):  # the status line counts what arrived as well
            app.page.wait_for_selector("#work-status .text:has-text('semantic search ready for 6 messages')")
        shot(a.page, "order-device-a")
        shot(b.page, "order-device-b")
        assert not a.errors and not b.errors, a.errors + b.errors
    finally:
        ctx_a.close()
        ctx_b.close()
