"""Replies from a local OpenAI-compatible server, streamed into the view;
settings entered through the Settings panel."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any, Iterator

import pytest

from conftest import unique_name

from app.conftest import AppPage


@pytest.fixture
def app(browser: Any, site: str) -> Iterator[AppPage]:
    """The app in its own browser context: the model server is a second loopback
    origin, which the shared context's "only the site" check must not see."""
    ctx = browser.new_context()
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    a = AppPage(page, site, unique_name("llm"))
    yield a
    ctx.close()
    assert not a.errors, a.errors


class FakeOpenAI(http.server.BaseHTTPRequestHandler):
    """/v1/chat/completions streaming three pieces; waits for `release` before the last."""

    release = threading.Event()
    requests: list[dict[str, Any]] = []
    fail = False

    def log_message(self, *a: Any) -> None:
        pass

    def _cors(self) -> None:
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Allow-Headers", "Content-Type, Authorization, Accept")
        self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")

    def do_OPTIONS(self) -> None:
        self.send_response(204)
        self._cors()
        self.end_headers()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if type(self).fail:
            self.send_response(500)
            self._cors()
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": "model overloaded"}')
            return
        self.send_response(200)
        self._cors()
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def chunk(text: str) -> None:
            data = {"choices": [{"index": 0, "delta": {"content": text}}]}
            self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        chunk("Lisbon ")
        chunk("in May is ")
        type(self).release.wait(30)
        chunk("warm and bright.")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


@pytest.fixture
def llm() -> Iterator[str]:
    FakeOpenAI.release.clear()
    FakeOpenAI.requests.clear()
    FakeOpenAI.fail = False
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    FakeOpenAI.release.set()
    srv.shutdown()


def configure(app: AppPage, base_url: str) -> None:
    p = app.page
    p.click(".tools [data-panel=settings]")
    p.fill("#set-base-url", base_url)
    p.fill("#set-api-key", "sk-local-test")
    p.fill("#set-model", "tiny-model")
    p.click("#settings-form button[type=submit]")
    p.wait_for_selector("#settings-saved:has-text('Saved')")
    p.click("[data-action=close-panel]")


def test_streams_a_reply_from_a_local_openai_compatible_server(app: AppPage, llm: str) -> None:
    p = app.page
    configure(app, llm)
    assert "tiny-model" in p.locator("#mode-note").inner_text()
    app.new_session()
    p.fill("#composer-input", "When should I visit Lisbon?")
    p.press("#composer-input", "Enter")
    # the first pieces are on screen while the server still holds the last one back
    live = p.locator("#messages .msg.streaming")
    live.wait_for()
    p.wait_for_function("() => document.querySelector('#messages .msg.streaming').innerText.includes('in May is')")
    assert "warm" not in live.inner_text()
    FakeOpenAI.release.set()
    p.wait_for_selector("#messages .msg.assistant:not(.streaming):has-text('warm and bright')")
    assert p.locator("#messages .msg.assistant .badge").inner_text() == "tiny-model"
    (req,) = FakeOpenAI.requests
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-local-test"
    assert req["body"]["model"] == "tiny-model" and req["body"]["stream"] is True
    assert req["body"]["messages"][0]["role"] == "system"
    assert req["body"]["messages"][-1] == {"role": "user", "content": "When should I visit Lisbon?"}
    stored = app.py(f"""
import chatmem
mem = await chatmem.open({app.db!r})
s = (await mem.sessions.list())[0]
[(m.role, m.content, m.provider, m.model) for m in await mem.messages.list(s.session_id)]""")
    assert stored == [["user", "When should I visit Lisbon?", None, None],
                      ["assistant", "Lisbon in May is warm and bright.", "openai-compatible", "tiny-model"]]
    # settings persisted in the store's kv, and survive a reload
    p.reload()
    app.ready()
    assert "tiny-model" in p.locator("#mode-note").inner_text()


def test_a_failed_call_keeps_the_user_message_and_stores_no_reply(app: AppPage, llm: str) -> None:
    p = app.page
    FakeOpenAI.fail = True
    configure(app, llm)
    app.new_session()
    app.send("Are you there?")
    alert = p.locator("#messages .msg.system[role=alert]")
    assert "HTTP 500" in alert.inner_text() and "saved" in alert.inner_text()
    stored = app.py(f"""
import chatmem
mem = await chatmem.open({app.db!r})
s = (await mem.sessions.list())[0]
[(m.role, m.content) for m in await mem.messages.list(s.session_id)]""")
    assert stored == [["user", "Are you there?"]]


def test_invalid_settings_are_refused_and_named(app: AppPage) -> None:
    p = app.page
    p.click(".tools [data-panel=settings]")
    p.fill("#set-base-url", "http://example.com/v1")
    p.fill("#set-model", "m")
    p.click("#settings-form button[type=submit]")
    p.wait_for_selector("#settings-errors li")
    assert "plain http" in p.locator("#settings-errors").inner_text()
    assert app.py(f"""
import chatmem
mem = await chatmem.open({app.db!r})
await mem.store.kv_get("app:settings")""") is None
