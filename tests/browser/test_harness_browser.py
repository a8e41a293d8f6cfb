"""The browser tests' own harness: a booted page whose renderer crashes is replaced by a
fresh one, with the databases it wrote still there."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Error as PlaywrightError

from conftest import Page, unique_name

pytestmark = pytest.mark.browser


def test_a_page_whose_renderer_crashed_is_booted_again_with_its_data(browser: Any, site: str) -> None:
    # a context of its own: a renderer it crashes is none of the shared page's
    ctx = browser.new_context()
    try:
        p = Page(ctx.new_page(), site).boot()
        db = unique_name("crash")
        p.py(
            f"import chatmem\nmem = await chatmem.open({db!r})\n"
            "s = await mem.sessions.create(title='kept')\n"
            "await mem.messages.append(s.session_id, 'user', 'written before the crash')\nawait mem.close()"
        )
        first = p.page
        with first.expect_event("crash"), pytest.raises(PlaywrightError, match="crash"):
            first.goto("chrome://crash")
        assert p.crashed
        p.revive()
        assert p.page is not first and not p.crashed
        got = p.py(
            f"import chatmem\nmem = await chatmem.open({db!r})\n"
            "[s] = await mem.sessions.list()\n"
            "out = [m.text for m in await mem.messages.list(s.session_id)]\nawait mem.close()\nout"
        )
        assert got == ["written before the crash"]
        p.revive()  # alive: nothing to do
        assert not p.crashed
    finally:
        ctx.close()
