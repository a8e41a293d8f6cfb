"""Replies from the local OpenAI-compatible server (tests/llm_server.py),
through ``session.send``, streamed into the view; settings entered through
the Settings panel."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from app.conftest import AppPage, shot
from conftest import unique_name
from llm_server import LLMServer


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


@pytest.fixture(scope="module")
def llm() -> Iterator[LLMServer]:
    srv = LLMServer()
    yield srv
    srv.close()


def configure(app: AppPage, base_url: str, key: str = "sk-local-test") -> None:
    p = app.page
    p.click(".tools [data-panel=settings]")
    p.fill("#set-base-url", base_url)
    p.fill("#set-api-key", key)
    p.fill("#set-model", "tiny-model")
    p.click("#settings-form button[type=submit]")
    p.wait_for_selector("#settings-saved:has-text('Saved')")
    p.click("[data-action=close-panel]")


def stored(app: AppPage) -> Any:
    return app.py(f"""
import chatmem
mem = await chatmem.open({app.db!r})
s = (await mem.sessions.list())[0]
[(m.role, m.content, m.provider, m.model) for m in await mem.messages.list(s.session_id)]""")


def test_chat_turns_against_the_local_server(app: AppPage, llm: LLMServer) -> None:
    p = app.page
    llm.reset()
    configure(app, llm.url)
    assert "tiny-model" in p.locator("#mode-note").inner_text()
    app.new_session()
    app.send("When should I visit Lisbon?")
    reply = p.locator("#messages .msg.assistant").last
    assert "echo: When should I visit Lisbon?" in reply.inner_text()
    assert reply.locator(".badge").inner_text() == "tiny-model"
    app.send("And Porto?")
    (first, second) = [r for r in llm.requests if r["path"] == "/v1/chat/completions"]
    assert first["auth"] == "Bearer sk-local-test"
    body = second["body"]
    assert body["model"] == "tiny-model" and body["stream"] is True
    roles = [m["role"] for m in body["messages"]]
    # system prompt, live context (the local date and time), the history, the new message
    assert roles[0] == "system" and body["messages"][1]["content"][0]["text"].startswith(
        "Module module:datetime:"
    )
    assert body["messages"][-1] == {"role": "user", "content": "And Porto?"}
    assert {"role": "assistant", "content": "echo: When should I visit Lisbon?"} in body["messages"]
    assert stored(app) == [
        ["user", "When should I visit Lisbon?", None, None],
        ["assistant", "echo: When should I visit Lisbon?", "openai-compatible", "tiny-model"],
        ["user", "And Porto?", None, None],
        ["assistant", "echo: And Porto?", "openai-compatible", "tiny-model"],
    ]
    # settings persisted in the store's kv, and survive a reload
    p.reload()
    app.ready()
    assert "tiny-model" in p.locator("#mode-note").inner_text()


def test_the_answer_streams_into_the_view(app: AppPage, llm: LLMServer) -> None:
    p = app.page
    llm.reset("slow")  # 40 pieces, 100 ms apart
    configure(app, llm.url)
    app.new_session()
    p.fill("#composer-input", "Tell me a long story")
    p.press("#composer-input", "Enter")
    live = p.locator("#messages .msg.streaming")
    live.wait_for()
    p.wait_for_function("() => document.querySelector('#messages .msg.streaming')?.innerText.includes('w5')")
    assert "w39" not in live.inner_text()
    # the user message is already stored while the answer streams; the answer is not
    assert [r[0] for r in stored(app)] == ["user"]
    p.wait_for_selector("#messages .msg.assistant:not(.streaming):has-text('w39')")
    assert stored(app)[1][1] == " ".join(f"w{i}" for i in range(40))


@pytest.mark.parametrize(
    "plan, says", [("500", "HTTP 500"), ("401", "check the API key"), ("break", "mid-stream")]
)
def test_a_failed_call_keeps_the_user_message_and_what_arrived(
    app: AppPage, llm: LLMServer, plan: str, says: str
) -> None:
    """No answer: the user message stays and the error says what to do, in plain words. A
    stream that broke after some text: that text stays too, marked incomplete."""
    p = app.page
    llm.reset(plan)
    configure(app, llm.url)
    app.new_session()
    app.send("Are you there?")
    alert = p.locator("#messages .msg.system[role=alert]")
    assert says in alert.inner_text() and "saved" in alert.inner_text()
    assert "sk-local-test" not in alert.inner_text() and "{" not in alert.inner_text()
    assert p.locator("#messages .msg.user").count() == 1
    if plan == "break":
        assert p.locator("#messages .msg.assistant.incomplete").count() == 1
        assert [r[0] for r in stored(app)] == ["user", "assistant"]
        assert p.locator("#messages .msg.assistant.incomplete [data-action=continue]").count() == 1
    else:
        assert p.locator("#messages .msg.assistant").count() == 0
        # the notice is kept with the conversation (never for the model): it shows after a reload
        (user, notice) = stored(app)
        assert user == ["user", "Are you there?", None, None] and says in notice[1]
        p.reload()
        app.ready()
        p.click("#session-list .session:has-text('Are you there?')")
        p.wait_for_selector(f"#messages .msg.failed[role=alert]:has-text('{says}')")
        assert p.locator("#messages .msg.failed [data-action=retry]").count() == 1


def test_invalid_settings_are_refused_and_named(app: AppPage) -> None:
    p = app.page
    p.click(".tools [data-panel=settings]")
    p.fill("#set-base-url", "http://example.com/v1")
    p.fill("#set-model", "m")
    p.click("#settings-form button[type=submit]")
    p.wait_for_selector("#settings-errors li")
    assert "plain http" in p.locator("#settings-errors").inner_text()
    assert (
        app.py(f"""
import chatmem
mem = await chatmem.open({app.db!r})
await mem.store.kv_get("app:settings")""")
        is None
    )


def test_a_new_chat_recalls_what_another_conversation_said(app: AppPage, llm: LLMServer) -> None:
    """By default a turn may recall the character's other conversations: a new chat asked
    "what's my name and which city do I live in?" sends the model the earlier message that
    says so, marked with where it came from, and the Context panel names that conversation."""
    p = app.page
    llm.reset()
    configure(app, llm.url)
    app.new_session()
    app.send("My name is Ana and I live in Porto.")
    app.new_session()
    app.send("What's my name and which city do I live in?")
    body = llm.requests[-1]["body"]
    # what was learnt about the person comes in the live context; the message itself is recalled
    profile = [m for m in body["messages"] if "module:user-profile" in str(m.get("content"))]
    sent = [m for m in body["messages"] if "Porto" in str(m.get("content")) and m not in profile]
    assert sent and "From an earlier conversation" in str(sent[0]["content"]), body["messages"]
    p.click(".tools [data-panel=context]")
    p.wait_for_selector("#ctx-recalled")
    assert "My name is Ana and I live in Porto." in p.locator("#ctx-recalled").inner_text()
    assert "from “my name is ana" in p.locator("#ctx-recalled").inner_text().lower()
    # narrowed to the open conversation, nothing else is recalled
    p.click(".tools [data-panel=settings]")
    p.select_option("#set-scope", "session")
    p.click("#settings-form button[type=submit]")
    p.wait_for_selector("#settings-saved:has-text('Saved')")
    p.click("[data-action=close-panel]")
    app.send("And where do I live?")
    assert not any(
        "Porto" in str(m.get("content"))
        for m in llm.requests[-1]["body"]["messages"][:-1]
        if m.get("role") != "assistant" and "module:user-profile" not in str(m.get("content"))
    )


def test_offline_fallback_and_honest_context(browser: Any, site: str, llm: LLMServer) -> None:
    """A model configured but unreachable (the page offline, or nothing listening): the app
    answers from memory, says so, and offers "Send to the model"; once the model is back it
    answers the same message, and never receives the answer from memory as its own turn."""
    llm.reset()
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.set_default_timeout(60_000)
        app = AppPage(page, site, unique_name("fallback"))
        configure(app, "http://127.0.0.1:9/v1")  # nothing listens there
        app.new_session()
        app.send("Lisbon is lovely in May")
        page.wait_for_selector(".msg.fallback:has-text('could not be reached')")
        assert page.locator(".msg.assistant.offline").count() == 1
        ctx.set_offline(True)
        app.send("What do you remember about Lisbon?")
        page.wait_for_selector(".msg.fallback:has-text('You are offline')")
        shot(page, "offline-fallback")
        ctx.set_offline(False)
        configure(app, llm.url)
        page.locator(".msg.fallback [data-action=ask-model]").last.click()
        page.wait_for_function(
            "() => document.querySelectorAll('.msg.assistant:not(.offline):not(.streaming)').length >= 1"
        )
        sent = llm.requests[-1]["body"]["messages"]
        turns = [
            (m["role"], m["content"])
            for m in sent
            if isinstance(m.get("content"), str) and m["role"] != "system"
        ]
        assert turns == [
            ("user", "Lisbon is lovely in May"),
            ("user", "What do you remember about Lisbon?"),
        ], sent
        assert not any("Offline" in str(m.get("content")) for m in sent)
        assert sent[-1]["content"] == "What do you remember about Lisbon?"
        assert not app.errors, app.errors
    finally:
        ctx.close()


def test_stop_keeps_what_arrived_and_another_conversation_is_free(app: AppPage, llm: LLMServer) -> None:
    """Stop (the button, or Escape) ends a streaming reply and keeps what arrived, marked
    stopped, also after a reload; while one conversation's reply streams, another can be
    written to and answered."""
    p = app.page
    llm.reset("slow", "ok", "slow")
    configure(app, llm.url)
    app.new_session()
    p.fill("#composer-input", "Tell me a long story")
    p.press("#composer-input", "Enter")
    p.wait_for_function(
        "() => (document.querySelector('#messages .msg.streaming')?.innerText || '').includes('w2')"
    )
    assert p.locator("#send-btn").inner_text() == "Stop"
    # a second conversation meanwhile: its own reply is not blocked
    app.new_session()
    app.send("Quick question")
    assert "echo: Quick question" in p.locator("#messages .msg.assistant").last.inner_text()
    # back in the first, and stop it
    p.click("#session-list .session:has-text('Tell me a long story')")
    p.wait_for_selector("#send-btn:text-is('Stop')")
    p.click("#send-btn")
    p.wait_for_selector("#messages .msg.assistant.stopped")
    assert p.locator("#send-btn").inner_text() == "Send"
    shot(p, "stopped-reply")
    kept = p.locator("#messages .msg.assistant.stopped .body").inner_text()
    assert kept.startswith("w0 w1 w2") and "w39" not in kept
    # Escape stops as well
    p.fill("#composer-input", "Another long one")
    p.press("#composer-input", "Enter")
    p.wait_for_function(
        "() => (document.querySelector('#messages .msg.streaming')?.innerText || '').includes('w1')"
    )
    p.keyboard.press("Escape")
    p.wait_for_function("() => document.querySelectorAll('#messages .msg.assistant.stopped').length === 2")
    p.reload()
    app.ready()
    p.click("#session-list .session:has-text('Tell me a long story')")
    p.wait_for_function("() => document.querySelectorAll('#messages .msg.assistant.stopped').length === 2")


def test_a_429_with_retry_after_is_asked_again_by_itself(app: AppPage, llm: LLMServer) -> None:
    """The model answers 429 with Retry-After: 2: the reply says it waits, then asks once more
    and the answer arrives, with the user message sent once."""
    p = app.page
    llm.reset("429", "ok")
    configure(app, llm.url)
    app.new_session()
    p.fill("#composer-input", "Are you free now?")
    p.press("#composer-input", "Enter")
    p.wait_for_selector("#messages .msg.streaming:has-text('asking again in 2 s')")
    p.wait_for_selector("#messages .msg.assistant:not(.streaming):has-text('echo: Are you free now?')")
    assert p.locator("#messages .msg.system[role=alert]").count() == 0
    assert [r[0] for r in stored(app)] == ["user", "assistant"]
    chats = [r for r in llm.requests if r["path"].endswith("/chat/completions")]
    assert len(chats) == 2
    assert [m["content"] for m in chats[-1]["body"]["messages"] if m["role"] == "user"][
        -1
    ] == "Are you free now?"


def test_retry_after_a_reload_sends_each_user_message_once(app: AppPage, llm: LLMServer) -> None:
    """A failed turn, after a reload, still shows as failed with Retry; Retry answers it, the
    notice goes, and the model then gets each user message once, in order, and never the
    notice."""
    p = app.page
    llm.reset("500", "ok", "ok")
    configure(app, llm.url)
    app.new_session()
    app.send("Are you there?")
    p.wait_for_selector("#messages .msg.failed:has-text('HTTP 500')")
    p.reload()
    app.ready()
    p.click("#session-list .session:has-text('Are you there?')")
    p.wait_for_selector("#messages .msg.failed [data-action=retry]")
    shot(p, "failed-reply")
    p.click("#messages .msg.failed [data-action=retry]")
    p.wait_for_selector("#messages .msg.assistant:not(.streaming):has-text('echo: Are you there?')")
    assert p.locator("#messages .msg.failed").count() == 0
    shot(p, "failed-reply-retried")
    assert [r[:2] for r in stored(app)] == [["user", "Are you there?"], ["assistant", "echo: Are you there?"]]
    app.send("And now?")
    sent = [r for r in llm.requests if r["path"].endswith("/chat/completions")][-1]["body"]["messages"]
    said = [m["content"] for m in sent if m["role"] == "user" and isinstance(m["content"], str)]
    assert said == ["Are you there?", "And now?"]  # (the live context comes as parts)
    assert not any("HTTP 500" in json.dumps(m) for m in sent)


def test_regenerate_the_last_answer_and_edit_a_message(app: AppPage, llm: LLMServer) -> None:
    """Regenerate replaces the last answer with a new one; Edit sends a changed message
    instead of the old one, and the answers after it go."""
    p = app.page
    llm.reset("ok", "ok", "ok")
    configure(app, llm.url)
    app.new_session()
    app.send("First question")
    p.wait_for_selector("#messages .msg.assistant [data-action=regenerate]")
    assert p.locator("#messages .msg.user [data-action=regenerate]").count() == 0
    old = p.locator("#messages .msg.assistant").get_attribute("data-id")
    p.click("#messages .msg.assistant [data-action=regenerate]")
    p.wait_for_selector(f"#messages .msg.assistant:not(.streaming):not([data-id='{old}'])")
    assert p.locator("#messages .msg.assistant").count() == 1
    chats = [r for r in llm.requests if r["path"].endswith("/chat/completions")]
    assert len(chats) == 2 and not any(m["role"] == "assistant" for m in chats[1]["body"]["messages"])
    assert [r[:2] for r in stored(app)] == [["user", "First question"], ["assistant", "echo: First question"]]
    p.click("#messages .msg.user [data-action=edit]")
    p.fill("#messages .msg.user .edit-text", "A better question")
    p.click("#messages .msg.user [data-action=edit-send]")
    p.wait_for_selector("#messages .msg.assistant:not(.streaming):has-text('echo: A better question')")
    assert [r[:2] for r in stored(app)] == [
        ["user", "A better question"],
        ["assistant", "echo: A better question"],
    ]


def test_stop_while_a_429_waits_ends_the_wait(app: AppPage, llm: LLMServer) -> None:
    """Stop during the wait a 429 asked for: the waiting line goes, nothing more is asked,
    the message stays."""
    p = app.page
    llm.reset("429", "ok")
    configure(app, llm.url)
    app.new_session()
    p.fill("#composer-input", "Busy?")
    p.press("#composer-input", "Enter")
    p.wait_for_selector("#messages .msg.streaming:has-text('asking again in')")
    p.click("#send-btn")
    p.wait_for_selector("#send-btn:text-is('Send')")
    p.wait_for_function("() => !document.querySelector('#messages .msg.streaming')")
    assert [r[:2] for r in stored(app)] == [["user", "Busy?"]]
    assert len([r for r in llm.requests if r["path"].endswith("/chat/completions")]) == 1
