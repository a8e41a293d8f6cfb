"""``LLMFactExtractor`` against the local OpenAI-compatible server with scripted replies:
good JSON, JSON in a code fence, a reply that is not the object asked for, a provider
failure, and operations that name an unknown fact or a message outside the batch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import chatmem
from chatmem.errors import ProviderError, ValidationError
from llm_server import LLMServer


@pytest.fixture(scope="module")
def llm() -> Iterator[LLMServer]:
    srv = LLMServer()
    yield srv
    srv.close()


def say(ops: list[dict[str, Any]], fence: bool = False) -> str:
    text = json.dumps({"operations": ops})
    return "say:" + (f"```json\n{text}\n```" if fence else text)


async def setup(llm: LLMServer, *lines: str) -> tuple[chatmem.Memory, str, list[str]]:
    mem = await chatmem.open()
    provider = chatmem.OpenAICompatibleProvider(llm.url, "sk-test", "tiny-model")
    mem.facts.configure(extractor=chatmem.LLMFactExtractor(provider))
    s = await mem.sessions.create(title="llm")
    ids = [(await mem.messages.append(s.session_id, "user", t)).id for t in lines]
    await mem.messages.append(s.session_id, "assistant", "Noted.")
    return mem, s.session_id, ids


async def test_good_json_and_fenced_json_are_applied_and_the_model_sees_what_it_needs(llm: LLMServer) -> None:
    mem, sid, (m1,) = await setup(llm, "I live in Lisbon and I love chess.")
    llm.reset(
        say(
            [
                {
                    "op": "add",
                    "key": "home",
                    "value": "Lisbon",
                    "text": "Lives in Lisbon",
                    "source_ids": [m1],
                },
                {
                    "op": "add",
                    "key": "likes",
                    "value": "chess",
                    "text": "Likes chess",
                    "source_ids": [m1],
                    "importance": 0.4,
                },
            ]
        )
    )
    first = await mem.facts.extract()
    (home,) = await mem.facts.list(key="home")
    m2 = (await mem.messages.append(sid, "user", "I moved to Porto.")).id
    llm.reset(
        say(
            [
                {
                    "op": "update",
                    "key": "home",
                    "value": "Porto",
                    "text": "Lives in Porto",
                    "fact_id": home.fact_id,
                    "source_ids": [m2],
                }
            ],
            fence=True,
        )
    )
    second = await mem.facts.extract()
    body = llm.requests[-1]["body"]
    facts = {f.key: f.value for f in await mem.facts.list()}
    assert (first.added, second.superseded, second.added) == (2, 1, 1)
    assert facts == {"home": "Porto", "likes": "chess"}
    prompt = json.loads(body["messages"][1]["content"])
    assert [t["text"] for t in prompt["new_user_messages"]] == ["I moved to Porto."], "new user turns only"
    assert {f["fact_id"] for f in prompt["known_facts"]} >= {home.fact_id}
    assert body["model"] == "tiny-model" and not body.get("stream")


@pytest.mark.parametrize("plan", ["say:Sure! You live in Lisbon.", 'say:{"ops": []}', "say:[1, 2]", "500"])
async def test_a_reply_that_is_not_the_object_or_a_failure_writes_nothing_and_retries_later(
    llm: LLMServer, plan: str
) -> None:
    mem, _, (m1,) = await setup(llm, "I live in Lisbon.")
    llm.reset(plan)
    failed = await mem.facts.extract()
    facts = await mem.facts.list(status=None)
    llm.reset(
        say(
            [
                {
                    "op": "add",
                    "key": "home",
                    "value": "Lisbon",
                    "text": "Lives in Lisbon",
                    "source_ids": [m1],
                }
            ]
        )
    )
    later = await mem.facts.extract()
    assert failed.processed == 0 and facts == [] and isinstance(failed.errors[0], ProviderError)
    assert later.processed == 1 and later.added == 1


async def test_operations_naming_unknown_facts_or_other_messages_are_dropped_and_reported(
    llm: LLMServer,
) -> None:
    mem, _, (m1,) = await setup(llm, "I'm allergic to peanuts.")
    llm.reset(
        say(
            [
                {
                    "op": "invalidate",
                    "key": "home",
                    "value": "Faro",
                    "fact_id": "no-such-fact",
                    "source_ids": [m1],
                },
                {
                    "op": "add",
                    "key": "home",
                    "value": "Faro",
                    "text": "Lives in Faro",
                    "source_ids": ["not-in-batch"],
                },
                {"op": "add", "key": "Bad Key", "value": "x", "source_ids": [m1]},
                {"op": "add", "key": "pet", "value": {"name": "Rex"}, "source_ids": [m1]},
                {"op": "add", "key": "goal", "value": "x", "source_ids": "m1"},
                "not an object",
                {
                    "op": "add",
                    "key": "allergy",
                    "value": "peanuts",
                    "text": "Allergic to peanuts",
                    "source_ids": [m1],
                },
            ]
        )
    )
    report = await mem.facts.extract()
    facts = [(f.key, f.value) for f in await mem.facts.list()]
    assert facts == [("allergy", "peanuts")] and report.added == 1 and report.processed == 1
    assert len(report.errors) == 6 and all(isinstance(e, ValidationError) for e in report.errors)


def test_the_extractor_needs_a_provider_that_completes() -> None:
    with pytest.raises(ValidationError):
        chatmem.LLMFactExtractor(object())  # type: ignore[arg-type]
