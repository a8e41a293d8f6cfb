"""chatmem.integrations.anthropic: the Messages API request for a session's window, and a
response stored as the assistant's message (text and tool use), bad input refused."""

from __future__ import annotations

import pytest

import chatmem
from chatmem.errors import ValidationError
from chatmem.integrations import anthropic


def test_the_provider_is_the_chat_turns() -> None:
    assert anthropic.AnthropicProvider is chatmem.AnthropicProvider


async def test_a_request_and_its_reply_round_trip() -> None:
    async with await chatmem.open() as mem:
        s = await mem.sessions.create(title="Trip")
        await mem.messages.append(s.session_id, "system", "You are a travel companion.")
        await mem.messages.append(s.session_id, "user", "Where should we go in May?")
        body = await anthropic.request_for(mem, s.session_id, model="claude-sonnet-4-5", max_tokens=300)
        assert body["model"] == "claude-sonnet-4-5" and body["max_tokens"] == 300
        assert body["system"] == "You are a travel companion."
        assert body["messages"][-1]["role"] == "user"
        assert "May" in str(body["messages"][-1]["content"])
        small = await anthropic.request_for(
            mem, s.session_id, model="m", max_tokens=100, context_tokens=400, system_prompt="Be brief."
        )
        assert small["system"] == "Be brief."

        reply = await anthropic.store_reply(
            mem,
            s.session_id,
            {
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [
                    {"type": "text", "text": "Lisbon. Let me check the weather."},
                    {"type": "tool_use", "id": "tu_1", "name": "weather", "input": {"city": "Lisbon"}},
                ],
            },
        )
        assert reply.content == "Lisbon. Let me check the weather."
        assert reply.provider == "anthropic" and reply.model == "claude-sonnet-4-5"
        assert reply.tool_calls and reply.tool_calls[0]["function"]["name"] == "weather"
        assert [m.role for m in await mem.messages.list(s.session_id)] == ["system", "user", "assistant"]


@pytest.mark.parametrize(
    "response",
    [{"role": "user", "content": []}, {"role": "assistant", "content": "text"}, {"role": "assistant"}, []],
)
async def test_what_is_not_an_answer_writes_nothing(response: object) -> None:
    async with await chatmem.open() as mem:
        s = await mem.sessions.create(title="Trip")
        with pytest.raises(ValidationError):
            await anthropic.store_reply(mem, s.session_id, response)  # type: ignore[arg-type]
        assert await mem.messages.count(s.session_id) == 0
