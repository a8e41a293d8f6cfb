"""Anthropic: the Messages API shape of a window, and AnthropicProvider streaming a turn
from a local server speaking Anthropic SSE, with the chat turn's failure semantics."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import chatmem
from chatmem import errors
from chatmem.chat.formats import to_anthropic
from llm_server import LLMServer

CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Lisbon"}'}}


@pytest.fixture(scope="module")
def llm() -> Iterator[LLMServer]:
    srv = LLMServer()
    yield srv
    srv.close()


async def test_anthropic_format_puts_system_apart_and_tool_blocks_in_turns():
    """format="anthropic": {"system", "messages"}; tool calls are tool_use, results tool_result in a user turn."""

    async with await chatmem.open() as mem:
        s = await mem.sessions.create()
        await mem.messages.append_many(
            s.session_id,
            [
                {"role": "system", "content": "You are Airi."},
                {"role": "user", "content": "Weather in Lisbon?"},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [CALL]},
                {"role": "tool", "content": "sunny, 24C", "tool_call_id": "call_1"},
                {"role": "assistant", "content": "Sunny and 24C."},
                {"role": "user", "content": "Thanks!"},
            ],
        )
        mem.modules.set("module:clock", {"t": 1})
        out = await mem.build_context(s.session_id, max_tokens=4_000, format="anthropic")
    assert out["system"] == "You are Airi."
    roles = [m["role"] for m in out["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert all(m["role"] != "system" for m in out["messages"])
    first_user = out["messages"][0]["content"]
    assert (
        first_user[0]["text"].startswith("Module module:clock:")
        and first_user[1]["text"] == "Weather in Lisbon?"
    )
    assert out["messages"][1]["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Lisbon"}},
    ]
    assert out["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny, 24C"}
    ]
    assert out["messages"][-1]["content"] == "Thanks!"


def test_summary_goes_into_system_and_images_become_image_blocks():
    out = to_anthropic(
        [
            {"role": "system", "content": "Prompt."},
            {"role": "system", "content": "Previous conversation summary: x"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            },
        ]
    )
    assert out["system"] == "Prompt.\n\nPrevious conversation summary: x"
    assert out["messages"][0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
    }


async def turn(
    llm: LLMServer, *plan: str, key: str = "sk-ant-test"
) -> tuple[Any, list[str], list[dict[str, Any]], list[dict[str, Any]]]:
    llm.reset(*plan)
    async with await chatmem.open() as mem:
        s = await mem.sessions.create()
        await mem.messages.append(s.session_id, "system", "You are Airi.")
        provider = chatmem.AnthropicProvider(key, "claude-test", base_url=llm.url.removesuffix("/v1"))
        pieces: list[str] = []
        try:
            reply: Any = await mem.session(s.session_id).send(
                "hello there", provider=provider, budget="claude-3.5", on_token=pieces.append
            )
        except errors.ProviderError as e:
            reply = e
        stored = [m.to_provider() for m in await mem.messages.list(s.session_id)]
    return reply, pieces, stored, list(llm.requests)


async def test_provider_streams_a_turn_and_stores_the_answer(llm: LLMServer):
    reply, pieces, stored, requests = await turn(llm)
    assert pieces == ["echo:", " hello", " there"]
    assert isinstance(reply, chatmem.ChatMessage) and reply.content == "echo: hello there"
    assert reply.provider == "anthropic" and reply.model == "claude-test"
    assert [m["role"] for m in stored] == ["system", "user", "assistant"]
    (req,) = requests
    assert req["path"] == "/v1/messages" and req["x-api-key"] == "sk-ant-test" and req["auth"] is None
    assert req["anthropic-version"] == "2023-06-01"
    body = req["body"]
    assert body["stream"] is True and body["system"] == "You are Airi." and body["max_tokens"] == 1024
    assert body["messages"] == [{"role": "user", "content": "hello there"}]


@pytest.mark.parametrize(
    ("plan", "error"),
    [
        ("401", errors.ProviderAuthError),
        ("404", errors.ProviderNotFound),
        ("429", errors.ProviderRateLimited),
        ("500", errors.ProviderServerError),
        ("break", errors.ProviderServerError),
        ("cut", errors.ProviderServerError),
    ],
)
async def test_failures_keep_the_user_message_and_only_what_arrived(llm: LLMServer, plan: str, error: type):
    """No answer: only the user message stays. A stream broken after some text: that text is
    stored, marked incomplete, and the error names it."""
    reply, pieces, stored, _ = await turn(llm, plan)
    assert isinstance(reply, error)
    if plan in ("break", "cut"):
        assert [m["role"] for m in stored] == ["system", "user", "assistant"]
        assert stored[-1]["content"] == "".join(pieces) and pieces
        assert reply.partial is not None and reply.partial.metadata == {"status": "incomplete"}
    else:
        assert [m["role"] for m in stored] == ["system", "user"]
    assert "sk-ant-test" not in str(reply)
    if plan == "429":
        assert reply.retry_after_ms == 2000


async def test_complete_returns_the_whole_text(llm: LLMServer):
    llm.reset()
    p = chatmem.AnthropicProvider("sk-secret", "claude-test", base_url=llm.url)
    text = await p.complete([{"role": "user", "content": "hi"}])
    assert text == "echo: hi" and json.loads(json.dumps(llm.requests[0]["body"]))["stream"] is False
    assert "sk-secret" not in repr(p)
