"""The query index: engine protocol, tokenizer, schema rows, change events and rebuild."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatmem.embedding import HashingEmbedder
from chatmem.errors import DatabaseClosed, QueryError, ValidationError
from chatmem.index import DuckDBEngine, QueryIndex, SQLEngine, search
from chatmem.index.schema import TABLES, message_rows, row_to_message_record, session_row
from chatmem.index.sql_engine import columns
from chatmem.records.models import ChatMessage, SessionMeta
from chatmem.text.tokenize import norm_text, parse_query, phrase_pattern, tokens, words


def run(coro):
    return asyncio.run(coro)


# --------------------------------------------------------------------------- tokenizer


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Hello, World!", ["hello", "world"]),
        ("Don't STOP", ["dont", "stop"]),
        ("Café naïve Ångström", ["cafe", "naiv", "angstrom"]),
        ("painting painted paints", ["paint", "paint", "paint"]),
        ("машины автомобили", ["машин", "автомоб"]),
        ("Straße", ["strass"]),
        ("ＦＵＬＬ　ｗｉｄｔｈ １２３", ["full", "width", "123"]),
        ("v3.12 costs 1,000.50 $", ["v3", "12", "cost", "1000.50"]),
        ("snake_case-and/slash", ["snake", "case", "and", "slash"]),
        ("東京タワー", ["東京", "京タ", "タワ", "ワー", "ー"]),
        ("猫", ["猫"]),
        ("我的猫abc", ["我的", "的猫", "猫", "abc"]),
        ("안녕하세요", ["안녕", "녕하", "하세", "세요", "요"]),
        ("ｶﾀｶﾅ", ["カタ", "タカ", "カナ", "ナ"]),
        ("が", ["が"]),
        ("", []),
        ("!!! ...", []),
    ],
)
def test_tokens(text, expected):
    """Case, accents, NFKC, numbers, punctuation and CJK bigrams tokenise as documented."""
    assert tokens(text) == expected


def test_words_keep_cjk_runs_whole_for_phrases():
    """norm_text keeps CJK runs whole and fences words with spaces."""
    assert words("東京タワーabc") == ["東京タワー", "abc"]
    assert norm_text("New-York, NY") == " new york ny "
    assert phrase_pattern(["new", "york"]) == " new york "
    assert phrase_pattern(["京タ"]) == "京タ"


def test_parse_query_phrases_and_words():
    """Quoted phrases become required terms plus a phrase; bare words rank."""
    pq = parse_query('"New York" pizza "x" 京')
    assert pq.phrases == [["new", "york"]]
    assert [t.value for t in pq.required] == ["new", "york", "x"]
    assert [(t.value, t.prefix) for t in pq.terms] == [("pizza", False), ("京", True)]
    assert parse_query('"unclosed phrase here').phrases == [["unclosed", "phrase", "here"]]
    for bad in ["", "  ", '""', "!!!", None]:
        with pytest.raises(ValidationError):
            parse_query(bad)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_tokenizer_never_fails_and_is_idempotent_on_its_output(text):
    """Any text tokenises; tokens of the joined tokens of a non-CJK text are the same tokens."""
    toks = tokens(text)
    assert all(t and " " not in t for t in toks)
    ws = words(text)
    assert words(" ".join(ws)) == ws


# --------------------------------------------------------------------------- engine


async def test_duckdb_engine_is_an_sql_engine_and_binds_params():
    """DuckDBEngine satisfies the protocol; params are bound, never spliced."""

    e = DuckDBEngine()
    assert isinstance(e, SQLEngine)
    await e.execute("CREATE TABLE t (a VARCHAR, b BIGINT)")
    await e.executemany("INSERT INTO t VALUES (?, ?)", [("x'); DROP TABLE t; --", 1), (None, 2)])
    rows = await e.execute("SELECT * FROM t WHERE b >= ? ORDER BY b", [1])
    assert rows == [{"a": "x'); DROP TABLE t; --", "b": 1}, {"a": None, "b": 2}]
    assert await e.execute("CREATE TABLE u (a INT)") == []
    with pytest.raises(QueryError) as err:
        await e.execute("SELECT nope FROM t")
    assert err.value.__cause__ is not None
    await e.close()
    with pytest.raises(DatabaseClosed):
        await e.execute("SELECT 1")
    await e.close()  # twice is fine


@pytest.mark.parametrize("n", [3, 1000])
async def test_load_rows_round_trips_awkward_values(n):
    """The bulk path (VALUES for small batches, CSV for large) keeps quotes, newlines, NULLs and lists."""

    e = DuckDBEngine()
    await e.execute("CREATE TABLE t (a VARCHAR, b BIGINT, c VARCHAR[], d FLOAT[], e BOOLEAN)")
    base = [
        ('x,"y"\n\\N;\r', 1, ["a,b", 'c"', ""], [0.5, 1.25], True),
        (None, None, [], None, False),
        ("\\N", -3, None, [], None),
        ("東京 ünï", 2**40, ["\x1fodd"], [1.0], True),
    ]
    rows = (base * (n // len(base) + 1))[:n]
    await e.load_rows("t", ["a", "b", "c", "d", "e"], rows)
    got = await e.execute("SELECT * FROM t")
    assert len(got) == n
    assert [tuple(r.values()) for r in got[:3]] == [tuple(r) for r in rows[:3]]
    await e.close()


async def test_columns_answer_column_by_column():
    """``columns``: one list per column in select order, from an engine without
    ``execute_columns`` (built from its rows) and with one (taken as answered)."""

    class ByColumn:
        def __init__(self, engine):
            self.engine = engine

        async def execute(self, sql, params=None, **kw):
            raise AssertionError("columns must ask execute_columns")

        async def execute_columns(self, sql, params=None):
            rows = await self.engine.execute(sql, params)
            return [[r[c] for r in rows] for c in ("b", "a")] if rows else [[], []]

    e = DuckDBEngine()
    await e.execute("CREATE TABLE t (b BIGINT, a VARCHAR)")
    await e.load_rows("t", ["b", "a"], [(2, "x"), (1, None)])
    sql = "SELECT b, a FROM t WHERE b >= ? ORDER BY b"
    assert await columns(e, sql, [0]) == [[1, 2], [None, "x"]]
    assert await columns(ByColumn(e), sql, [0]) == [[1, 2], [None, "x"]]
    assert await columns(e, sql, [9]) == [] == await columns(ByColumn(e), sql, [9])
    await e.close()


# --------------------------------------------------------------------------- schema


def test_message_rows_copy_no_record_payload():
    """The index keeps a message's scalar fields and plain text, never its content,
    slices, tool results, categorization or metadata (the store has them)."""
    rec = ChatMessage(
        id="m1",
        session_id="s",
        seq=0,
        role="assistant",
        content=[{"type": "text", "text": "Hi 東京"}, {"type": "image_url", "image_url": {"url": "u"}}],
        created_at=5,
        slices=[{"type": "text", "text": "Hi"}],
        categorization={"speech": "hi"},
        metadata={"k": [1]},
        token_count=3,
    ).to_record()
    mrow, stage, toks = message_rows(rec)
    cols = [c for c, _ in TABLES["messages"]]
    row = dict(zip(cols, mrow))
    assert row["text"] == "Hi 東京" and row["token_count"] == 3
    assert not {"content", "slices", "tool_results", "categorization", "tool_calls", "metadata"} & set(cols)
    assert "image_url" not in repr(mrow) and "speech" not in repr(mrow)
    # a record made from the row alone: the scalar fields, the text as content
    back = row_to_message_record(row)
    assert back["content"] == "Hi 東京" and back["id"] == "m1" and back["tokenCount"] == 3
    assert back["metadata"] is None and back["slices"] is None
    # the staging row: docs columns but doc, then the terms joined by spaces
    assert stage == ("m1", "s", "assistant", 5, 3, "hi 東京 京") and toks == ["hi", "東京", "京"]
    srow = session_row(SessionMeta("s", "t", 1, 2, tags=["a"]).to_record())
    assert srow[0] == "s" and srow[8] == ["a"]
    # postings, terms and docs hold integers and the terms only: no text column
    assert [t for _, t in TABLES["postings"]] == ["INTEGER"] * 3
    # a posting holds no copy of its doc's length (BM25 reads docs.doc_len)
    assert [c for c, _ in TABLES["postings"]] == ["tid", "doc", "tf"]
    assert "norm_text" not in {c for c, _ in TABLES["docs"]}


# --------------------------------------------------------------------------- apply / rebuild


def _msg(i, sid="s", text=None):
    return {
        "id": f"m{i}",
        "sessionId": sid,
        "seq": i,
        "role": "user",
        "content": text or f"word{i} common",
        "createdAt": 100 + i,
        "tokenCount": 2,
    }


async def test_apply_validates_its_input():
    """Unknown kinds, empty session ids and non-list payloads are refused."""

    idx = QueryIndex(DuckDBEngine())
    with pytest.raises(ValidationError):
        await idx.apply("session-exploded", "s")
    with pytest.raises(ValidationError):
        await idx.apply("session-created", "", {})
    with pytest.raises(ValidationError):
        await idx.apply("messages-appended", "s", "not a list")
    assert (await idx.counts())["messages"] == 0
    await idx.close()


async def test_appended_payload_with_session_record_replaces_the_row():
    """messages-appended may carry the new session record; the index takes it as is."""

    idx = QueryIndex(DuckDBEngine())
    await idx.apply("session-created", "s", SessionMeta("s", "t", 1, 1).to_record())
    sess = SessionMeta("s", "t", 1, 999, message_count=2).to_record()
    await idx.apply("messages-appended", "s", {"messages": [_msg(0), _msg(1)], "session": sess})
    rows = await idx.sql("SELECT updated_at, message_count FROM sessions")
    assert rows == [{"updated_at": 999, "message_count": 2}]
    await idx.apply("session-cleared", "s", SessionMeta("s", "t", 1, 1234).to_record())
    rows = await idx.sql("SELECT updated_at, message_count FROM sessions")
    assert rows == [{"updated_at": 1234, "message_count": 0}]
    assert (await idx.counts())["postings"] == 0
    await idx.close()


async def test_compaction_keeps_answers_and_sorts_postings():
    """Past compact_after unsorted postings the index re-sorts itself; answers stay the same."""

    idx = QueryIndex(DuckDBEngine(), compact_after=10)
    await idx.apply("session-created", "s", SessionMeta("s", "t", 1, 1).to_record())
    before = None
    for i in range(6):
        await idx.apply("messages-appended", "s", [_msg(i)])
        if i == 4:
            before = [h.message.id for h in await search(idx, "common word3", limit=10)]
    assert idx.unsorted_postings < 10
    tids = [(r["tid"], r["doc"]) for r in await idx.sql("SELECT tid, doc FROM postings")]
    assert tids[: len(tids) - idx.unsorted_postings] == sorted(tids[: len(tids) - idx.unsorted_postings])
    after = [h.message.id for h in await search(idx, "common word3", limit=10)]
    assert after[0] == "m3" and set(before) < set(after)
    await idx.close()


async def test_rebuild_accepts_an_async_iterable_and_embeds_when_asked():
    """rebuild reads messages from an async generator in chunks; embed=True fills embeddings."""

    idx = QueryIndex(DuckDBEngine(), embedder=HashingEmbedder(32))

    async def gen():
        for i in range(25):
            yield _msg(i)

    await idx.rebuild([SessionMeta("s", "t", 1, 1, message_count=25).to_record()], gen(), embed=True)
    counts = await idx.counts()
    assert counts["messages"] == 25 and counts["embeddings"] == 25 and counts["docs"] == 25
    assert await idx.embed_missing(idx.embedder) == 0
    # with an embedder, appended messages get vectors at once
    await idx.apply("messages-appended", "s", [_msg(99, text="fresh")])
    assert (await idx.counts())["embeddings"] == 26
    await idx.close()


async def test_changing_the_model_re_embeds():
    """A second embedder (another model) gets its own vectors; the first stay."""

    idx = QueryIndex(DuckDBEngine())
    await idx.apply("session-created", "s", SessionMeta("s", "t", 1, 1).to_record())
    await idx.apply("messages-appended", "s", [_msg(0), _msg(1)])
    assert await idx.embed_missing(HashingEmbedder(32)) == 2
    assert await idx.embed_missing(HashingEmbedder(64)) == 2
    assert await idx.embed_missing(HashingEmbedder(64)) == 0
    rows = await idx.sql("SELECT model, count(*) AS n FROM embeddings GROUP BY model ORDER BY model")
    assert rows == [{"model": "hashing-v1-32", "n": 2}, {"model": "hashing-v1-64", "n": 2}]
    await idx.close()


@pytest.mark.parametrize("seed", range(4))
def test_ascii_words_take_the_fast_path_to_the_same_words(seed):
    """ASCII text (split by a plain regex, no step per word) gives exactly the words of the
    general path (a non-ASCII word in front forces it): apostrophes, numbers, underscores."""
    import random

    rng = random.Random(seed)
    alphabet = "aZq9 1,.'_-x\t"
    texts = ["Don't STOP at 1,000.50, 3.14 or 2,3!", "it's 'quoted' ok' x' 'y", "a.b x_y __init__ e-mail 9'9"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(3000)]
    for text in texts:
        assert words(text) == words("\u00e9 " + text)[1:], text
        assert tokens(text) == tokens("\u00e9 " + text)[1:], text


async def test_the_engine_tells_duckdb_that_a_missing_pandas_is_missing() -> None:
    """Without pandas installed, the ``duckdb`` package would search ``sys.path`` for it
    on every bound parameter; the engine records it as absent once."""
    import importlib.util
    import sys

    saved = sys.modules.pop("pandas", "unset")
    try:
        missing = importlib.util.find_spec("pandas") is None
        await DuckDBEngine().close()
        assert ("pandas" in sys.modules and sys.modules["pandas"] is None) == missing
    finally:
        sys.modules.pop("pandas", None)
        if saved != "unset":
            sys.modules["pandas"] = saved  # type: ignore[assignment]
