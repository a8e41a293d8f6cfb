"""Summarizers: the LLM prompt as in the original, incremental folding, the offline extractive one."""

from __future__ import annotations

from typing import Any, AsyncIterator

import pytest

from chatmem.context.summaries import (
    SUMMARY_PREFIX,
    ChatProvider,
    ExtractiveSummarizer,
    LLMSummarizer,
    Summarizer,
    build_summary_prompt,
    is_summary_message,
    summary_text,
)
from chatmem.errors import ChatmemError, ValidationError
from chatmem.records.models import ChatMessage


def msg(i: int, role: str, content: Any, **kw: Any) -> ChatMessage:
    return ChatMessage(id=f"m{i}", session_id="s", seq=i, role=role, content=content, created_at=i, **kw)  # type: ignore[arg-type]


class FakeProvider:
    """Records calls; answers with a canned text."""

    name = "fake"

    def __init__(self, answer: str = " They talked about cats. "):
        self.answer = answer
        self.calls: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []

    async def complete(self, messages, *, model=None, **kw):
        self.calls.append((messages, {"model": model, **kw}))
        return self.answer

    async def stream(self, messages, *, model=None, **kw) -> AsyncIterator[str]:
        yield self.answer


def test_protocols_are_satisfied_by_the_implementations():
    """The fake provider is a ChatProvider; both summarizers are Summarizers."""
    p = FakeProvider()
    assert isinstance(p, ChatProvider)
    assert isinstance(LLMSummarizer(p), Summarizer) and isinstance(ExtractiveSummarizer(), Summarizer)


async def test_llm_summarizer_sends_the_original_prompt():
    """The prompt is 'Summarize this conversation concisely:' + 'role: content' lines, one user message."""
    p = FakeProvider()
    msgs = [msg(0, "user", "I have two cats."), msg(1, "assistant", [{"type": "text", "text": "Nice!"}])]
    out = await LLMSummarizer(p, model="small-model", temperature=0).summarize(msgs)
    assert out == "They talked about cats."
    ((sent, opts),) = p.calls
    assert sent == [
        {
            "role": "user",
            "content": "Summarize this conversation concisely:\nuser: I have two cats.\nassistant: Nice!",
        }
    ]
    assert opts == {"model": "small-model", "temperature": 0}


async def test_llm_summarizer_is_incremental():
    """The previous summary is folded in; only the new messages are sent."""
    p = FakeProvider()
    await LLMSummarizer(p).summarize([msg(5, "user", "Also a dog.")], previous_summary="User has two cats.")
    ((sent, opts),) = p.calls
    assert sent[0]["content"] == (
        "Summarize this conversation concisely:\n" + SUMMARY_PREFIX + "User has two cats.\nuser: Also a dog."
    )
    assert opts["model"] == "gpt-4o-mini"


async def test_llm_summarizer_with_nothing_new_returns_previous_without_a_call():
    """No messages: the previous summary stands and the model is not called."""
    p = FakeProvider()
    assert (await LLMSummarizer(p).summarize([], previous_summary="old")) == "old"
    assert p.calls == []


async def test_llm_summarizer_refuses_an_empty_answer():
    """An empty model answer is an error, not an empty summary that would erase history."""
    with pytest.raises(ChatmemError):
        await LLMSummarizer(FakeProvider("   ")).summarize([msg(0, "user", "hi")])


def test_llm_summarizer_needs_a_provider():
    """A provider without complete() is refused up front."""
    with pytest.raises(ValidationError):
        LLMSummarizer(object())  # type: ignore[arg-type]


CHAT = [
    msg(0, "user", "Hi there!"),
    msg(1, "assistant", "Hello! How can I help?"),
    msg(2, "user", "My sister Alice lives in Lyon. Alice works as a baker in Lyon since 2019."),
    msg(3, "assistant", "Lyon is a lovely city for a baker. Alice must be busy."),
    msg(4, "user", "ok"),
    msg(5, "user", "Remind me: Alice's bakery opens at 6 in Lyon."),
]


async def test_extractive_keeps_informative_sentences_in_order():
    """The extractive summary keeps the content-heavy sentences, in their original order, and drops chatter."""
    out = await ExtractiveSummarizer(max_chars=160).summarize(CHAT)
    lines = out.splitlines()
    assert len(out) <= 160
    assert any("Alice" in ln and "Lyon" in ln for ln in lines)
    assert not any(ln in ("user: ok", "user: Hi there!") for ln in lines)
    positions = [next(i for i, m in enumerate(CHAT) if ln.split(": ", 1)[1] in m.text) for ln in lines]
    assert positions == sorted(positions)
    assert all(ln.startswith(("user: ", "assistant: ")) for ln in lines)


@pytest.mark.parametrize("max_chars", [20, 50, 120, 400, 2000])
def test_extractive_is_bounded(max_chars):
    """The summary never exceeds max_chars, whatever the input size."""
    many = [msg(i, "user", f"Fact number {i} is about topic {i % 7} and item {i * 3}.") for i in range(300)]
    out = ExtractiveSummarizer(max_chars=max_chars).summarize_sync(
        many, previous_summary="user: earlier fact " * 50
    )
    assert 0 < len(out) <= max_chars


def test_extractive_folds_in_the_previous_summary():
    """Lines of the previous summary stay candidates, and come first."""
    prev = "user: My sister Alice lives in Lyon."
    out = ExtractiveSummarizer(max_chars=300).summarize_sync(
        [msg(9, "user", "Alice visited Lyon's market with Bob.")], prev
    )
    assert out.splitlines()[0] == prev
    assert "Bob" in out


def test_extractive_is_deterministic_and_skips_stored_summaries():
    """Same input, same output; stored summary messages are not re-summarized as text."""
    stored = msg(7, "system", SUMMARY_PREFIX + "secret old summary", metadata={"summary": True})
    a = ExtractiveSummarizer().summarize_sync(CHAT + [stored])
    assert a == ExtractiveSummarizer().summarize_sync(CHAT + [stored])
    assert "secret" not in a


def test_extractive_with_nothing_informative_keeps_previous():
    """Only stop words: the previous summary is returned (bounded)."""
    prev = "hi hello, thanks ok " * 3
    assert ExtractiveSummarizer(max_chars=20).summarize_sync([msg(0, "user", "ok ok")], prev) == prev[:20]
    assert ExtractiveSummarizer().summarize_sync([msg(0, "user", "ok ok")]) == ""


def test_summary_message_helpers():
    """is_summary_message reads the metadata marker; summary_text strips the prefix."""
    stored = msg(1, "system", SUMMARY_PREFIX + "abc", metadata={"summary": True})
    assert is_summary_message(stored) and is_summary_message(stored.to_record())
    assert not is_summary_message(msg(2, "system", "You are nice."))
    assert summary_text(stored) == "abc"
    assert build_summary_prompt([msg(0, "tool", "42")]) == "Summarize this conversation concisely:\ntool: 42"


def test_public_names_exist():
    """Every name in chatmem.context.summaries.__all__ is defined (the export list cannot rot)."""
    import chatmem.context.summaries as mod

    assert mod.__all__ and all(hasattr(mod, name) for name in mod.__all__)
