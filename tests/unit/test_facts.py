"""The rules of ``mem.facts.apply``: single- and multi-valued slots, supersession with
time windows, reinforcement, likes and dislikes, invalidation, review, scope, and the
operations that are refused while the rest applies."""

from __future__ import annotations

import json
from typing import Any

import pytest

import chatmem
from chatmem import FactOp
from chatmem.errors import FactNotFound, ValidationError


def add(key: str, value: str, *sources: str, text: str = "") -> FactOp:
    return FactOp("add", key, value, text or f"{key}: {value}", source_ids=sources)


TIMES = {f"m{i}": 1_000 * i for i in range(1, 20)}


async def fresh(**config: Any) -> chatmem.Memory:
    mem = await chatmem.open(clock=lambda: 1_000_000)
    if config:
        mem.facts.configure(**config)
    return mem


async def test_a_new_single_value_supersedes_the_old_at_the_time_it_was_said() -> None:
    mem = await fresh()
    r1 = await mem.facts.apply([add("home", "Lisbon", "m1")], times=TIMES)
    r2 = await mem.facts.apply([add("home", "Porto", "m5")], times=TIMES)
    facts = await mem.facts.list(key="home", status=None)
    (lisbon, porto) = facts
    at = [await mem.facts.list(key="home", at=t) for t in (500, 1_000, 4_999, 5_000, 9_000)]
    assert (r1.added, r2.added, r2.superseded) == (1, 1, 1)
    assert (lisbon.status, lisbon.valid_from, lisbon.valid_to, lisbon.superseded_by) == (
        "superseded",
        1_000,
        5_000,
        porto.fact_id,
    )
    assert (porto.status, porto.valid_from, porto.valid_to, porto.source_ids) == (
        "active",
        5_000,
        None,
        ("m5",),
    )
    assert [[f.value for f in fs] for fs in at] == [[], ["Lisbon"], ["Lisbon"], ["Porto"], ["Porto"]]


async def test_the_same_value_again_reinforces_and_never_duplicates() -> None:
    mem = await fresh()
    await mem.facts.apply([add("home", "Porto", "m1")], times=TIMES)
    report = await mem.facts.apply([add("home", " porto ", "m2"), add("likes", "Tea", "m3")], times=TIMES)
    again = await mem.facts.apply([add("likes", "tea", "m4")], times=TIMES)
    facts = await mem.facts.list(status=None)
    assert (report.reinforced, report.added, again.reinforced) == (1, 1, 1)
    assert [(f.key, f.value, f.source_ids) for f in facts] == [
        ("home", "Porto", ("m1", "m2")),
        ("likes", "Tea", ("m3", "m4")),
    ]


async def test_multi_valued_slots_keep_their_values_side_by_side() -> None:
    mem = await fresh()
    await mem.facts.apply(
        [
            add("family.sister", "Ana", "m1"),
            add("family.sister", "Marta", "m2"),
            add("pet", "Miso", "m3"),
        ],
        times=TIMES,
    )
    result = [f.value for f in await mem.facts.list()]
    assert result == ["Ana", "Marta", "Miso"]


async def test_likes_and_dislikes_end_each_other_and_invalidate_ends_a_fact() -> None:
    mem = await fresh()
    await mem.facts.apply([add("likes", "coriander", "m1"), add("pet", "Rex", "m2")], times=TIMES)
    flip = await mem.facts.apply([add("dislikes", "Coriander", "m3")], times=TIMES)
    (rex,) = await mem.facts.list(key="pet")
    gone = await mem.facts.apply([FactOp("invalidate", "pet", "Rex", source_ids=("m4",))], times=TIMES)
    facts = await mem.facts.list(status=None)
    assert (flip.added, flip.invalidated, gone.invalidated) == (1, 1, 1)
    states = {(f.key, f.value): (f.status, f.valid_to) for f in facts}
    assert states == {
        ("likes", "coriander"): ("invalidated", 3_000),
        ("pet", "Rex"): ("invalidated", 4_000),
        ("dislikes", "Coriander"): ("active", None),
    }


async def test_an_older_conversation_read_late_never_displaces_a_newer_value() -> None:
    """Importing history out of order: "I live in Faro" said before "I moved to Porto" goes
    into the history, Porto stays current (no stale fact)."""

    mem = await fresh()
    await mem.facts.apply([add("home", "Porto", "m9")], times=TIMES)
    report = await mem.facts.apply([add("home", "Faro", "m2")], times=TIMES)
    (porto,) = await mem.facts.list(key="home")
    history = await mem.facts.history(porto.fact_id)
    then = await mem.facts.list(key="home", at=2_500)
    assert porto.value == "Porto" and report.added == 1 and report.superseded == 0
    assert [(f.value, f.status, f.valid_to) for f in history] == [
        ("Faro", "superseded", 9_000),
        ("Porto", "active", None),
    ]
    assert [f.value for f in then] == ["Faro"]


async def test_update_and_invalidate_by_id_and_refused_operations_leave_the_rest() -> None:
    mem = await fresh()
    await mem.facts.apply([add("job", "baker", "m1")], times=TIMES)
    (job,) = await mem.facts.list(key="job")
    report = await mem.facts.apply(
        [
            FactOp(
                "update",
                "job",
                "pastry chef",
                "Works as a pastry chef",
                fact_id=job.fact_id,
                source_ids=("m2",),
            ),
            FactOp("invalidate", "job", "x", fact_id="no-such-fact"),
            add("home", "Porto", "not-a-source"),
            add("Bad Key", "x", "m3"),
            add("goal", "", "m3"),
            add("goal", "run a marathon", "m3"),
        ],
        times=TIMES,
    )
    facts = await mem.facts.list(status=None)
    assert (report.added, report.superseded) == (2, 1)
    assert len(report.errors) == 4 and all(isinstance(e, ValidationError) for e in report.errors)
    assert [(f.key, f.value, f.status) for f in facts] == [
        ("job", "baker", "superseded"),
        ("job", "pastry chef", "active"),
        ("goal", "run a marathon", "active"),
    ]


async def test_review_keeps_learnt_facts_pending_until_approved_or_rejected() -> None:
    mem = await fresh()
    await mem.facts.apply([add("home", "Lisbon", "m1")], times=TIMES)
    mem.facts.configure(review=True)
    report = await mem.facts.apply([add("home", "Porto", "m3"), add("pet", "Rex", "m4")], times=TIMES)
    shown = [f.value for f in await mem.facts.list()]
    pending = await mem.facts.list(status="pending")
    porto = await mem.facts.approve(next(f.fact_id for f in pending if f.value == "Porto"))
    await mem.facts.reject(next(f.fact_id for f in pending if f.value == "Rex"))
    with pytest.raises(ValidationError):
        await mem.facts.approve(porto.fact_id)
    with pytest.raises(FactNotFound):
        await mem.facts.reject("no-such-fact")
    facts = await mem.facts.list(status=None)
    assert report.pending == 2 and report.added == 0 and shown == ["Lisbon"]
    assert porto.status == "active" and porto.valid_from == 3_000
    assert [(f.value, f.status, f.valid_to) for f in facts] == [
        ("Lisbon", "superseded", 3_000),
        ("Porto", "active", None),
    ]


async def test_facts_are_scoped_per_user_and_per_character_when_asked() -> None:
    mem = await fresh(share_across_characters=False)
    await mem.facts.apply([add("home", "Porto", "m1")], user_id="ana", character_id="airi", times=TIMES)
    await mem.facts.apply([add("home", "Faro", "m2")], user_id="ana", character_id="coach", times=TIMES)
    await mem.facts.apply([add("home", "Braga", "m3")], user_id="rui", character_id="airi", times=TIMES)
    mem.facts.configure(share_across_characters=True)
    await mem.facts.apply([add("pet", "Rex", "m4")], user_id="ana", character_id="airi", times=TIMES)
    result = (
        [f.value for f in await mem.facts.list(user_id="ana", character_id="airi")],
        [f.value for f in await mem.facts.list(user_id="ana", character_id="coach")],
        [f.value for f in await mem.facts.list(user_id="rui")],
    )
    assert result == (["Porto", "Rex"], ["Faro", "Rex"], ["Braga"])


async def test_configure_refuses_what_is_not_a_switch() -> None:
    mem = await fresh()
    with pytest.raises(ValidationError):
        mem.facts.configure(review="yes")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- extraction


class Scripted:
    """A stand-in extractor (pure logic): "I live in X" proposes home X; it records what
    it was given, and fails while ``fail`` is set."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []
        self.fail: Exception | None = None
        self.answer: Any = None

    async def extract(self, messages: list[chatmem.ChatMessage], known: list[chatmem.Fact]) -> list[FactOp]:
        self.seen.append([m.text for m in messages])
        if self.fail is not None:
            raise self.fail
        if self.answer is not None:
            return self.answer  # type: ignore[no-any-return]
        out = []
        for m in messages:
            if m.text.startswith("I live in "):
                city = m.text.removeprefix("I live in ").rstrip(".")
                out.append(FactOp("add", "home", city, f"Lives in {city}", source_ids=(m.id,)))
        return out


async def chat(mem: chatmem.Memory, *lines: tuple[str, str]) -> str:
    s = await mem.sessions.create(title="talk")
    await mem.messages.append_many(s.session_id, [{"role": r, "content": t} for r, t in lines])
    return s.session_id


async def test_extract_reads_each_user_message_once_and_keeps_where_a_fact_came_from() -> None:
    mem = await chatmem.open()
    ex = Scripted()
    mem.facts.configure(extractor=ex)
    sid = await chat(
        mem,
        ("system", "I live in Nowhere."),
        ("user", "I live in Lisbon."),
        ("assistant", "I live in the cloud."),
    )
    first = await mem.facts.extract()
    again = await mem.facts.extract(sid)
    await mem.messages.append(sid, "user", "I live in Porto.")
    third = await mem.facts.extract()
    (home,) = await mem.facts.list(key="home")
    seen = ex.seen
    sources = await mem.facts.sources(home.fact_id)
    assert seen == [["I live in Lisbon."], ["I live in Porto."]], "user messages only, each once"
    assert (first.added, first.processed, again.processed, third.superseded) == (1, 1, 0, 1)
    assert home.value == "Porto" and home.origin == "extracted"
    assert [m.text for m in sources] == ["I live in Porto."]


async def test_a_failing_extractor_writes_nothing_and_leaves_the_messages_for_the_next_run() -> None:
    mem = await chatmem.open()
    ex = Scripted()
    mem.facts.configure(extractor=ex)
    await chat(mem, ("user", "I live in Lisbon."))
    ex.fail = RuntimeError("model down")
    failed = await mem.facts.extract()
    ex.fail, ex.answer = None, "not a list"
    junk = await mem.facts.extract()
    ex.answer = None
    after = await mem.facts.extract()
    values = [f.value for f in await mem.facts.list()]
    assert failed.processed == 0 and isinstance(failed.errors[0], RuntimeError)
    assert junk.processed == 0 and isinstance(junk.errors[0], ValidationError)
    assert after.processed == 1 and after.added == 1 and values == ["Lisbon"]


async def test_what_the_user_deleted_or_rejected_never_comes_back_from_the_same_messages() -> None:
    mem = await chatmem.open()
    mem.facts.configure(extractor=Scripted())
    sid = await chat(mem, ("user", "I live in Lisbon."))
    await mem.facts.extract()
    (lisbon,) = await mem.facts.list()
    await mem.facts.delete(lisbon.fact_id)
    again = await mem.facts.extract(reprocess=True)
    mem.facts.configure(review=True)
    await mem.messages.append(sid, "user", "I live in Faro.")
    await mem.facts.extract()
    (faro,) = await mem.facts.list(status="pending")
    await mem.facts.reject(faro.fact_id)
    redo = await mem.facts.extract(reprocess=True)
    mem.facts.configure(review=False)
    await mem.messages.append(sid, "user", "I live in Lisbon.")  # said again: learnt again
    fresh = await mem.facts.extract()
    facts = [(f.value, f.status) for f in await mem.facts.list(status=None)]
    assert (again.processed, again.added) == (1, 0)
    assert (redo.processed, redo.added, redo.pending) == (2, 0, 0)
    assert fresh.added == 1 and facts == [("Lisbon", "active")]


async def test_extract_needs_an_extractor_and_a_known_session() -> None:
    mem = await chatmem.open()
    assert isinstance(mem.facts.extractor, chatmem.OfflineFactExtractor), "the offline one by default"
    with pytest.raises(ValidationError):
        mem.facts.configure(extractor=object())  # type: ignore[arg-type]
    mem.facts.configure(extractor=Scripted())
    with pytest.raises(chatmem.errors.SessionNotFound):
        await mem.facts.extract("no-such-session")


async def test_the_watermark_survives_reopening(tmp_path: Any) -> None:
    path = str(tmp_path / "facts.db")

    mem = await chatmem.open(persist=path)
    mem.facts.configure(extractor=Scripted())
    await chat(mem, ("user", "I live in Lisbon."))
    first = await mem.facts.extract()
    await mem.close()
    mem = await chatmem.open(persist=path)
    ex = Scripted()
    mem.facts.configure(extractor=ex)
    second = await mem.facts.extract()
    facts = [f.value for f in await mem.facts.list()]
    await mem.close()
    result = first.processed, second.processed, ex.seen, facts
    assert result == (1, 0, [], ["Lisbon"])


# ---------------------------------------------------------------------------- forgetting


async def test_deleting_what_a_fact_was_learnt_from_forgets_it_but_pruning_does_not() -> None:
    """Deleting a session, some messages or clearing one forgets the learnt facts whose
    every source went; a fact with a source elsewhere keeps that one; what the user stated
    stays; retention prunes history and keeps the facts."""

    mem = await chatmem.open()
    mem.facts.configure(extractor=Scripted())
    a = await chat(mem, ("user", "I live in Lisbon."))
    b = await chat(mem, ("user", "I live in Lisbon."), ("user", "I live in Porto."))
    c = await chat(mem, ("user", "I live in Faro."))
    await mem.facts.extract()
    stated = await mem.facts.add("Has a sister called Ana", key="family.sister", value="Ana")
    by_value = {f.value: f for f in await mem.facts.list(status=None)}
    steps = []
    await mem.sessions.delete(a)  # Lisbon was also said in b: it keeps that source
    by_value = {f.value: f for f in await mem.facts.list(status=None)}
    steps.append((sorted(by_value), len(by_value["Lisbon"].source_ids)))
    (porto_msg,) = [m for m in await mem.messages.list(b, limit=None) if "Porto" in m.text]
    await mem.sessions.delete_messages(b, [porto_msg.id])
    steps.append(sorted(f.value for f in await mem.facts.list(status=None)))
    await mem.sessions.clear(b)
    steps.append(sorted(f.value for f in await mem.facts.list(status=None)))
    # retention: an archived, expired session is pruned; what it taught stays
    await mem.sessions.archive(c)
    policy = chatmem.RetentionPolicy(max_age=1, delete_archived=True)
    report = await mem.retention.apply(policy, now=mem.clock() + 10 * 86_400_000)
    (faro,) = [f for f in await mem.facts.list(status=None) if f.value == "Faro"]
    deleted = report.deleted
    sources = await mem.facts.sources(faro.fact_id)
    stated = await mem.facts.get(stated.fact_id)
    assert steps[0] == (["Ana", "Faro", "Lisbon", "Porto"], 1)
    assert steps[1] == ["Ana", "Faro", "Lisbon"]
    assert steps[2] == ["Ana", "Faro"]
    assert len(deleted) == 1 and faro.source_ids and sources == [], (
        "pruned: the fact stays, its source is gone"
    )
    assert stated.status == "active"


async def test_a_fact_said_many_times_keeps_its_first_and_newest_sources() -> None:
    from chatmem.facts.rules import MAX_SOURCES

    mem = await fresh()
    times = {f"s{i}": i for i in range(200)}
    for i in range(200):
        await mem.facts.apply([add("likes", "tea", f"s{i}")], times=times)
    (tea,) = await mem.facts.list()
    assert len(tea.source_ids) == MAX_SOURCES and tea.source_ids[0] == "s0" and tea.source_ids[-1] == "s199"


# ---------------------------------------------------------------------------- into the context


async def test_the_window_carries_the_users_facts_best_first_within_their_budget() -> None:
    """The active facts of the session's user known to its character go into the
    module:user-profile entry (beside a profile provider's settings): pinned first, then
    by relevance to the newest message; within facts_budget; facts=False leaves them out."""

    mem = await fresh()
    mem.context.register(chatmem.UserProfileProvider(lambda: {"timezone": "Europe/Lisbon"}))
    s = await mem.sessions.create(title="chat", character_id="airi")
    await mem.messages.append(s.session_id, "user", "Any idea what I could cook for my sister tonight?")
    await mem.facts.add("Lives in Porto", key="home", value="Porto")
    await mem.facts.add("Is allergic to peanuts", key="allergy", value="peanuts", importance=0.9)
    await mem.facts.add("Has a sister called Marta who loves to cook", key="family.sister", value="Marta")
    await mem.facts.add("Speaks Portuguese", key="language", value="Portuguese", pinned=True)
    await mem.facts.add("Works as a pilot", key="job", value="pilot", character_id="coach")
    await mem.facts.add("Lives in Faro", key="home", value="Faro", user_id="someone else")
    w = await mem.build_window(s.session_id, max_tokens=4_000)
    small = await mem.build_window(s.session_id, max_tokens=4_000, facts_budget=12)
    none = await mem.build_window(s.session_id, max_tokens=4_000, facts=False)
    texts = [f["text"] for f in w.facts]
    assert texts[0] == "Speaks Portuguese", "pinned first"
    assert texts[1] == "Has a sister called Marta who loves to cook", "then the one the message is about"
    assert set(texts) == {
        "Speaks Portuguese",
        "Has a sister called Marta who loves to cook",
        "Lives in Porto",
        "Is allergic to peanuts",
    }
    assert set(w.facts[1]["parts"]) == {"relevance", "importance", "recency", "reinforced"}
    context = next(m for m in w.messages if "module:user-profile" in json.dumps(m))
    body = json.dumps(context, ensure_ascii=False)
    assert "Europe/Lisbon" in body and "Marta" in body and "pilot" not in body and "Faro" not in body
    assert len(small.facts) < len(w.facts) and small.facts[0]["text"] == "Speaks Portuguese"
    assert none.facts == [] and "Marta" not in json.dumps(none.messages)


def test_among_a_thousand_facts_the_one_asked_about_comes_first() -> None:
    """Ranking 1,000 active facts finds the one the message names (``bench --facts``
    measures what choosing among them costs a window)."""
    from chatmem.facts.rank import choose, rank

    now = 1_000_000
    facts = [
        chatmem.Fact(
            f"f{i}",
            "local",
            None,
            "likes",
            f"thing {i}",
            f"Likes thing number {i}",
            "active",
            0,
            None,
            0,
            now - i * 1000,
        )
        for i in range(1_000)
    ]
    chosen = choose(
        rank([f.to_record() for f in facts], "which thing number 7 do I like?", now),
        300,
        lambda s: len(s.split()) + 1,
    )
    assert (
        chosen[0]["text"] == "Likes thing number 7" and sum(len(c["text"].split()) + 2 for c in chosen) <= 300
    )


# ---------------------------------------------------------------------------- in the background


async def test_auto_learns_after_appends_without_delaying_them_and_settled_waits() -> None:
    mem = await chatmem.open()
    mem.facts.configure(auto=True, debounce=0.05)
    s = await mem.sessions.create(title="auto")
    await mem.messages.append(s.session_id, "user", "My name is Ana.")
    right_after = await mem.facts.list()
    await mem.messages.append(s.session_id, "assistant", "Hi Ana! I live in Lisbon.")
    await mem.messages.append_many(s.session_id, [{"role": "user", "content": "I live in Porto."}])
    await mem.facts.settled()
    learnt = {f.key: f.value for f in await mem.facts.list()}
    report = mem.facts.last_report
    mem.facts.configure(auto=False)
    await mem.messages.append(s.session_id, "user", "I'm vegan.")
    await mem.facts.settled()
    off = {f.key for f in await mem.facts.list()}
    await mem.close()
    assert right_after == [], "the append did not wait for learning"
    assert learnt == {"name": "Ana", "home": "Porto"} and report is not None and not report.errors
    assert "diet" not in off


async def test_an_import_is_not_learnt_from_unasked() -> None:
    """Learning in the background follows what the user writes, not a whole imported
    history: that is read when asked, conversation by conversation."""

    src = await chatmem.open()
    s = await src.sessions.create(title="old chats")
    await src.messages.append(s.session_id, "user", "My name is Ana and I live in Faro.")
    export = await src.export()
    mem = await chatmem.open()
    mem.facts.configure(auto=True, debounce=0)
    report = await mem.import_sessions(export)
    await mem.facts.settled()
    before = await mem.facts.list()
    learnt = [await mem.facts.extract(sid) for sid in report.session_ids]
    facts = {f.key: f.value for f in await mem.facts.list()}
    assert before == [] and [r.added for r in learnt] == [2]
    assert facts == {"name": "Ana", "home": "Faro"}


async def test_a_background_failure_is_kept_not_raised() -> None:
    class Broken:
        async def extract(self, messages: Any, known: Any) -> list[FactOp]:
            raise RuntimeError("no model")

    mem = await chatmem.open()
    mem.facts.configure(auto=True, debounce=0, extractor=Broken())
    s = await mem.sessions.create(title="auto")
    await mem.messages.append(s.session_id, "user", "My name is Ana.")
    await mem.facts.settled()
    report = mem.facts.last_report
    await mem.close()
    assert report is not None and isinstance(report.errors[0], RuntimeError)


# ---------------------------------------------------------------------------- search


async def test_search_finds_facts_by_their_words_and_their_meaning_with_scores() -> None:
    mem = await chatmem.open(embedder=chatmem.HashingEmbedder())
    await mem.facts.add("Lives in Porto", key="home", value="Porto")
    await mem.facts.add("Is allergic to peanuts", key="allergy", value="peanuts")
    await mem.facts.add("Has a sister called Marta", key="family.sister", value="Marta")
    await mem.facts.add("Allergic to shellfish", key="allergy", value="shellfish", user_id="someone else")
    words = await mem.facts.search("what am I allergic to?")
    mine = await mem.facts.search("allergic", user_id="local")
    plural = await mem.facts.search("sisters")
    near = await mem.facts.search("sisterly calling")
    with pytest.raises(ValidationError):
        await mem.facts.search("")
    assert words[0].fact.value in ("peanuts", "shellfish") and words[0].keyword > 0 and words[0].score > 0
    assert {h.fact.value for h in words} >= {"peanuts", "shellfish"} and "Porto" not in {
        h.fact.value for h in words
    }
    assert [h.fact.value for h in mine] == ["peanuts"]
    assert plural[0].fact.value == "Marta" and plural[0].keyword == 1.0, "a plural finds the singular"
    assert near and near[0].fact.value == "Marta" and near[0].keyword == 0 and near[0].semantic > 0.35


async def test_the_offline_responder_answers_from_what_it_learnt() -> None:
    mem = await chatmem.open()
    s = await mem.sessions.create(title="first chat")
    await mem.messages.append(s.session_id, "user", "Hi, my name is Ana and I live in Porto.")
    await mem.facts.extract()
    other = await mem.sessions.create(title="new chat")
    name = await mem.session(other.session_id).send("What's my name?", provider=chatmem.OfflineResponder(mem))
    home = await mem.session(other.session_id).send(
        "Where do I live?", provider=chatmem.OfflineResponder(mem)
    )
    name, home = name.text, home.text
    assert "- Is called Ana (you said so in “first chat”)" in name and "- Lives in Porto" not in name
    assert "- Lives in Porto" in home
