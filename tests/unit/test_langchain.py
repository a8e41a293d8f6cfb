"""LangChain: ChatmemChatMessageHistory with the real langchain-core (sync and async,
tool calls round-trip, RunnableWithMessageHistory)."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

import chatmem
from chatmem.integrations.langchain import ChatmemChatMessageHistory
from conftest import run

CONVERSATION = [
    SystemMessage(content="You are Airi."),
    HumanMessage(content="Weather in Lisbon?", id="h1"),
    AIMessage(
        content="",
        tool_calls=[{"name": "weather", "args": {"city": "Lisbon"}, "id": "call_1", "type": "tool_call"}],
        usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    ),
    ToolMessage(content="sunny, 24C", tool_call_id="call_1", name="weather"),
    AIMessage(content=[{"type": "text", "text": "Sunny and 24C."}], response_metadata={"model": "m"}),
]


async def test_async_round_trip_with_tool_calls(tmp_path: Path):
    """Messages added are the messages read back, tool calls and extras included, across a reopen."""
    db = str(tmp_path / "lc.db")

    async with await chatmem.open(persist=db) as mem:
        h = ChatmemChatMessageHistory(mem, "lc-1")
        assert await h.aget_messages() == []
        await h.aadd_messages(CONVERSATION)
    async with await chatmem.open(persist=db) as mem:
        h = ChatmemChatMessageHistory(mem, "lc-1")
        back = await h.aget_messages()
        stored = await mem.messages.list("lc-1", limit=None)
        window = await mem.build_context("lc-1", max_tokens=4_000)
        await h.aclear()
        cleared = await h.aget_messages()
        exists = await mem.sessions.exists("lc-1")
    assert back == CONVERSATION
    assert [m.role for m in stored] == ["system", "user", "assistant", "tool", "assistant"]
    assert stored[2].tool_calls[0]["function"] == {"name": "weather", "arguments": '{"city":"Lisbon"}'}
    assert stored[3].tool_call_id == "call_1"
    assert window[0] == {"role": "system", "content": "You are Airi."}
    assert cleared == [] and exists


def test_sync_methods_outside_a_loop():
    mem = run(chatmem.open())
    h = ChatmemChatMessageHistory(mem, "lc-sync")
    h.add_user_message("hi")
    h.add_ai_message("hello!")
    assert [(m.type, m.content) for m in h.messages] == [("human", "hi"), ("ai", "hello!")]
    h.clear()
    assert h.messages == []


async def test_sync_methods_inside_a_loop_say_to_use_the_async_ones():
    async with await chatmem.open() as mem:
        h = ChatmemChatMessageHistory(mem, "x")
        with pytest.raises(chatmem.errors.UnsupportedEnvironment, match="async methods"):
            h.add_user_message("hi")
        result = await h.aget_messages()
    assert result == []


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def chain(mem: chatmem.Memory, answers: list[str]) -> RunnableWithMessageHistory:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Be brief."), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    return RunnableWithMessageHistory(
        prompt | FakeListChatModel(responses=answers),
        lambda session_id: ChatmemChatMessageHistory(mem, session_id),
        input_messages_key="question",
        history_messages_key="history",
    )


async def test_runnable_with_message_history_async():
    async with await chatmem.open() as mem:
        r = chain(mem, ["Lisbon.", "In May."])
        cfg = {"configurable": {"session_id": "trip"}}
        a = await r.ainvoke({"question": "Where?"}, config=cfg)
        b = await r.ainvoke({"question": "When?"}, config=cfg)
        stored = [(m.role, m.text) for m in await mem.messages.list("trip", limit=None)]
    assert (a.content, b.content) == ("Lisbon.", "In May.")
    assert stored == [
        ("user", "Where?"),
        ("assistant", "Lisbon."),
        ("user", "When?"),
        ("assistant", "In May."),
    ]


def test_runnable_with_message_history_sync():
    mem = run(chatmem.open())
    r = chain(mem, ["One.", "Two."])
    cfg = {"configurable": {"session_id": "s"}}
    r.invoke({"question": "first"}, config=cfg)
    r.invoke({"question": "second"}, config=cfg)
    assert [m.content for m in ChatmemChatMessageHistory(mem, "s").messages] == [
        "first",
        "One.",
        "second",
        "Two.",
    ]
