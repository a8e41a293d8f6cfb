"""The offline fact extractor: what each kind of first-person statement teaches, what it
must never learn from (questions, conditions, wishes, reported speech, small talk, other
speakers), and the endings that invalidate a fact."""

from __future__ import annotations

import asyncio

import pytest

import chatmem
from chatmem.facts import OfflineFactExtractor
from chatmem.records.models import ChatMessage


def ops(text: str, role: str = "user", known: list[chatmem.Fact] | None = None) -> list[tuple[str, str, str]]:
    msg = ChatMessage("m1", "s1", 0, role, text, 0)  # type: ignore[arg-type]
    out = asyncio.run(OfflineFactExtractor().extract([msg], known or []))
    return [(o.op, o.key, o.value) for o in out]


@pytest.mark.parametrize(
    "text, want",
    [
        ("Hi! My name is Ana Sousa and I live in Lisbon.", [("name", "Ana Sousa"), ("home", "Lisbon")]),
        ("my name's rui", []),  # a name is written with a capital letter
        ("Please call me Annie.", [("preferred_name", "Annie")]),
        ("I go by Al these days.", [("preferred_name", "Al")]),
        ("I moved to Porto last year.", [("home", "Porto")]),
        ("We just moved to New York City", [("home", "New York City")]),
        ("I'm living in São Paulo now", [("home", "São Paulo")]),
        ("I work as a nurse at the city hospital.", [("job", "nurse")]),
        ("I've just started as an engineer.", [("job", "engineer")]),
        ("I work at Acme Corp now.", [("employer", "Acme Corp")]),
        ("I got a new job at Globex.", [("employer", "Globex")]),
        ("My birthday is on 3 May.", [("birthday", "3 May")]),
        ("My wife is called Sam.", [("partner", "Sam")]),
        ("I'm married to Jordan.", [("partner", "Jordan")]),
        ("I'm vegetarian.", [("diet", "vegetarian")]),
        ("I'm vegan now", [("diet", "vegan")]),
        ("My sister is called Marta.", [("family.sister", "Marta")]),
        ("My brother Tiago lives in Faro.", [("family.brother", "Tiago")]),
        ("I have a daughter named Lia.", [("family.daughter", "Lia")]),
        ("My mum's name is Rosa", [("family.mother", "Rosa")]),
        ("I'm allergic to peanuts and shellfish.", [("allergy", "peanuts"), ("allergy", "shellfish")]),
        (
            "I love hiking, swimming and chess.",
            [("likes", "hiking"), ("likes", "swimming"), ("likes", "chess")],
        ),
        ("I'm a big fan of jazz", [("likes", "jazz")]),
        ("I can't stand coriander.", [("dislikes", "coriander")]),
        ("I don't like horror films", [("dislikes", "horror films")]),
        ("We have a dog named Rex.", [("pet", "Rex")]),
        ("My cat is called Miso", [("pet", "Miso")]),
        ("I speak Portuguese and English.", [("language", "Portuguese"), ("language", "English")]),
        ("My goal is to run a marathon.", [("goal", "run a marathon")]),
        ("I'm training for the Lisbon half marathon", [("goal", "Lisbon half marathon")]),
    ],
)
def test_first_person_statements_teach_their_slot(text: str, want: list[tuple[str, str]]) -> None:
    assert ops(text) == [("add", k, v) for k, v in want]


@pytest.mark.parametrize(
    "text",
    [
        "Should I move to Paris?",
        "Do you think I should work as a chef",
        "If I lived in Paris, I'd be happy.",
        "I wish I lived in Rome.",
        "Maybe I'll move to Berlin.",
        "I'd love to visit Japan.",
        "I would love a dog named Rex.",
        "My friend says she lives in Berlin.",
        'She told me "I live in Oslo".',
        "Where do you live?",
        "What's my name?",
        "I love you.",
        "I like it.",
        "I like that idea!",
        "The weather is nice today.",
        "Thanks, that was helpful.",
        "I work at home.",
        "My sister is tired.",
        "lol ok",
        "I used to live in Madrid.",
        "I'm thinking about moving to Lyon.",
        "Planning a trip to Lisbon with my sister in May",
        "My brother Today was fun",
    ],
)
def test_questions_conditions_wishes_reports_and_small_talk_teach_nothing(text: str) -> None:
    assert ops(text) == []


@pytest.mark.parametrize("role", ["assistant", "system", "tool"])
def test_nothing_is_learnt_from_anyone_but_the_user(role: str) -> None:
    assert ops("My name is Ana and I live in Lisbon.", role) == []


@pytest.mark.parametrize(
    "text, want",
    [
        ("I don't live in Lisbon any more.", ("home", "Lisbon")),
        ("I no longer live in Lisbon", ("home", "Lisbon")),
        ("I moved out of Lisbon.", ("home", "Lisbon")),
        ("I quit my job at Acme Corp.", ("employer", "Acme Corp")),
        ("I left my job as a nurse", ("job", "nurse")),
        ("I'm no longer vegetarian.", ("diet", "vegetarian")),
        ("I'm not allergic to peanuts any more", ("allergy", "peanuts")),
        ("Our dog Rex died.", ("pet", "Rex")),
        ("I don't like chess any more.", ("likes", "chess")),
    ],
)
def test_endings_invalidate_what_they_name(text: str, want: tuple[str, str]) -> None:
    assert ops(text) == [("invalidate", *want)]


def test_a_break_up_ends_the_partner_known() -> None:
    sam = chatmem.Fact("f1", "local", None, "partner", "Sam", "Partner: Sam", "active", 0, None, 0, 0)
    assert ops("We broke up last month.", known=[sam]) == [("invalidate", "partner", "Sam")]


async def test_a_companion_learns_a_name_and_a_move_and_forgets_an_ending() -> None:
    """Through mem.facts.extract with the default extractor: the name, a home that a move
    supersedes (history kept), a pet that dies, and nothing from the assistant's lines."""

    mem = await chatmem.open()
    s = await mem.sessions.create(title="getting to know you")
    lines = [
        ("user", "Hi, my name is Ana."),
        ("assistant", "Nice to meet you, Ana! I live in the cloud."),
        ("user", "I live in Lisbon with my dog Rex."),
        ("user", "Should I move to Paris?"),
        ("user", "Big news: I moved to Porto!"),
        ("user", "Sadly our dog Rex died."),
    ]
    for role, text in lines:
        await mem.messages.append(s.session_id, role, text)
    report = await mem.facts.extract()
    current = {f.key: f.value for f in await mem.facts.list()}
    (home,) = await mem.facts.list(key="home")
    history = [f.value for f in await mem.facts.history(home.fact_id)]
    pets = await mem.facts.list(key="pet", status=None)
    assert current == {"name": "Ana", "home": "Porto"}
    assert history == ["Lisbon", "Porto"]
    assert report.processed == 5 and report.superseded == 1
    assert [(f.value, f.status) for f in pets] == [("Rex", "invalidated")]
