"""Fixtures for the app tests: the real page, driven like a person would
(clicks, typing, keys), each test on its own IndexedDB database."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import unique_name

#: the stored user messages (not the draft shown while storing) whose text is ``t``
SENT_JS = (
    "t => { const norm = (s) => s.replace(/\\s+/g, ' ').trim();"
    " return [...document.querySelectorAll('#messages > li.msg.user')].filter("
    "li => li.dataset.id !== 'draft' && norm(li.querySelector('.body').textContent) === norm(t)); }"
)


class AppPage:
    """The app at ``?db=<unique>``, booted until its interface is ready."""

    def __init__(self, page: Any, url: str, db: str):
        self.page = page
        self.db = db
        self.errors: list[str] = []
        #: the page's console errors and warnings, and its failed requests (said when a wait runs out)
        self.log: list[str] = []
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on(
            "console", lambda m: m.type in ("error", "warning") and self.log.append(f"{m.type}: {m.text}")
        )
        page.on("requestfailed", lambda r: self.log.append(f"failed: {r.url} {r.failure}"))
        page.goto(f"{url}?db={db}")
        self.ready()

    def ready(self) -> None:
        self.page.evaluate("window.chatmem.appReady")

    def py(self, code: str) -> Any:
        return self.page.evaluate("code => window.chatmem.runPython(code)", code)

    def send(self, text: str) -> None:
        """Type a message and press Enter; wait until it is stored and answered (or refused).

        The condition is the message itself: one more stored (non-draft) user message
        with this text, followed by a finished reply or an alert. Counting reply bubbles
        instead races with the list being drawn again while the answer streams.
        """
        n = self.page.evaluate(f"t => ({SENT_JS})(t).length", text)
        self.page.fill("#composer-input", text)
        self.page.press("#composer-input", "Enter")
        try:
            self.page.wait_for_function(
                f"([t, n]) => {{ const sent = ({SENT_JS})(t); if (sent.length <= n) return false;"
                " let li = sent[sent.length - 1].nextElementSibling;"
                " for (; li; li = li.nextElementSibling)"
                "   if (li.matches('.msg.assistant:not(.streaming), .msg.system[role=alert]')) return true;"
                " return false; }",
                arg=[text, n],
            )
        except Exception as e:
            raise AssertionError(f"{text!r} was not stored and answered: {self.state()}") from e

    def state(self) -> dict[str, Any]:
        """What the page shows and has logged: said when a wait for it runs out."""
        shown = self.page.evaluate(
            "() => ({composer: document.querySelector('#composer-input')?.value,"
            " toasts: [...document.querySelectorAll('#toasts .toast')].map(t => t.textContent),"
            " messages: [...document.querySelectorAll('#messages > li')].slice(-6)"
            "   .map(li => `${li.className} ${li.dataset.id || ''}: ${li.textContent.slice(0, 80)}`)})"
        )
        try:
            shown["busy"] = self.page.evaluate(
                "code => Promise.race([window.chatmem.runPython(code),"
                " new Promise(r => setTimeout(() => r('no answer from Python in 5 s'), 5000))])",
                "import chatmem_app\nchatmem_app.app.busy",
            )
        except Exception as e:  # noqa: BLE001 - the state is reported, whatever part answers
            shown["busy"] = f"unknown ({e})"
        return {**shown, "log": self.log[-12:], "errors": self.errors}

    def new_session(self) -> None:
        n = self.page.locator("#session-list .session").count()
        self.page.click("#new-session")
        self.page.wait_for_function(
            "n => document.querySelectorAll('#session-list .session').length > n "
            "&& document.activeElement.id === 'composer-input'",
            arg=n,
        )

    def titles(self) -> list[str]:
        return self.page.locator("#session-list .session .title").all_inner_texts()

    def expect_titles(self, expected: list[str], timeout: float = 10.0) -> None:
        """Wait until the sidebar lists exactly ``expected`` (the UI updates asynchronously)."""
        deadline = time.monotonic() + timeout
        while self.titles() != expected:
            assert time.monotonic() < deadline, f"sidebar shows {self.titles()}, expected {expected}"
            self.page.wait_for_timeout(50)


@pytest.fixture
def app(context: Any, site: str) -> Iterator[AppPage]:
    page = context.new_page()
    page.set_default_timeout(60_000)
    a = AppPage(page, site, unique_name("app"))
    yield a
    page.close()
    assert not a.errors, a.errors


@pytest.fixture
def app_factory(context: Any, site: str) -> Iterator[Callable[..., AppPage]]:
    pages: list[Any] = []

    def make(ctx: Any = None, db: str | None = None, viewport: dict[str, int] | None = None) -> AppPage:
        page = (ctx or context).new_page()
        if viewport:
            page.set_viewport_size(viewport)
        page.set_default_timeout(60_000)
        pages.append(page)
        return AppPage(page, site, db or unique_name("app"))

    yield make
    for p in pages:
        if not p.is_closed():
            p.close()


#: where ``shot`` writes, when asked (``CHATMEM_SCREENSHOTS=1``)
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def shot(page: Any, name: str) -> None:
    """Take a screenshot (a real, non-trivial image); write it to ``SHOTS`` only when
    ``CHATMEM_SCREENSHOTS=1``, so a test run leaves the work tree as it was."""
    png = page.screenshot()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000, name
    if os.environ.get("CHATMEM_SCREENSHOTS") == "1":
        SHOTS.mkdir(parents=True, exist_ok=True)
        (SHOTS / f"{name}.png").write_bytes(png)
