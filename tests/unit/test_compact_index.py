"""The compact keyword index: no copy of a message record, integer postings, and
the BM25 figures kept in Python exact across writes (answers equal a fresh rebuild)."""

from __future__ import annotations

import asyncio

import pytest

from chatmem import Memory
from chatmem.index import DuckDBEngine, QueryIndex, figures, search
from chatmem.index.schema import TABLES
from chatmem.records.models import SessionMeta
from chatmem.stores.sqlite import SQLiteStore

MARK = "zqxmarker"


def run(coro):
    return asyncio.run(coro)


def _mem(db: str) -> Memory:
    async def engine():
        return DuckDBEngine()

    return Memory(SQLiteStore(db), engine_factory=engine)


async def test_index_holds_no_record_payload_and_hits_come_from_the_store(tmp_path):
    """Content parts, slices, tool results and metadata stay in the store only; a
    hit still carries the whole stored record."""

    mem = _mem(str(tmp_path / "s.db"))
    s = await mem.sessions.create(title="t")
    parts = [
        {"type": "text", "text": "the blue lighthouse"},
        {"type": "image_url", "image_url": {"url": f"https://x/{MARK}-img.png"}},
    ]
    await mem.messages.append(
        s.session_id,
        "user",
        parts,
        metadata={"note": f"{MARK}-meta"},
        slices=[{"type": "text", "text": f"{MARK}-slice"}],
    )
    await mem.messages.append(s.session_id, "assistant", "a red lighthouse")
    (hit,) = await mem.search('"blue lighthouse"', limit=5)
    assert hit.message.content == parts and hit.message.metadata == {"note": f"{MARK}-meta"}
    assert hit.message.slices == [{"type": "text", "text": f"{MARK}-slice"}]
    for table in TABLES:
        rows = await mem.sql(f"SELECT * FROM {table}")
        assert MARK not in repr(rows), table
    cols = {
        r["column_name"]
        for r in await mem.sql(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'messages'"
        )
    }
    assert "text" in cols and not cols & {"content", "metadata", "slices", "tool_results"}
    types = {
        r["data_type"]
        for r in await mem.sql(
            "SELECT data_type FROM information_schema.columns WHERE table_name = 'postings'"
        )
    }
    assert types == {"INTEGER"}
    # substring mode and user SQL still read the plain text
    sub = await mem.search("RED LIGHT", mode="substring")
    assert [h.message.content for h in sub] == ["a red lighthouse"]
    await mem.close()


def _msg(i: int, sid: str, text: str) -> dict:
    return {
        "id": f"m{i:04d}",
        "sessionId": sid,
        "seq": i,
        "role": "user",
        "content": text,
        "createdAt": 1_000 + i,
        "tokenCount": 1,
    }


def _slowed(engine, marker: str, seconds: float) -> list[str]:
    """Log every statement ``engine`` runs (the returned list), and delay those holding
    ``marker`` by ``seconds``."""
    log: list[str] = []
    execute, small = engine.execute, engine.execute_small

    async def slowed(sql, params=None, **kw):
        log.append(sql)
        if marker in sql:
            await asyncio.sleep(seconds)
        return await (small(sql, params) if kw.pop("_small", False) else execute(sql, params, **kw))

    async def slowed_small(sql, params=None):
        return await slowed(sql, params, _small=True)

    engine.execute, engine.execute_small = slowed, slowed_small
    return log


WORDS = ["apple", "banana", "cherry", "damson", "elder", "fig", "grape", "hazel"]
QUERIES = [
    "apple",
    "banana cherry",
    "fig grape hazel",
    '"apple banana"',
    "kiwi apple",
    "new9 apple",
    "cherry",
]


@pytest.mark.parametrize("whole", [True, False], ids=["whole-vocabulary", "queried-terms"])
async def test_figures_kept_in_python_stay_exact_across_writes(monkeypatch, whole):
    """Searches between appends, a big batch and a delete answer exactly like an
    index rebuilt from the same messages at that moment."""
    if not whole:
        monkeypatch.setattr(figures, "TERM_CACHE", 3)

    async def answers(idx: QueryIndex) -> list:
        out = []
        for q in QUERIES:
            out.append([(h.message.id, h.score) for h in await search(idx, q, limit=4)])
            out.append([(h.message.id, h.score) for h in await search(idx, q, limit=None)])
        return out

    live = QueryIndex(DuckDBEngine())
    kept: dict[str, list[dict]] = {"a": [], "b": []}
    for sid in kept:
        await live.apply("session-created", sid, SessionMeta(sid, sid, 1, 1).to_record())
    n = 0

    async def append(sid: str, texts: list[str]) -> None:
        nonlocal n
        recs = []
        for t in texts:
            recs.append(_msg(n, sid, t))
            n += 1
        kept[sid].extend(recs)
        await live.apply("messages-appended", sid, recs)

    async def check() -> None:
        fresh = QueryIndex(DuckDBEngine())
        await fresh.rebuild(
            [SessionMeta(s, s, 1, 1).to_record() for s in kept], [m for ms in kept.values() for m in ms]
        )
        assert await answers(live) == await answers(fresh)
        await fresh.close()

    await append("a", ["apple banana", "apple apple cherry"])
    await check()
    await append("b", ["banana fig", "kiwi"])  # a term no query had seen, one a query had missed
    await check()
    await append(
        "a", [f"new{i % 13} " + " ".join(WORDS[j % 8] for j in range(i % 7 + 1)) for i in range(600)]
    )
    await check()  # a batch past the exact-update size
    await live.apply("session-deleted", "b")
    kept.pop("b")
    await check()
    await append("a", ["grape hazel", "apple banana fig"])
    await check()
    await live.close()


async def test_whole_vocabulary_is_read_a_page_at_a_time(monkeypatch):
    """The whole vocabulary arrives in pages of ``VOCABULARY_PAGE`` terms (one big answer
    held a page's main thread): every term with its id and df, as in the terms table."""
    monkeypatch.setattr(figures, "VOCABULARY_PAGE", 4)

    idx = QueryIndex(DuckDBEngine())
    await idx.apply("session-created", "a", SessionMeta("a", "a", 1, 1).to_record())
    await idx.apply("messages-appended", "a", [_msg(i, "a", f"w{i} w{i + 1} common") for i in range(11)])
    rows = await idx.engine.execute("SELECT term, tid, df FROM terms")
    pages = []
    execute = idx.engine.execute

    async def counted(sql, params=None, **kw):
        if "LIMIT" in sql:
            pages.append(params)
        return await execute(sql, params, **kw)

    idx.engine.execute = counted
    fig = figures.KeywordFigures()
    await fig.read_vocabulary(idx.engine)
    await idx.close()
    assert len(rows) == 13  # w0..w11 and "common"
    assert fig.whole and fig.terms == {r["term"]: (int(r["tid"]), int(r["df"])) for r in rows}
    assert len(pages) == 4 and all(p[1] == 4 for p in pages)


async def test_first_answer_never_waits_for_the_vocabulary_read():
    """The vocabulary (and docs) are read after the first search is answered, however
    long that answer takes: here its postings read is slowed past the old fixed 50 ms."""

    idx = QueryIndex(DuckDBEngine())
    await idx.apply("session-created", "a", SessionMeta("a", "a", 1, 1).to_record())
    await idx.apply("messages-appended", "a", [_msg(i, "a", f"w{i} w{i + 1} common") for i in range(40)])
    fresh = QueryIndex(idx.engine)  # an opening: nothing of the vocabulary known yet
    log = _slowed(idx.engine, "FROM postings", 0.3)
    hits = await search(fresh, "w7 common", limit=3)
    answered = len(log)
    await fresh._vocabulary
    whole = fresh._figures.whole
    assert hits and "w7" in hits[0].message.content
    assert not any("WHERE tid >" in sql for sql in log[:answered]), log[:answered]
    assert whole and any("WHERE tid >" in sql for sql in log[answered:]), log


async def test_an_append_between_two_vocabulary_pages_joins_that_read(monkeypatch):
    """The vocabulary is read a page per hold of the lock; an append that comes between
    two pages keeps the read going: the terms the pages read already hold get its counts,
    its new terms and the later pages' terms are read as they are then. The whole read
    ends equal to the terms table, without starting over."""
    monkeypatch.setattr(figures, "VOCABULARY_PAGE", 4)

    idx = QueryIndex(DuckDBEngine())
    await idx.apply("session-created", "a", SessionMeta("a", "a", 1, 1).to_record())
    await idx.apply("messages-appended", "a", [_msg(i, "a", f"w{i} w{i + 1} common") for i in range(11)])
    fig = idx._figures
    fig.forget()
    pages = [await fig.read_vocabulary_page(idx.engine)]
    read_first = dict(fig._term_read[0])
    # "common" and "w0" are in the first page, "w9" in a later one, "fresh" is new
    await idx.apply("messages-appended", "a", [_msg(20, "a", "w0 common fresh w9")])
    going = fig._term_read is not None
    while pages[-1]:
        pages.append(await fig.read_vocabulary_page(idx.engine))
        await idx.apply("messages-appended", "a", [_msg(20 + len(pages), "a", f"common late{len(pages)}")])
    rows = await idx.engine.execute("SELECT term, tid, df FROM terms")
    await idx.close()
    assert {"common", "w0"} <= set(read_first) and "w9" not in read_first and going
    assert pages == [True, True, True, True, False]  # 13 terms and 4 appended: never started over
    assert fig.whole and fig.terms == {r["term"]: (int(r["tid"]), int(r["df"])) for r in rows}
    assert fig.terms["common"][1] == 16 and fig.terms["w0"][1] == 2 and fig.terms["w9"][1] == 3
    assert {"fresh", "late2", "late4", "late5"} <= set(fig.terms)  # late5: after the read ended


async def test_a_delete_or_a_large_append_between_two_vocabulary_pages_drops_that_read(monkeypatch):
    """A write that forgets the terms (a delete, or an append too large to count term by
    term) drops a whole read under way: nothing half-read is kept, and the next read gives
    the terms table as it is."""
    monkeypatch.setattr(figures, "VOCABULARY_PAGE", 4)
    monkeypatch.setattr(figures, "_EXACT_UPDATE", 2)

    idx = QueryIndex(DuckDBEngine())
    for sid in ("a", "b"):
        await idx.apply("session-created", sid, SessionMeta(sid, sid, 1, 1).to_record())
    await idx.apply("messages-appended", "a", [_msg(i, "a", f"w{i} w{i + 1} common") for i in range(11)])
    await idx.apply("messages-appended", "b", [_msg(50, "b", "common only")])
    fig = idx._figures
    out = []
    for write in ("delete", "large"):
        fig.forget()
        first = await fig.read_vocabulary_page(idx.engine)
        if write == "delete":
            await idx.apply("session-deleted", "b", None)
        else:
            await idx.apply(
                "messages-appended", "a", [_msg(60 + i, "a", f"bulk{i} common") for i in range(3)]
            )
        second = await fig.read_vocabulary_page(idx.engine)
        out.append((first, second, fig.whole, dict(fig.terms)))
    await fig.read_vocabulary(idx.engine)
    rows = await idx.engine.execute("SELECT term, tid, df FROM terms")
    await idx.close()
    assert out == [(True, False, False, {}), (True, False, False, {})]
    assert fig.whole and fig.terms == {r["term"]: (int(r["tid"]), int(r["df"])) for r in rows}
    assert "bulk2" in fig.terms and fig.terms["common"][1] == 14


async def test_a_search_during_the_vocabulary_read_waits_for_one_page_at_most(monkeypatch):
    """A search asked while the vocabulary is being read in the background goes in
    between two pages: it does not wait for the whole read (0.6-0.8 s in the page)."""
    monkeypatch.setattr(figures, "VOCABULARY_PAGE", 4)

    idx = QueryIndex(DuckDBEngine())
    await idx.apply("session-created", "a", SessionMeta("a", "a", 1, 1).to_record())
    await idx.apply("messages-appended", "a", [_msg(i, "a", f"w{i} w{i + 1} common") for i in range(40)])
    fresh = QueryIndex(idx.engine)
    log = _slowed(idx.engine, "WHERE tid >", 0.1)
    await search(fresh, "w7 common", limit=3)
    while not any("WHERE tid >" in sql for sql in log):
        await asyncio.sleep(0.005)
    hits = await search(fresh, "w30 common", limit=3)
    pages_before = sum("WHERE tid >" in sql for sql in log)
    await fresh._vocabulary
    before = pages_before
    pages = sum("WHERE tid >" in sql for sql in log)
    whole = fresh._figures.whole
    assert hits and "w30" in hits[0].message.content
    assert pages == 11 and whole  # 42 terms, 4 a page
    assert before <= 2, before
