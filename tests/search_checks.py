"""The search checks, written once and run on any engine.

Each ``check_*`` is ``async def check_x(index)`` taking a fresh, empty
``QueryIndex`` (DuckDB on CPython in ``tests/unit/test_search.py``; DuckDB-Wasm
in the browser tests). No pytest here: plain ``assert`` and ``expect_raises``,
so the same table runs inside Pyodide. ``CHECKS`` lists them all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from chatmem.embedding import HashingEmbedder
from chatmem.errors import ReadOnlySQLError, ValidationError
from chatmem.index import RetrievalConfig, retrieve, search
from chatmem.index.retrieve import HybridWeights

T0 = 1_700_000_000_000
DAY = 86_400_000


async def expect_raises(exc: type[BaseException], coro: Awaitable[Any]) -> BaseException:
    try:
        await coro
    except exc as e:
        return e
    raise AssertionError(f"expected {exc.__name__}")


def session(sid: str, character: str = "alice", created: int = T0, **kw: Any) -> dict[str, Any]:
    rec = {
        "sessionId": sid,
        "title": f"title {sid}",
        "createdAt": created,
        "updatedAt": created,
        "userId": "local",
        "characterId": character,
        "pinned": False,
        "archived": False,
        "tags": [],
        "parentId": None,
        "forkIndex": None,
        "forkReason": None,
        "messageCount": 0,
    }
    rec.update(kw)
    return rec


def message(mid: str, sid: str, seq: int, text: Any, created: int, role: str = "user") -> dict[str, Any]:
    return {
        "id": mid,
        "sessionId": sid,
        "seq": seq,
        "role": role,
        "content": text,
        "createdAt": created,
        "provider": None,
        "model": None,
        "slices": None,
        "tool_results": None,
        "categorization": None,
        "toolCalls": None,
        "toolCallId": None,
        "name": None,
        "metadata": None,
        "tokenCount": 5,
    }


CORPUS: list[tuple[str, str, str, str, int]] = [
    # (id, session, role, text, created_at offset in days)
    ("a1", "s1", "user", "How do I configure the python asyncio event loop?", 0),
    ("a2", "s1", "assistant", "Use asyncio.run to start the event loop in python.", 1),
    ("a3", "s1", "user", "The weather is nice today, the sun is out.", 2),
    ("b1", "s2", "user", "I love New York pizza more than anything.", 3),
    ("b2", "s2", "assistant", "York is new to me, but pizza is great.", 4),
    ("b3", "s2", "user", "The the the the common words only here.", 5),
    ("c1", "s3", "user", "東京タワーに行きました。とても高かったです。", 6),
    ("c2", "s3", "assistant", "안녕하세요, 반갑습니다", 7),
    ("c3", "s3", "user", "Un café à Paris, s'il vous plaît. Straße!", 8),
    ("c4", "s3", "tool", "ＰＹＴＨＯＮ version 3.12 installed, 1,000 packages", 9),
]


async def seed(index: Any) -> None:
    """Three sessions (alice: s1, s3; bob: s2) and the ``CORPUS`` messages, through ``apply``."""
    await index.apply("session-created", "s1", session("s1", "alice"))
    await index.apply("session-created", "s2", session("s2", "bob"))
    await index.apply("session-created", "s3", session("s3", "alice"))
    by_session: dict[str, list[dict[str, Any]]] = {}
    for mid, sid, role, text, day in CORPUS:
        recs = by_session.setdefault(sid, [])
        recs.append(message(mid, sid, len(recs), text, T0 + day * DAY, role))
    for sid, recs in by_session.items():
        await index.apply("messages-appended", sid, recs)


def ids(hits: list[Any]) -> list[str]:
    return [h.message.id for h in hits]


# --------------------------------------------------------------------------- keyword


async def check_more_matching_terms_rank_higher(index: Any) -> None:
    """A message holding more of the query's words ranks above one holding fewer."""
    await seed(index)
    hits = await search(index, "python asyncio loop configure", limit=10)
    assert ids(hits)[0] == "a1", ids(hits)
    assert set(ids(hits)) >= {"a1", "a2"}
    assert hits[0].score > hits[1].score > 0
    assert hits[0].breakdown["keyword"] == hits[0].score


async def check_rarer_terms_rank_higher(index: Any) -> None:
    """A rare query word weighs more than a common one (idf)."""
    await index.apply("session-created", "s", session("s"))
    recs = [message(f"c{i}", "s", i, f"common filler text number {i}", T0 + i) for i in range(8)]
    recs.append(message("rare", "s", 8, "zeppelin filler text", T0 + 100))
    recs.append(message("com", "s", 9, "common filler text", T0 + 100))
    await index.apply("messages-appended", "s", recs)
    hits = await search(index, "common zeppelin", limit=3)
    assert ids(hits)[0] == "rare", ids(hits)


async def check_ties_broken_by_recency(index: Any) -> None:
    """Equal scores: the newer message first."""
    await index.apply("session-created", "s", session("s"))
    await index.apply(
        "messages-appended",
        "s",
        [
            message("old", "s", 0, "identical words here", T0),
            message("new", "s", 1, "identical words here", T0 + 5),
            message("mid", "s", 2, "identical words here", T0 + 2),
        ],
    )
    hits = await search(index, "identical words", limit=5)
    assert ids(hits) == ["new", "mid", "old"], ids(hits)
    assert hits[0].score == hits[1].score == hits[2].score


async def check_full_ties_cut_by_id(index: Any) -> None:
    """Equal scores and times: message id decides, also where the limit cuts a tie."""
    await index.apply("session-created", "s", session("s"))
    await index.apply(
        "messages-appended",
        "s",
        [message(f"t{i}", "s", i, "same words", T0) for i in (3, 0, 4, 1, 2)]
        + [message("best", "s", 5, "same same words", T0 - 5)],
    )
    assert ids(await search(index, "same", limit=3)) == ["best", "t4", "t3"]
    assert ids(await search(index, "same", limit=2)) == ["best", "t4"]
    assert ids(await search(index, "words same", limit=6)) == ["best", "t4", "t3", "t2", "t1", "t0"]
    assert ids(await search(index, "same", limit=None)) == ["best", "t4", "t3", "t2", "t1", "t0"]
    assert ids(await search(index, "same", limit=1)) == ["best"]


async def check_limit_and_threshold(index: Any) -> None:
    """``limit`` caps the hits; ``threshold`` drops scores below it."""
    await seed(index)
    assert len(await search(index, "python pizza the", limit=2)) == 2
    everything = await search(index, "python pizza the", limit=None)
    assert len(everything) >= 5
    cut = everything[1].score
    kept = await search(index, "python pizza the", limit=None, threshold=cut)
    assert kept and all(h.score >= cut for h in kept)
    assert len(kept) < len(everything)
    await expect_raises(ValidationError, search(index, "x", limit=0))


async def check_phrase_must_match_exactly(index: Any) -> None:
    """A quoted phrase matches only the words in that order, adjacent."""
    await seed(index)
    assert set(ids(await search(index, "new york", limit=10))) == {"b1", "b2"}
    assert ids(await search(index, '"new york"', limit=10)) == ["b1"]
    assert ids(await search(index, '"NEW-YORK" pizza', limit=10)) == ["b1"]
    assert ids(await search(index, '"york new"', limit=10)) == []
    assert ids(await search(index, '"event loop" python', limit=10)) == ["a2", "a1"] or set(
        ids(await search(index, '"event loop" python', limit=10))
    ) == {"a1", "a2"}
    # a phrase word must be a whole word: "york" is not "yorkshire"
    await index.apply("messages-appended", "s2", [message("b9", "s2", 9, "new yorkshire pudding", T0)])
    assert "b9" not in ids(await search(index, '"new york"', limit=10))


async def check_unicode_normalisation(index: Any) -> None:
    """Case, accents, NFKC (full-width), ß and numbers are matched sensibly."""
    await seed(index)
    assert ids(await search(index, "CAFE", limit=3)) == ["c3"]
    assert ids(await search(index, "paris café", limit=3))[0] == "c3"
    assert ids(await search(index, "strasse", limit=3)) == ["c3"]
    assert ids(await search(index, "python", limit=5))[0] in {"c4", "a1", "a2"}
    assert "c4" in ids(await search(index, "python", limit=5))  # full-width ＰＹＴＨＯＮ
    assert ids(await search(index, "3.12", limit=3)) == ["c4"]
    assert ids(await search(index, "1000", limit=3)) == ["c4"]
    assert ids(await search(index, "plait", limit=3)) == ["c3"]  # plaît


async def check_cjk(index: Any) -> None:
    """Han/Kana/Hangul: bigrams, a single character, phrases inside a run."""
    await seed(index)
    assert ids(await search(index, "東京", limit=3)) == ["c1"]
    assert ids(await search(index, "タワー", limit=3)) == ["c1"]
    assert ids(await search(index, "京", limit=3)) == ["c1"]
    assert ids(await search(index, "高", limit=3)) == ["c1"]
    assert ids(await search(index, '"京タ"', limit=3)) == ["c1"]
    assert ids(await search(index, '"東京タワー"', limit=3)) == ["c1"]
    assert ids(await search(index, '"タワー東京"', limit=3)) == []
    assert ids(await search(index, "안녕", limit=3)) == ["c2"]
    assert ids(await search(index, "大阪", limit=3)) == []


async def check_empty_query_is_an_error(index: Any) -> None:
    """Blank or wordless queries raise ``ValidationError`` in every mode."""
    await seed(index)
    for q in ["", "   ", "\n\t"]:
        for mode in ("keyword", "semantic", "hybrid", "substring"):
            await expect_raises(ValidationError, search(index, q, mode=mode))
    await expect_raises(ValidationError, search(index, "?!...", mode="keyword"))
    await expect_raises(ValidationError, search(index, None, mode="keyword"))  # type: ignore[arg-type]
    await expect_raises(ValidationError, search(index, "x", mode="fuzzy"))


# --------------------------------------------------------------------------- filters


async def check_filter_session_ids(index: Any) -> None:
    """``session_ids`` keeps only those sessions; an empty list matches nothing."""
    await seed(index)
    assert set(ids(await search(index, "the python pizza", limit=20, session_ids=["s2"]))) <= {
        "b1",
        "b2",
        "b3",
    }
    assert ids(await search(index, "pizza", limit=20, session_ids=["s1"])) == []
    assert ids(await search(index, "pizza", limit=20, session_ids=[])) == []
    await expect_raises(ValidationError, search(index, "pizza", session_ids="s1"))


async def check_filter_character_ids(index: Any) -> None:
    """``character_ids`` keeps sessions of those characters."""
    await seed(index)
    hits = await search(index, "the", limit=20, character_ids=["alice"])
    assert hits and {h.session_id for h in hits} <= {"s1", "s3"}
    hits = await search(index, "the", limit=20, character_ids=["bob"])
    assert {h.session_id for h in hits} == {"s2"}
    assert await search(index, "the", character_ids=["nobody"]) == []


async def check_filter_roles(index: Any) -> None:
    """``roles`` keeps those roles; an unknown role is an error."""
    await seed(index)
    hits = await search(index, "python", limit=20, roles=["assistant"])
    assert ids(hits) == ["a2"]
    hits = await search(index, "python", limit=20, roles=["user", "tool"])
    assert set(ids(hits)) == {"a1", "c4"}
    await expect_raises(ValidationError, search(index, "python", roles=["wizard"]))


async def check_filter_date_range_edges(index: Any) -> None:
    """``date_range`` includes both ends; open ends with None; start > end is an error."""
    await seed(index)

    def d(n: int) -> int:
        return T0 + n * DAY

    q = "python asyncio event loop"
    assert set(ids(await search(index, q, limit=10, date_range=(d(0), d(1))))) == {"a1", "a2"}
    assert ids(await search(index, q, limit=10, date_range=(d(1), d(1)))) == ["a2"]
    assert ids(await search(index, q, limit=10, date_range=(d(0) + 1, d(1) - 1))) == []
    assert ids(await search(index, q, limit=10, date_range=(None, d(0)))) == ["a1"]
    assert set(ids(await search(index, q, limit=10, date_range=(d(1), None)))) == {"a2", "c4"}
    await expect_raises(ValidationError, search(index, q, date_range=(d(2), d(1))))
    await expect_raises(ValidationError, search(index, q, date_range=(d(1),)))  # type: ignore[arg-type]


async def check_filters_combined(index: Any) -> None:
    """All filters at once intersect."""
    await seed(index)
    hits = await search(
        index,
        "the python pizza new",
        limit=20,
        session_ids=["s1", "s2"],
        character_ids=["bob"],
        roles=["user"],
        date_range=(T0 + 3 * DAY, T0 + 5 * DAY),
    )
    assert set(ids(hits)) == {"b1", "b3"}, ids(hits)
    for mode in ("semantic", "hybrid", "substring"):
        hits = await search(
            index,
            "pizza",
            mode=mode,
            limit=20,
            session_ids=["s2"],
            roles=["assistant"],
            date_range=(T0 + 4 * DAY, T0 + 4 * DAY),
        )
        assert ids(hits) == ["b2"], (mode, ids(hits))


# --------------------------------------------------------------------------- safety


async def check_injection_through_search_string(index: Any) -> None:
    """Quotes, semicolons and SQL in the query or filters are data, never SQL."""
    await seed(index)
    await search(index, "warm up the vectors", mode="semantic")
    before = await index.counts()
    for q in ["'; DROP TABLE messages; --", '" OR 1=1 --', "pizza') OR ('1'='1", "\\'; DELETE FROM docs"]:
        for mode in ("keyword", "substring", "semantic", "hybrid"):
            try:
                await search(index, q, mode=mode, limit=50)
            except ValidationError:
                pass
    assert await search(index, "pizza", session_ids=["s2' OR '1'='1"]) == []
    assert await search(index, "pizza", character_ids=["x') OR TRUE --"]) == []
    assert ids(await search(index, "drop table", mode="substring")) == []
    assert await index.counts() == before


async def check_injection_through_sql_params(index: Any) -> None:
    """``sql(query, params)`` binds params as values."""
    await seed(index)
    rows = await index.sql("SELECT count(*) AS n FROM messages WHERE session_id = ?", ["s1' OR '1'='1"])
    assert rows == [{"n": 0}]
    rows = await index.sql("SELECT count(*) AS n FROM messages WHERE session_id = ?", ["s1"])
    assert rows == [{"n": 3}]
    await expect_raises(ValidationError, index.sql("SELECT ?", [["a list"]]))


async def check_sql_rejects_writes_and_index_is_unharmed(index: Any) -> None:
    """INSERT, DROP, ATTACH, COPY, INSTALL, LOAD and stacked statements are refused."""
    await seed(index)
    before = await index.counts()
    found = ids(await search(index, "pizza", limit=5))
    for bad in [
        "INSERT INTO messages (id) VALUES ('x')",
        "DROP TABLE messages",
        "ATTACH ':memory:' AS other",
        "COPY messages TO 'out.csv'",
        "INSTALL fts",
        "LOAD fts",
        "SELECT 1; DROP TABLE postings",
        "select * from sessions; delete from sessions",
        "UPDATE sessions SET title = 'x'",
        "DELETE FROM docs",
        "CREATE TABLE t AS SELECT 1",
        "PRAGMA database_list",
        "SET threads = 1",
        "WITH x AS (SELECT 1) INSERT INTO docs SELECT * FROM x",
    ]:
        err = await expect_raises(ReadOnlySQLError, index.sql(bad))
        assert str(err)
    assert await index.counts() == before
    assert ids(await search(index, "pizza", limit=5)) == found
    rows = await index.sql("SELECT title FROM sessions WHERE title LIKE '%;%' OR title = 'drop; table'")
    assert rows == []


# Hostile text built from the pieces that make a guard and DuckDB disagree: a read, what
# stands before a literal or comment opener (a name goes on through ``_``, ``$`` or a
# non-ASCII character), the opener, a line end (DuckDB ends ``--`` at \n and \r only), a
# separator, a write and a closer. Random pieces alone did not find such a hole.
_READS = ["SELECT 1", "WITH a AS (SELECT 1) SELECT * FROM a"]
_BEFORE = ["", " ", "a_", "a$", "x1", "é", "€", "1"]
_OPENERS = ["--", "/*", "'", "E'", "e'", "E'\\'", "$$", "$t$", '"']
_LINE_ENDS = ["\n", "\r", "\r\n", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", ""]
_SEPARATORS = [";", " ; ", ""]
_WRITES = ["DROP TABLE t", "DELETE FROM t", "CREATE TABLE u (a INT)"]
_CLOSERS = ["", " */", "'", "$$", "$t$", '"', " WITH b_$t$ AS (SELECT 1) SELECT 1", " --"]


def hostile_sql(
    reads: list[str] = _READS,
    separators: list[str] = _SEPARATORS,
    writes: list[str] = _WRITES,
    closers: list[str] = _CLOSERS,
) -> list[str]:
    """Every combination of the pieces above: honest reads, broken text and walk-arounds."""
    import itertools

    return [
        f"{read} {before}{opener}{end}{sep}{write}{closer}"
        for read, before, opener, end, sep, write, closer in itertools.product(
            reads, _BEFORE, _OPENERS, _LINE_ENDS, separators, writes, closers
        )
    ]


async def check_sql_hostile_text_changes_nothing(index: Any) -> None:
    """Comment, quote and line-end tricks around a write, through ``index.sql``: each is
    refused or answers a read; afterwards every table holds what it held."""
    await seed(index)
    before = await index.counts()
    writes = ["DROP TABLE messages", "DELETE FROM postings"]
    answered = 0
    closers = ["", " --", " WITH b_$t$ AS (SELECT 1) SELECT 1"]
    for sql in hostile_sql(reads=["SELECT 1"], separators=[";"], writes=writes, closers=closers):
        try:
            await index.sql(sql)
            answered += 1
        except ValidationError:  # ReadOnlySQLError
            pass
        except Exception as e:  # DuckDB cannot parse what the guard let through
            assert type(e).__name__ == "QueryError", f"{sql!r}: {e!r}"
    assert answered  # honest reads among them still answer
    assert await index.counts() == before


async def check_sql_second_wall_refuses_what_the_guard_missed(index: Any) -> None:
    """Behind the text guard, the engine counts a user's statement with DuckDB's own parser
    and runs it in a read-only transaction: a write or a second statement handed straight
    to ``execute_read_only`` is refused and changes nothing; a read still answers."""
    await seed(index)
    before = await index.counts()
    for bad in [
        "DROP TABLE messages",
        "DELETE FROM postings",
        "CREATE TABLE t AS SELECT 1",
        "INSERT INTO sessions (session_id) VALUES ('x')",
        "SELECT 1; DROP TABLE docs",
        "SELECT 1 --\r; DELETE FROM messages",
    ]:
        err = await expect_raises(ReadOnlySQLError, index.engine.execute_read_only(bad, []))
        assert str(err)
    assert await index.counts() == before
    rows = await index.engine.execute_read_only(
        "SELECT count(*) AS n FROM messages WHERE session_id = ?", ["s2"]
    )
    assert rows == [{"n": 3}]
    # a comment ends at a carriage return for DuckDB: so it does for the guard
    for bad in [
        "SELECT 1 --\r; DROP TABLE messages",
        "SELECT 1 --\r\nDELETE FROM messages",
        "WITH a_$t$ AS (SELECT 1) SELECT 1; DROP TABLE messages; WITH b_$t$ AS (SELECT 1) SELECT 1",
    ]:
        await expect_raises(ReadOnlySQLError, index.sql(bad))
    assert await index.counts() == before
    # the engine is usable after every refusal: no transaction was left open
    assert await index.sql("SELECT count(*) AS n FROM sessions") == [{"n": 3}]


async def check_sql_analytics(index: Any) -> None:
    """The documented tables answer everyday questions."""
    await seed(index)
    rows = await index.sql(
        "SELECT s.character_id, count(*) AS n, sum(m.token_count) AS tokens FROM messages m "
        "JOIN sessions s USING (session_id) GROUP BY ALL ORDER BY n DESC"
    )
    assert rows == [
        {"character_id": "alice", "n": 7, "tokens": 35},
        {"character_id": "bob", "n": 3, "tokens": 15},
    ]
    rows = await index.sql("SELECT session_id, message_count FROM sessions ORDER BY session_id")
    assert [r["message_count"] for r in rows] == [3, 3, 4]
    rows = await index.sql(
        "SELECT strftime(make_timestamp(created_at * 1000), '%Y-%m-%d') AS day, count(*) AS n "
        "FROM messages GROUP BY day ORDER BY day LIMIT 2"
    )
    assert len(rows) == 2 and rows[0]["n"] == 1


# --------------------------------------------------------------------------- freshness


async def check_write_then_search(index: Any) -> None:
    """A message applied is found by the next search; applying it twice changes nothing."""
    await seed(index)
    assert await search(index, "xylophone") == []
    rec = message("new1", "s1", 3, "a xylophone solo", T0 + 20 * DAY)
    await index.apply("messages-appended", "s1", [rec])
    assert ids(await search(index, "xylophone")) == ["new1"]
    before = await index.counts()
    await index.apply("messages-appended", "s1", [rec])
    assert await index.counts() == before
    rows = await index.sql("SELECT message_count, updated_at FROM sessions WHERE session_id = 's1'")
    assert rows == [{"message_count": 4, "updated_at": T0 + 20 * DAY}]


async def check_session_events(index: Any) -> None:
    """Updates show in SQL; cleared and deleted sessions vanish from search."""
    await seed(index)
    await index.apply(
        "session-updated", "s2", {"title": "Pizza talk", "tags": ["food", "ny"], "pinned": True}
    )
    rows = await index.sql("SELECT title, tags, pinned, character_id FROM sessions WHERE session_id = 's2'")
    assert rows == [{"title": "Pizza talk", "tags": ["food", "ny"], "pinned": True, "character_id": "bob"}]
    await index.apply("session-cleared", "s2")
    assert await search(index, "pizza") == []
    rows = await index.sql("SELECT message_count FROM sessions WHERE session_id = 's2'")
    assert rows == [{"message_count": 0}]
    await index.apply("session-deleted", "s1")
    assert await search(index, "python asyncio", limit=10, mode="keyword") != []  # c4 still there
    assert {h.session_id for h in await search(index, "python asyncio", limit=10)} == {"s3"}
    counts = await index.counts()
    assert counts["sessions"] == 2 and counts["messages"] == 4 and counts["docs"] == 4
    # messages appended to a session the index has not seen (messages.add): created with defaults
    await index.apply("messages-appended", "s9", [message("z1", "s9", 0, "zebra", T0)])
    rows = await index.sql("SELECT title, character_id, message_count FROM sessions WHERE session_id = 's9'")
    assert rows == [{"title": "New Conversation", "character_id": "default", "message_count": 1}]


async def check_rebuild_equals_incremental(index: Any) -> None:
    """Rebuilding from the store's final state gives the same answers as the events did."""
    await seed(index)
    await index.apply("session-updated", "s3", {"title": "renamed"})
    await index.apply(
        "messages-appended", "s2", [message("b4", "s2", 3, "pizza again, New York style", T0 + 30 * DAY)]
    )
    await index.apply("session-created", "s4", session("s4", "bob"))
    await index.apply("messages-appended", "s4", [message("d1", "s4", 0, "python pizza", T0 + 31 * DAY)])
    await index.apply("session-deleted", "s1")
    queries = ["pizza", "python", "new york", '"new york" pizza', "the", "東京", "京", "café", "안녕"]
    modes = ("keyword", "substring", "semantic", "hybrid")

    async def answers() -> list[Any]:
        out = []
        for q in queries:
            for mode in modes:
                hits = await search(index, q, mode=mode, limit=10, now=T0 + 40 * DAY)
                out.append(
                    [(h.message.id, h.session_id, round(h.score, 6), h.message.to_record()) for h in hits]
                )
        out.append(await index.sql("SELECT * FROM sessions ORDER BY session_id"))
        out.append(await index.sql("SELECT * FROM messages ORDER BY id"))
        return out

    incremental = await answers()
    sessions = await index.sql("SELECT * FROM sessions ORDER BY session_id")
    messages = await index.sql("SELECT * FROM messages ORDER BY id DESC")
    from chatmem.index.schema import row_to_message_record, row_to_session_record

    await index.rebuild(
        [row_to_session_record(r) for r in sessions], (row_to_message_record(r) for r in messages)
    )
    assert await answers() == incremental


# --------------------------------------------------------------------------- other modes


async def check_substring_parity(index: Any) -> None:
    """``substring`` finds exactly what the original's case-insensitive scan finds."""
    await seed(index)
    for q in ["YORK", "the", "東京", "s'il", "3.1", "o"]:
        expected = {mid for mid, _, _, text, _ in CORPUS if q.lower() in text.lower()}
        got = await search(index, q, mode="substring", limit=None)
        assert set(ids(got)) == expected, (q, ids(got))
        created = [h.message.created_at for h in got]
        assert created == sorted(created, reverse=True)


async def check_semantic_near_duplicate(index: Any) -> None:
    """The local embedder ranks a reworded near-duplicate above unrelated text."""
    await seed(index)
    emb = HashingEmbedder()
    hits = await search(
        index, "how can I configure the asyncio event loop in python", mode="semantic", limit=3, embedder=emb
    )
    assert ids(hits)[0] == "a1", ids(hits)
    assert hits[0].score > hits[-1].score
    assert hits[0].breakdown["similarity"] == hits[0].score
    strict = await search(
        index,
        "how can I configure the asyncio event loop in python",
        mode="semantic",
        limit=10,
        threshold=0.7,
        embedder=emb,
    )
    assert ids(strict) == ["a1"], [(h.message.id, h.score) for h in strict]
    rows = await index.sql("SELECT DISTINCT model, dim FROM embeddings")
    assert rows == [{"model": emb.model, "dim": 384}]


async def check_hybrid_breakdown(index: Any) -> None:
    """Hybrid scores are the sum of their keyword, semantic and recency parts."""
    await seed(index)
    hits = await search(
        index,
        "python event loop",
        mode="hybrid",
        limit=5,
        now=T0 + 10 * DAY,
        weights={"keyword": 0.6, "semantic": 0.3, "recency": 0.1},
    )
    assert ids(hits)[0] in {"a1", "a2"}
    for h in hits:
        parts = h.breakdown["keyword"] + h.breakdown["semantic"] + h.breakdown["recency"]
        assert abs(parts - h.score) < 1e-6
        assert 0 <= h.breakdown["keyword"] <= 0.6 + 1e-9
        assert 0 <= h.breakdown["recency"] <= 0.1 + 1e-9
    assert max(h.breakdown["keyword"] for h in hits) == 0.6  # the best BM25 is normalised to 1
    # recency alone: the newest message first
    rec = await search(
        index,
        "python",
        mode="hybrid",
        limit=3,
        now=T0 + 10 * DAY,
        weights={"keyword": 0, "semantic": 0, "recency": 1},
    )
    assert ids(rec)[0] == "c4"


async def check_vector_forms_agree(index: Any) -> None:
    """Where the engine runs in this thread the query vector is written into the statement
    and hybrid is fused in Python; the forms the page uses (the vector bound, one SQL
    statement) give the same hits, scores and breakdowns, with and without filters."""
    from chatmem.index import embeddings as embed

    await seed(index)
    emb = HashingEmbedder(dimensions=64)
    saved_one = embed.ONE_COSINE_FROM
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("semantic", "python event loop", {}),
        ("semantic", "pizza in new york", {"limit": 3, "threshold": 0.1}),
        ("semantic", "python", {"roles": ["user"], "limit": None}),
        ("hybrid", "python event loop", {}),
        ("hybrid", "the pizza", {"limit": 2}),
        ("hybrid", "python loop weather", {"threshold": 0.3}),
        ("hybrid", "python", {"session_ids": ["s1", "s3"]}),
    ]

    def flat(hits: list[Any]) -> list[Any]:
        return [
            (h.message.id, h.score, sorted((k, round(v, 9)) for k, v in h.breakdown.items())) for h in hits
        ]

    def page_forms() -> Any:
        """The index as the page's is: its engine in a worker (statements are round trips)."""
        from unittest import mock

        return mock.patch.object(type(index), "in_thread", property(lambda self: False))

    for mode, q, kw in cases:
        here = flat(await search(index, q, mode=mode, embedder=emb, now=T0 + 10 * DAY, **kw))
        with page_forms():
            bound = flat(await search(index, q, mode=mode, embedder=emb, now=T0 + 10 * DAY, **kw))
        assert here and here == bound, (mode, q, here[:2], bound[:2])
        # the scan a large index uses (the ranking cosine alone, the own one for the top rows)
        try:
            embed.ONE_COSINE_FROM = 0
            one = flat(await search(index, q, mode=mode, embedder=emb, now=T0 + 10 * DAY, **kw))
            with page_forms():
                one_bound = flat(await search(index, q, mode=mode, embedder=emb, now=T0 + 10 * DAY, **kw))
        finally:
            embed.ONE_COSINE_FROM = saved_one
        assert one == here and one_bound == here, (mode, q, here[:2], one[:2], one_bound[:2])


async def check_retrieve_strategies(index: Any) -> None:
    """recent / relevant / hybrid pick context messages, returned in conversation order."""
    await seed(index)
    recent = await retrieve(index, "s1", None, RetrievalConfig(strategy="recent", recent_count=2))
    assert ids(recent) == ["a2", "a3"]
    assert recent[-1].score == 1.0 and abs(recent[0].score - 0.5**0.5) < 1e-9
    relevant = await retrieve(
        index,
        "s1",
        "configure the python asyncio event loop",
        RetrievalConfig(strategy="relevant", recent_count=5, relevance_threshold=0.7),
    )
    assert "a1" in ids(relevant) and "a3" not in ids(relevant)
    assert all(h.breakdown["similarity"] >= 0.7 for h in relevant)
    hyb = await retrieve(
        index,
        "s1",
        "weather sun",
        RetrievalConfig(
            strategy="hybrid", recent_count=2, hybrid_weights=HybridWeights(recency=0.1, relevance=0.9)
        ),
    )
    assert "a3" in ids(hyb) and len(hyb) == 2
    seqs = [h.message.seq for h in hyb]
    assert seqs == sorted(seqs)
    await expect_raises(ValidationError, retrieve(index, "s1", "", RetrievalConfig(strategy="relevant")))
    await expect_raises(ValidationError, retrieve(index, "s1", "x", RetrievalConfig(strategy="nope")))


Check = Callable[[Any], Awaitable[None]]


async def check_python_and_sql_scorers_agree(index: Any) -> None:
    """A query with few postings is scored in Python: same hits, scores and breakdowns as
    the SQL scorer, in keyword and hybrid mode, also after appends and a delete."""
    import random

    from chatmem.index import scoring

    rng = random.Random(7)
    vocab = [
        "apple",
        "banana",
        "cherry",
        "delta",
        "echo",
        "falcon",
        "garden",
        "harbor",
        "island",
        "jungle",
        "kettle",
        "lemon",
        "mango",
        "night",
        "ocean",
        "piano",
        "quartz",
        "river",
        "stone",
        "tiger",
    ]
    emb = HashingEmbedder(dimensions=64)

    async def add(sid: str, n: int, start: int) -> None:
        recs = []
        for i in range(n):
            words = rng.choices(vocab, k=rng.randint(1, 12))
            text = " ".join(words) if i % 7 else "apple banana cherry"  # identical texts: tied scores
            role = "assistant" if i % 3 == 0 else "user"
            recs.append(message(f"{sid}-{start + i}", sid, start + i, text, T0 + (start + i) * 1000, role))
        await index.apply("messages-appended", sid, recs)

    for sid, character in (("p1", "alice"), ("p2", "bob")):
        await index.apply("session-created", sid, session(sid, character))
        await add(sid, 60, 0)
    queries = [
        ("apple", {}),
        ("apple banana cherry", {}),
        ("tiger ocean", {"limit": 3}),
        ('"mango" river', {}),
        ("night piano quartz stone", {"limit": 50}),
        ("apple lemon", {"threshold": 1.0}),
        ("zebra", {}),
        ('"zebra" apple', {}),
        ("apple banana cherry", {"limit": 1}),
        # filtered: narrowed to the admitted docs before the winners are picked
        ("apple", {"character_ids": ["alice"]}),
        ("apple banana cherry", {"character_ids": ["bob"], "limit": 3}),
        ("tiger ocean", {"session_ids": ["p2"], "roles": ["user"]}),
        ("night piano", {"date_range": (T0 + 10_000, T0 + 40_000), "limit": 20}),
        ("apple lemon", {"character_ids": ["alice"], "threshold": 1.0}),
        ("zebra", {"character_ids": ["alice"]}),
        ("apple", {"character_ids": ["nobody"]}),
    ]

    def flat(hits: list[Any]) -> list[Any]:
        # the raw BM25 sum of a breakdown may differ in its last bits (the order of a float sum)
        return [
            (h.message.id, h.score, sorted((k, round(v, 9)) for k, v in h.breakdown.items())) for h in hits
        ]

    async def both(q: str, kw: dict[str, Any], mode: str) -> None:
        saved = scoring.PY_POSTINGS
        try:
            scoring.PY_POSTINGS = 0
            sql = flat(await search(index, q, mode=mode, embedder=emb, now=T0, **kw))
        finally:
            scoring.PY_POSTINGS = saved
        here = flat(await search(index, q, mode=mode, embedder=emb, now=T0, **kw))
        assert here == sql, (q, mode, [(a, b) for a, b in zip(here, sql) if a != b][:2], len(here), len(sql))

    for rnd in range(3):
        for q, kw in queries:
            for mode in ("keyword", "hybrid"):
                await both(q, kw, mode)
        if rnd == 0:
            await add("p1", 20, 60)  # adds to terms whose postings a search kept
        else:
            await index.apply("session-deleted", "p2")
    hits = await search(index, "apple banana cherry", limit=20)
    assert hits and all(h.session_id == "p1" for h in hits)
    # a filtered search after appends judges the new docs too
    await add("p1", 5, 200)
    hits = await search(index, "apple banana cherry", limit=100, character_ids=["alice"])
    assert "p1-200" in {h.message.id for h in hits}
    assert await search(index, "apple banana cherry", character_ids=["bob"]) == []
    # the session's row changes (its character with it): what each filter admitted is judged again
    await index.apply("session-created", "p1", session("p1", "bob"))
    assert await search(index, "apple banana cherry", character_ids=["alice"]) == []
    assert await search(index, "apple banana cherry", character_ids=["bob"])


async def _ranked(index: Any, queries: list[str]) -> list[Any]:
    """Each query's top 7 keyword hits as ``(id, score, created_at)``."""
    return [
        [(h.message.id, h.score, h.message.created_at) for h in await search(index, q, limit=7)]
        for q in queries
    ]


async def _ranked_without_kept_docs(index: Any, queries: list[str]) -> list[Any]:
    """``_ranked`` with no kept doc table, docs or postings: each search reads its postings
    with their docs' lengths joined from ``docs`` (the table is put back after)."""
    fig = index._figures
    table, fig.doc_table = fig.doc_table, None
    fig.docs.clear()
    fig.postings.clear()
    try:
        return await _ranked(index, queries)
    finally:
        fig.doc_table = table


WORDS = ["amber", "basil", "cedar", "dune", "ember", "fjord", "grove", "heath", "inlet", "juniper"]


def _rare_appender(index: Any) -> Callable[[str, int], Awaitable[None]]:
    """``add(sid, count)``: appends ``count`` messages to ``sid``, numbered on from the last
    call's, each of three to six of ``WORDS`` and one of seven ``rare<i>`` words (in 8-10
    docs each per 60 messages, the other words in 20 or more)."""
    n = 0

    async def add(sid: str, count: int) -> None:
        nonlocal n
        recs = [
            message(
                f"{sid}-{i}",
                sid,
                i,
                " ".join([WORDS[(i + j) % 10] for j in range(3 + i % 4)] + [f"rare{i % 7}"] * (1 + i % 3)),
                T0 + i * 1000,
            )
            for i in range(n, n + count)
        ]
        n += count
        await index.apply("messages-appended", sid, recs)

    return add


async def _figures_of(index: Any, sids: tuple[str, ...]) -> Any:
    """The figures ``index`` keeps in Python (None for a guest's view, which keeps none),
    with the sessions ``sids`` created."""
    fig = getattr(index, "_figures", None)
    if fig is None or not getattr(index, "keeps_docs", False):
        return None
    for sid in sids:
        await index.apply("session-created", sid, session(sid))
    return fig


async def check_kept_docs_answer_like_the_index(index: Any) -> None:
    """The docs' message ids and times kept in Python (read after a search, updated by
    appends, forgotten by a delete) give the same hits as reading ``docs`` per search."""
    import asyncio

    from chatmem.index.doctable import DocTable

    fig = getattr(index, "_figures", None)
    if fig is None or not getattr(index, "keeps_docs", False):
        return  # a guest's view keeps none
    words = ["amber", "basil", "cedar", "dune", "ember", "fjord", "grove", "heath", "inlet", "juniper"]
    for sid in ("k1", "k2"):
        await index.apply("session-created", sid, session(sid))
    assert await search(index, "amber") == []  # an empty index: its docs are kept from the start
    for _ in range(500):
        if isinstance(index.doc_cache, DocTable):
            break
        await asyncio.sleep(0.01)
    assert isinstance(index.doc_cache, DocTable) and len(index.doc_cache) == 0
    n = 0

    async def add(sid: str, count: int) -> None:
        nonlocal n
        recs = [
            message(
                f"{sid}-{n + i}",
                sid,
                n + i,
                " ".join(words[(n + i + j) % 10] for j in range(1 + (n + i) % 4)),
                T0 + (n + i) * 1000,
            )
            for i in range(count)
        ]
        n += count
        await index.apply("messages-appended", sid, recs)

    await add("k1", 30)
    await add("k2", 30)
    queries = ["amber", "basil cedar", "dune ember fjord", "juniper amber heath", "zebra"]

    async def answers() -> list[Any]:
        return await _ranked(index, queries)

    async def kept() -> bool:
        for _ in range(500):  # the docs are read in the background after an answer
            if isinstance(index.doc_cache, DocTable):
                return True
            await asyncio.sleep(0.01)
        return False

    async def without_table() -> list[Any]:
        return await _ranked_without_kept_docs(index, queries)

    from chatmem.index import doctable

    assert len([d for d in range(len(index.doc_cache)) if index.doc_cache.get(d)]) == 60  # appends kept
    fig.forget_terms()
    saved, doctable.DOC_PAGE = doctable.DOC_PAGE, 16  # several pages
    try:
        page = await fig.read_docs(index.engine, 0, None)
        assert page == (16, 60) and fig.doc_table is None
        await add("k1", 1)  # an append between two pages joins the table when the read ends
        while page is not None:
            assert fig.doc_table is None
            page = await fig.read_docs(index.engine, *page)
        assert isinstance(index.doc_cache, DocTable) and index.doc_cache.get(60) is not None
        first = await answers()
        assert await kept()
    finally:
        doctable.DOC_PAGE = saved
    assert len([d for d in range(len(index.doc_cache)) if index.doc_cache.get(d)]) == 61
    lens = {int(r["doc"]): int(r["doc_len"]) for r in await index.execute("SELECT doc, doc_len FROM docs")}
    assert {d: index.doc_cache.length(d) for d in lens} == lens  # BM25's dl, kept with the docs
    assert await answers() == first == await without_table()
    await add("k1", 15)  # the appended docs join the table
    assert isinstance(index.doc_cache, DocTable)
    lens = {int(r["doc"]): int(r["doc_len"]) for r in await index.execute("SELECT doc, doc_len FROM docs")}
    assert {d: index.doc_cache.length(d) for d in lens} == lens
    assert len([d for d in range(len(index.doc_cache)) if index.doc_cache.get(d)]) == 76
    after = await answers()
    assert after == await without_table() and after != first
    await index.apply("session-deleted", "k2")  # doc numbers may be reused: forgotten
    assert not isinstance(index.doc_cache, DocTable)
    gone = await answers()
    assert all(not i.startswith("k2-") for a in gone for i, _, _ in a)
    assert await kept() and await answers() == gone == await without_table()
    await add("k2", 10)  # appends after the delete: read again, then kept
    assert await answers() == await without_table()


async def check_kept_lengths_past_the_name_cache_answer_like_the_index(index: Any) -> None:
    """Past ``DOC_CACHE`` docs only each doc's length is kept (read in pages after a search,
    extended by appends, kept when appends cross ``DOC_CACHE``, dropped past
    ``LENGTHS_CACHE``): the hits equal those of postings joined with ``docs``."""
    import asyncio

    from chatmem.index import doctable

    fig = await _figures_of(index, ("l1", "l2"))
    if fig is None:
        return  # a guest's view keeps none
    words = WORDS
    n = 0

    async def add(sid: str, count: int) -> None:
        nonlocal n
        recs = [
            message(
                f"{sid}-{n + i}",
                sid,
                n + i,
                " ".join(words[(n + i + j * 3) % 10] for j in range(1 + (n + i) % 5)),
                T0 + (n + i) * 1000,
            )
            for i in range(count)
        ]
        n += count
        await index.apply("messages-appended", sid, recs)

    queries = ["amber", "basil cedar", "dune ember fjord", "juniper amber heath", "zebra"]

    async def answers() -> list[Any]:
        return await _ranked(index, queries)

    async def without_table() -> list[Any]:
        return await _ranked_without_kept_docs(index, queries)

    async def lengths_kept() -> bool:
        for _ in range(500):  # read in the background after an answer
            if fig.doc_table is not None:
                return True
            await asyncio.sleep(0.01)
        return False

    async def lengths() -> dict[int, int]:
        return {
            int(r["doc"]): int(r["doc_len"]) for r in await index.execute("SELECT doc, doc_len FROM docs")
        }

    saved = doctable.DOC_CACHE, doctable.LENGTHS_PAGE, doctable.LENGTHS_CACHE
    doctable.DOC_CACHE, doctable.LENGTHS_PAGE, doctable.LENGTHS_CACHE = 40, 16, 200
    try:
        assert await search(index, "amber") == [] and await lengths_kept()  # empty: kept from the start
        await add("l1", 30)  # appends to an empty index: names and lengths kept
        await add("l2", 30)  # past DOC_CACHE: only the lengths from here on
        assert fig.doc_table is not None and not fig.doc_table.names
        assert not isinstance(index.doc_cache, doctable.DocTable)
        assert {d: fig.doc_table.length(d) for d in await lengths()} == await lengths()
        first = await answers()
        assert first == await without_table()
        fig.forget_terms()  # read again, a page of 16 lengths at a time
        assert fig.doc_table is None
        page = await fig.read_docs(index.engine, 0, None)
        assert page == (16, 60) and fig.doc_table is None
        assert await answers() == first and await lengths_kept()
        assert not fig.doc_table.names and len(fig.doc_table) == 60
        assert {d: fig.doc_table.length(d) for d in await lengths()} == await lengths()
        await add("l1", 25)  # the appended docs' lengths join the table
        assert fig.doc_table is not None and len(fig.doc_table) == 85
        assert {d: fig.doc_table.length(d) for d in await lengths()} == await lengths()
        after = await answers()
        assert after == await without_table() and after != first
        fig.forget_terms()
        page = await fig.read_docs(index.engine, 0, None)
        assert page == (16, 85)
        await add("l1", 3)  # numbered past the read's end: they join the table when it ends
        while page is not None:
            page = await fig.read_docs(index.engine, *page)
        assert fig.doc_table is not None and len(fig.doc_table) == 88
        assert {d: fig.doc_table.length(d) for d in await lengths()} == await lengths()
        assert await answers() == await without_table()
        doctable.LENGTHS_CACHE = 90
        await add("l2", 10)  # past LENGTHS_CACHE: nothing kept, postings joined with docs
        assert fig.doc_table is None
        assert await answers() == await without_table()
        doctable.LENGTHS_CACHE = 200
        fig.forget_terms()
        page = await fig.read_docs(index.engine, 0, None)
        assert page is not None
        await index.apply("session-deleted", "l2")  # may renumber: the read is dropped
        assert await fig.read_docs(index.engine, *page) is None and fig.doc_table is None
        gone = await answers()
        assert all(not i.startswith("l2-") for a in gone for i, _, _ in a)
        assert await lengths_kept() and await answers() == gone == await without_table()
    finally:
        doctable.DOC_CACHE, doctable.LENGTHS_PAGE, doctable.LENGTHS_CACHE = saved


async def check_kept_rare_postings_answer_like_the_index(index: Any) -> None:
    """The rarest terms' postings kept in Python (read in pages after the docs, kept exact
    by appends, an append between two pages joining the read, forgotten by a delete) equal
    the postings table; a query of such terms reads no postings and answers as postings
    joined from ``docs`` do."""
    from chatmem.index import figures, scoring

    fig = await _figures_of(index, ("r1", "r2"))
    if fig is None:
        return  # a guest's view keeps none
    add = _rare_appender(index)

    async def postings() -> dict[int, list[tuple[int, int]]]:
        out: dict[int, list[tuple[int, int]]] = {}
        for r in await index.execute("SELECT tid, doc, tf FROM postings"):
            out.setdefault(int(r["tid"]), []).append((int(r["doc"]), int(r["tf"])))
        return {t: sorted(v) for t, v in out.items()}

    async def rare_tids() -> set[int]:  # in 8-10 docs each, the other words in 20 or more
        return {int(r["tid"]) for r in await index.execute("SELECT tid FROM terms WHERE term LIKE 'rare%'")}

    def kept() -> dict[int, list[tuple[int, int]]]:
        return {t: sorted(zip(d, tf)) for t, (d, tf) in fig.rare.items()}

    async def equal_to_table() -> None:
        table = await postings()
        assert set(fig.rare) == await rare_tids() and kept() == {t: table[t] for t in fig.rare}, kept()

    queries = ["rare1", "rare2 rare5", "rare3 -rare4", "rare0 rare6 rare1", "zebra"]
    read = scoring._read_postings
    statements: list[list[int]] = []

    async def counted(index: Any, tids: list[int], total: int) -> Any:
        statements.append(tids)
        return await read(index, tids, total)

    saved = figures.RARE_DF, figures.RARE_PAGE
    figures.RARE_DF, figures.RARE_PAGE = 12, 10  # the seven rare words; about two a page
    try:
        await add("r1", 30)
        await add("r2", 30)
        await search(index, "amber")  # the vocabulary, the docs, then the rare postings
        await index.figures_read()  # read in the background after that answer
        await equal_to_table()
        assert len(fig.rare) == 7
        scoring._read_postings = counted
        try:
            first = await _ranked(index, queries)
        finally:
            scoring._read_postings = read
        assert statements == [] and any(first), statements
        assert first == await _ranked_without_kept_docs(index, queries)

        fig.rare, fig.rare_sized = (
            figures.RarePostings(),
            False,
        )  # read again, with an append between two pages
        assert await fig.read_rare_page(index.engine) and 0 < len(fig.rare) < 7
        await add("r1", 9)
        while await fig.read_rare_page(index.engine):
            pass
        await equal_to_table()
        await add("r2", 11)  # an append after the read adds to the kept postings
        await equal_to_table()
        after = await _ranked(index, queries)
        assert after == await _ranked_without_kept_docs(index, queries) and after != first
        await index.apply("session-deleted", "r2")  # forgotten
        assert fig.rare == {} and not fig.rare_sized
        gone = await _ranked(index, queries)
        await index.figures_read()  # the background read that search started again
        await equal_to_table()
        assert all(not i.startswith("r2-") for a in gone for i, _, _ in a)
        assert gone == await _ranked(index, queries) == await _ranked_without_kept_docs(index, queries)
    finally:
        figures.RARE_DF, figures.RARE_PAGE = saved


async def check_kept_rare_terms_past_the_vocabulary_cache(index: Any) -> None:
    """A vocabulary too large to keep whole (past ``TERM_CACHE``) still has its rarest
    terms' postings kept, with their names and dfs (``rare_terms``): a query of them runs
    no statement at all, answers as postings joined from ``docs`` do, and stays exact
    through appends, a full cache of looked-up terms, and a delete (forgotten)."""
    from chatmem.index import figures

    fig = await _figures_of(index, ("v1", "v2"))
    if fig is None:
        return  # a guest's view keeps none
    add = _rare_appender(index)

    async def table_terms() -> dict[str, tuple[int, int]]:
        rows = await index.execute(
            "SELECT term, tid, df FROM terms WHERE df BETWEEN 1 AND ?", [figures.RARE_DF]
        )
        return {r["term"]: (int(r["tid"]), int(r["df"])) for r in rows}

    engine = index.engine
    execute = engine.execute
    statements: list[str] = []

    async def counted(sql: str, *a: Any, **k: Any) -> Any:
        statements.append(sql)
        return await execute(sql, *a, **k)

    rare_queries = ["rare1", "rare2 rare5", "rare3 -rare4", "rare0 rare6 rare1"]
    saved = figures.TERM_CACHE, figures.RARE_DF, figures.RARE_PAGE
    figures.TERM_CACHE, figures.RARE_DF, figures.RARE_PAGE = 5, 12, 10  # 17 terms: not kept whole
    try:
        await add("v1", 30)
        await add("v2", 30)
        await search(index, "amber")  # sizes the vocabulary, reads the docs, then the rare postings
        await index.figures_read()
        assert not fig.whole and set(fig.rare_terms) == {f"rare{i}" for i in range(7)}, fig.rare_terms
        assert fig.rare_terms == await table_terms()
        assert {t for t, _ in fig.rare_terms.values()} == set(fig.rare)
        engine.execute = counted
        try:
            first = await _ranked(index, rare_queries)
        finally:
            del engine.execute
        ranking = [q for q in statements if not q.startswith("SELECT * FROM messages WHERE id IN")]
        assert ranking == [] and all(first), ranking  # (the harness reads hits' records from the index)
        assert first == await _ranked_without_kept_docs(index, rare_queries)
        mixed = ["amber rare1", "basil cedar dune ember fjord rare2", "grove heath rare3"]
        assert await _ranked(index, mixed) == await _ranked_without_kept_docs(index, mixed)
        assert len(fig.terms) <= figures.TERM_CACHE and fig.rare_terms  # looked-up terms went, rare stayed
        await add("v2", 11)  # dfs and postings follow the append
        assert fig.rare_terms == await table_terms()
        after = await _ranked(index, rare_queries + mixed)
        assert after == await _ranked_without_kept_docs(index, rare_queries + mixed)
        await index.apply("session-deleted", "v2")
        assert fig.rare_terms == {} and fig.rare == {}
        gone = await _ranked(index, rare_queries)
        await index.figures_read()
        assert fig.rare_terms == await table_terms()  # now the other words are rare too
        assert (
            gone == await _ranked(index, rare_queries) == await _ranked_without_kept_docs(index, rare_queries)
        )
        assert all(not i.startswith("v2-") for a in gone for i, _, _ in a)
    finally:
        figures.TERM_CACHE, figures.RARE_DF, figures.RARE_PAGE = saved


async def check_a_derivation_from_scratch_keeps_the_docs_it_numbered(index: Any) -> None:
    """A rebuild hands the query index every doc as it numbered them (names, times and
    lengths, or only the lengths past ``DOC_CACHE``): nothing is read back, and the hits
    equal those of postings joined with ``docs``."""
    from chatmem.index import doctable

    fig = getattr(index, "_figures", None)
    if fig is None or not getattr(index, "keeps_docs", False):
        return  # a guest's view keeps none
    words = ["amber", "basil", "cedar", "dune", "ember", "fjord", "grove", "heath", "inlet", "juniper"]
    sessions = [session("d1"), session("d2")]
    recs = [
        message(
            f"d-{i}",
            ("d1", "d2")[i % 2],
            i,
            " ".join(words[(i + j * 7) % 10] for j in range(1 + i % 6)),
            T0 + (i % 17) * 1000,
        )
        for i in range(40)
    ]
    queries = ["amber", "basil cedar", "dune ember fjord", "juniper -amber", "zebra"]

    async def answers() -> list[Any]:
        return await _ranked(index, queries)

    async def docs() -> dict[int, tuple[str, int, int]]:
        rows = await index.execute("SELECT doc, message_id, created_at, doc_len FROM docs")
        return {int(r["doc"]): (str(r["message_id"]), int(r["created_at"]), int(r["doc_len"])) for r in rows}

    for cache in (doctable.DOC_CACHE, 25):
        saved, doctable.DOC_CACHE = doctable.DOC_CACHE, cache
        try:
            await index.rebuild(sessions, iter(recs))
            table = fig.doc_table
            assert table is not None and fig.docs_sized and table.names == (cache > 40)
            want = await docs()
            assert len(want) == 40 and len(table) == 40
            assert {d: table.length(d) for d in want} == {d: v[2] for d, v in want.items()}
            if table.names:
                assert {d: table.get(d) for d in want} == {d: (v[0], v[1]) for d, v in want.items()}
            got = await answers()
            assert got == await _ranked_without_kept_docs(index, queries) and any(got)
        finally:
            doctable.DOC_CACHE = saved


CHECKS: list[Check] = [v for k, v in sorted(globals().items()) if k.startswith("check_") and callable(v)]
