"""The offline responder: keywords without stop words, quotes with the
conversation's title, never the message being answered nor its own replies."""

from __future__ import annotations

import pytest

import chatmem
from chatmem.conversations.offline import OFFLINE_LABEL, OfflineResponder, keywords


def test_keywords_drop_stop_words_and_repeats() -> None:
    assert keywords("What did I say about the Lisbon trip in May? Lisbon!") == ["lisbon", "trip", "may"]
    assert keywords("what is it") == []


async def _turns(mem: chatmem.Memory) -> dict[str, str]:
    a = await mem.sessions.create(title="Trip plans")
    await mem.messages.append(a.session_id, "user", "I would love to see Lisbon in May")
    await mem.messages.append(a.session_id, "assistant", "Lisbon is lovely in spring")
    b = await mem.sessions.create(title="Cooking")
    await mem.messages.append(b.session_id, "user", "How long do I boil pasta?")
    h = mem.session(b.session_id)
    out = {}
    for key, text in (
        ("hit", "What about Lisbon?"),
        ("again", "And Lisbon once more?"),
        ("miss", "zeppelin"),
        ("empty", "what is it"),
    ):
        pieces: list[str] = []
        reply = await h.send(text, provider=OfflineResponder(mem), on_token=pieces.append)
        assert "".join(pieces) == reply.content and len(pieces) > 3
        assert reply.provider == "offline" and reply.model == "offline-memory"
        out[key] = reply.content
    return out


@pytest.mark.parametrize("persist", [None, "sqlite"])
async def test_replies_quote_earlier_messages_and_say_so(persist: str | None, tmp_path) -> None:
    path = str(tmp_path / "m.db") if persist else None
    async with await chatmem.open(persist=path) as mem:
        out = await _turns(mem)
    for reply in out.values():
        assert reply.startswith(OFFLINE_LABEL)
    hit = out["hit"]
    assert "“lisbon”" in hit
    assert "You, in “Trip plans”: I would love to see Lisbon in May" in hit
    assert "Assistant, in “Trip plans”: Lisbon is lovely in spring" in hit
    # not the message being answered, not unrelated messages
    assert "pasta" not in hit and "What about Lisbon" not in hit
    # the earlier offline reply is not quoted back (no quotes of quotes)
    again = out["again"]
    assert again.count(OFFLINE_LABEL) == 1 and "lovely in spring" in again
    assert "found nothing" in out["miss"] and "“zeppelin”" in out["miss"]
    assert "no words" in out["empty"]


async def test_without_a_query_index_it_scans_the_store() -> None:
    """CPython without duckdb: the same answers from a scan of the store."""

    class NoIndex(OfflineResponder):
        async def _search(self, words, current):  # type: ignore[no-untyped-def]
            raise chatmem.errors.UnsupportedEnvironment("no duckdb")

    async with await chatmem.open() as mem:
        a = await mem.sessions.create(title="Keys")
        await mem.messages.append(a.session_id, "user", "The spare key is under the blue flowerpot")
        b = await mem.sessions.create()
        reply = (
            await mem.session(b.session_id).send("Where is the spare key?", provider=NoIndex(mem))
        ).content
    assert (
        reply.startswith(OFFLINE_LABEL)
        and "You, in “Keys”: The spare key is under the blue flowerpot" in reply
    )
    assert "Where is the spare key" not in reply


async def test_answers_from_memory_are_never_sent_to_a_model_as_its_turns() -> None:
    """An answer from memory is stored marked origin "offline"; the window a model gets holds
    the user's messages and the model's own answers only, also for answers stored before the
    marker existed; once the model is back, Session.reply answers the same user message."""
    from llm_server import LLMServer

    llm = LLMServer()

    try:
        mem = await chatmem.open()
        s = await mem.sessions.create(title="Trip")
        h = mem.session(s.session_id)
        offline = await h.send("Remind me of the Lisbon plan", provider=OfflineResponder(mem))
        assert offline.metadata == {"origin": "offline"} and offline.provider == "offline"
        # an answer from memory stored before origins were marked: known by its provider
        await mem.messages.append(s.session_id, "assistant", "Offline — older answer", provider="offline")
        window = await mem.build_window(s.session_id, budget="gpt-4o")
        assert [m["role"] for m in window.messages] == ["user"]
        model = chatmem.OpenAICompatibleProvider(llm.url, "sk-test", "tiny-model")
        answer = await h.reply(provider=model)
        sent = llm.requests[-1]["body"]["messages"]
        assert [m["role"] for m in sent] == ["system", "user"]
        assert sent[-1]["content"] == "Remind me of the Lisbon plan"
        assert answer.provider != "offline" and not (answer.metadata or {}).get("origin")
        roles = [m.role for m in await mem.messages.list(s.session_id)]
        assert roles == ["user", "assistant", "assistant", "assistant"]
        await mem.close()
    finally:
        llm.close()
