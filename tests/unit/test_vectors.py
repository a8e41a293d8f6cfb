"""Compact vectors: int8 with a scale, one row per message and model, the same similarity
in every breakdown, and no re-counting of missing vectors on every search."""

from __future__ import annotations

import math
import random
from typing import Any

from chatmem.embedding import HashingEmbedder
from chatmem.index import DuckDBEngine, QueryIndex, RetrievalConfig, retrieve, search
from chatmem.index.embeddings import EMBEDDING_COLUMNS, embedding_rows, quantize
from chatmem.records.models import SessionMeta


class CalibratedHashing(HashingEmbedder):
    """The hashing embedder with a calibration and a context weight, as the static model has."""

    calibration = (0.2, 0.8)
    context_weight = 0.3

    def __init__(self) -> None:
        super().__init__(64)
        self.model = "hashing-cal-64"


TEXTS = [
    "the quick brown fox jumps over the dog",
    "a lazy dog sleeps all day long",
    "quick brown foxes are jumping high",
    "the tax report is due on friday",
    "we watched the football match last night",
]


def _msg(i: int, text: str, sid: str = "s") -> dict:
    return {
        "id": f"{sid}-m{i}",
        "sessionId": sid,
        "seq": i,
        "role": "user",
        "content": text,
        "createdAt": 1_000 + i,
    }


async def _index(emb=None) -> QueryIndex:
    idx = QueryIndex(DuckDBEngine(), embedder=emb)
    await idx.apply("session-created", "s", SessionMeta("s", "t", 1, 1).to_record())
    await idx.apply("messages-appended", "s", [_msg(i, t) for i, t in enumerate(TEXTS)])
    return idx


def _cos(a, b) -> float:
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_quantize_keeps_the_cosine():
    """An int8 vector times its scale is a unit vector whose cosine with another is within 2e-3."""
    rng = random.Random(3)
    for _ in range(50):
        a = [rng.gauss(0, 1) for _ in range(384)]
        b = [rng.gauss(0, 1) for _ in range(384)]
        q, scale = quantize(a)
        assert all(-127 <= x <= 127 and isinstance(x, int) for x in q) and max(map(abs, q)) == 127
        assert abs(math.sqrt(sum(x * x for x in q)) * scale - 1.0) < 1e-9
        nb = math.sqrt(sum(x * x for x in b))
        approx = scale * sum(x * y / nb for x, y in zip(q, b))
        assert abs(approx - _cos(a, b)) < 2e-3
    assert quantize([0.0, 0.0, 0.0]) == ([0, 0, 0], 0.0)


async def test_one_int8_row_per_message_and_model():
    """Each message has one row per model: int8 ``vec`` and, for a context embedder, ``cvec``
    (NULL for a session's first message, whose in-context vector is its own)."""

    idx = await _index()
    emb = CalibratedHashing()
    assert await idx.embed_missing(emb) == len(TEXTS)
    assert await idx.embed_missing(HashingEmbedder(32)) == len(TEXTS)
    types = await idx.sql(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = 'embeddings' ORDER BY ordinal_position"
    )
    assert [r["column_name"] for r in types] == EMBEDDING_COLUMNS
    assert {r["column_name"]: r["data_type"] for r in types}["vec"] == "TINYINT[]"
    rows = await idx.sql(
        "SELECT model, count(*) AS n, count(cvec) AS c FROM embeddings GROUP BY model ORDER BY model"
    )
    assert rows == [
        {"model": "hashing-cal-64", "n": 5, "c": 4},
        {"model": "hashing-v1-32", "n": 5, "c": 0},
    ]
    rows = await idx.sql("SELECT len(vec) AS d, scale FROM embeddings WHERE model = 'hashing-cal-64'")
    assert all(r["d"] == 64 and 0 < r["scale"] < 1 for r in rows)
    await idx.close()


async def test_similarity_means_the_raw_cosine_everywhere():
    """``similarity`` is the raw cosine in semantic and hybrid search and in retrieve;
    ``semantic`` (search) and ``relevance`` (retrieve) are the calibrated similarity."""

    emb = CalibratedHashing()
    idx = await _index()
    query = "quick brown fox"
    (qv,) = await emb.embed([query])
    own = {mid: v for mid, v in zip([f"s-m{i}" for i in range(len(TEXTS))], await emb.embed(TEXTS))}
    lo, hi = emb.calibration
    sem = await search(idx, query, mode="semantic", limit=5, embedder=emb)
    hyb = await search(idx, query, mode="hybrid", limit=5, embedder=emb)
    ret = await retrieve(
        idx,
        "s",
        query,
        RetrievalConfig(strategy="relevant", recent_count=5, relevance_threshold=-1.0),
        embedder=emb,
    )
    assert sem and hyb and ret
    for h in sem + hyb + ret:
        raw = _cos(qv, own[h.message.id])
        assert abs(h.breakdown["similarity"] - raw) < 2e-3, (h.message.id, h.breakdown, raw)
    for h in sem:
        assert (
            abs(h.breakdown["semantic"] - max(-1.0, min(1.0, (h.breakdown["similarity"] - lo) / (hi - lo))))
            < 1e-6
        )
    by_id = {h.message.id: h for h in sem}
    for h in ret:
        assert abs(h.breakdown["relevance"] - by_id[h.message.id].breakdown["semantic"]) < 1e-6
        assert abs(h.breakdown["similarity"] - by_id[h.message.id].breakdown["similarity"]) < 1e-9
    await idx.close()


async def test_ranking_reads_the_in_context_vector():
    """Semantic search ranks by the in-context vector (cvec) when the embedder stores one."""

    emb = CalibratedHashing()
    idx = await _index()
    hits = await search(idx, "lazy dog", mode="semantic", limit=5, embedder=emb)
    rows = await embedding_rows(
        emb, [(f"s-m{i}", t, TEXTS[i - 1] if i else None) for i, t in enumerate(TEXTS)]
    )
    (qv,) = await emb.embed(["lazy dog"])

    def rank_sim(r):
        vec, scale = (r[5], r[6]) if r[5] is not None else (r[3], r[4])
        return scale * sum(x * y for x, y in zip(vec, qv)) / math.sqrt(sum(y * y for y in qv))

    expected = [r[0] for r in sorted(rows, key=lambda r: -rank_sim(r))]
    assert [h.message.id for h in hits] == expected
    await idx.close()


async def test_a_complete_index_is_not_recounted_until_a_write():
    """Once every message has a vector, searches run no counting queries; a new message
    makes the next search count and embed it."""

    emb = HashingEmbedder(64)
    idx = await _index()
    seen: list[str] = []
    run = idx.engine.execute

    async def spy(sql, params=None, **kw):
        seen.append(sql)
        return await run(sql, params, **kw)

    idx.engine.execute = spy  # type: ignore[method-assign]
    await search(idx, "fox", mode="semantic", embedder=emb)
    await search(idx, "fox", mode="semantic", embedder=emb)
    seen.clear()
    await search(idx, "fox", mode="hybrid", embedder=emb)
    assert not any(
        s.startswith("SELECT count(*) AS n FROM") and ("messages" in s or "embeddings" in s) for s in seen
    ), seen
    await idx.apply("messages-appended", "s", [_msg(9, "a brown fox again")])
    hits = await search(idx, "brown fox again", mode="semantic", limit=1, embedder=emb)
    assert hits[0].message.id == "s-m9"
    assert (await idx.sql("SELECT count(*) AS n FROM embeddings"))[0]["n"] == len(TEXTS) + 1
    await idx.close()


SESSIONS = {
    "a": [
        "the quick brown fox jumps over the dog",
        "ok thanks",
        "a lazy dog sleeps all day long",
        "ok thanks",
        "foxes and dogs in the garden",
    ],
    "b": [
        "ok thanks",
        "the tax report is due on friday",
        "a brown dog barks at the fox",
        "we watched the football match last night",
    ],
}


async def _two_sessions(emb=None) -> QueryIndex:
    """Two sessions, both roles, distinct times and repeated texts (identical vectors: ties)."""
    idx = QueryIndex(DuckDBEngine(), embedder=emb)
    for n, (sid, texts) in enumerate(SESSIONS.items()):
        await idx.apply("session-created", sid, SessionMeta(sid, "t", 1, 1).to_record())
        await idx.apply(
            "messages-appended",
            sid,
            [
                {
                    "id": f"{sid}-m{i}",
                    "sessionId": sid,
                    "seq": i,
                    "role": ("user", "assistant")[i % 2],
                    "content": t,
                    "createdAt": 1_000 * (n + 1) + i,
                }
                for i, t in enumerate(texts)
            ],
        )
    return idx


async def test_vector_rows_carry_the_message_filters_and_model_key():
    """Every vector row holds its message's session_id, role and created_at and its model's
    key, whether written with the message (an index embedder) or later (embed_missing)."""
    from chatmem.index.embeddings import model_key

    emb, other = CalibratedHashing(), HashingEmbedder(32)
    idx = await _two_sessions(emb)  # embedded as the messages are written
    assert await idx.embed_missing(emb) == 0
    assert await idx.embed_missing(other) == sum(len(t) for t in SESSIONS.values())
    rows = await idx.sql(
        "SELECT e.model, e.model_key, e.session_id = m.session_id AND e.role = m.role "
        "AND e.created_at = m.created_at AS same FROM embeddings e LEFT JOIN messages m ON m.id = e.message_id"
    )
    assert len(rows) == 2 * sum(len(t) for t in SESSIONS.values())
    assert all(r["same"] is True for r in rows)
    assert {r["model"]: r["model_key"] for r in rows} == {m: model_key(m) for m in (emb.model, other.model)}
    assert model_key(emb.model) != model_key(other.model) and 0 <= model_key(emb.model) < 2**53
    await idx.close()


async def test_semantic_search_equals_the_ranking_joined_to_messages():
    """Semantic search filters and breaks ties on the vector rows alone; it answers exactly
    what the same ranking over ``messages`` (their filters, their times) answers."""
    from chatmem.index.embeddings import cosine_sql, query_literal
    from chatmem.index.hits import build_filters

    emb = CalibratedHashing()
    idx = await _two_sessions()
    await idx.embed_missing(emb)
    lo, hi = emb.calibration
    cases = [
        {},
        {"roles": ["user"]},
        {"session_ids": ["b"]},
        {"date_range": (1_002, 2_002)},
        {"roles": ["assistant"], "session_ids": ["a", "b"], "date_range": (None, 2_001)},
    ]
    for query in ("ok thanks", "brown fox", "a dog in the garden"):
        (qv,) = await emb.embed([query])
        for kw in cases:
            for limit in (1, 2, 3, None):
                got = await search(idx, query, mode="semantic", limit=limit, embedder=emb, **kw)
                flt = build_filters(kw.get("session_ids"), None, kw.get("date_range"), kw.get("roles"))
                ref = await idx.sql(
                    f"WITH q AS (SELECT CAST(? AS FLOAT[]) AS v) SELECT m.id, "
                    f"round(greatest(-1.0, least(1.0, ({cosine_sql()} - {lo}) / {hi - lo})), 9) AS score, "
                    f"coalesce({cosine_sql(context=True)}, {cosine_sql()}) AS rsim, m.created_at "
                    f"FROM embeddings e CROSS JOIN q JOIN messages m ON m.id = e.message_id "
                    f"WHERE e.model = ? AND {flt.sql} ORDER BY rsim DESC, score DESC, m.created_at DESC, "
                    f"m.id DESC" + (f" LIMIT {limit}" if limit else ""),
                    [query_literal(qv), emb.model] + flt.params,
                )
                assert [(h.message.id, h.score) for h in got] == [(r["id"], r["score"]) for r in ref], (
                    query,
                    kw,
                )
    # without a context vector the repeated "ok thanks" rows tie: the newer comes first
    plain = HashingEmbedder(64)
    top = await search(idx, "ok thanks", mode="semantic", limit=3, embedder=plain)
    assert len({h.score for h in top}) == 1
    assert [h.message.id for h in top] == ["b-m0", "a-m3", "a-m1"]
    await idx.close()


async def test_hybrid_filters_hold_without_a_join():
    """Hybrid's rankings are filtered where they are read: every fused hit passes the filters."""

    emb = CalibratedHashing()
    idx = await _two_sessions(emb)
    for kw in ({"roles": ["user"]}, {"session_ids": ["b"]}, {"date_range": (1_002, 2_002)}):
        hits = await search(idx, "brown dog fox thanks", mode="hybrid", limit=None, embedder=emb, **kw)
        assert hits
        for h in hits:
            m = h.message
            assert m.role in kw.get("roles", [m.role])
            assert h.session_id in kw.get("session_ids", [h.session_id])
            lo_t, hi_t = kw.get("date_range", (None, None))
            assert (lo_t is None or m.created_at >= lo_t) and (hi_t is None or m.created_at <= hi_t)
    await idx.close()


async def _filled(path, embedder, texts: list[str]):
    """A ``Memory`` (SQLite store at ``path``, in-memory DuckDB index) whose one session
    holds ``texts`` as user messages; returns it and the session id."""
    from chatmem import Memory
    from chatmem.stores.sqlite import SQLiteStore

    async def engine():
        return DuckDBEngine()

    mem = Memory(SQLiteStore(str(path)), engine_factory=engine, embedder=embedder)
    s = await mem.sessions.create(title="t")
    await mem.messages.append_many(s.session_id, [{"role": "user", "content": t} for t in texts])
    return mem, s.session_id


async def test_background_embedding_reads_a_part_at_a_time_and_saves_after_each_chunk(monkeypatch, tmp_path):
    """``embed_in_background`` finds ``chunk`` missing messages at a time, reads their text
    ``missing.READ`` at a time (one answer each), embeds every one, and asks for a save of
    the index cache after each ``chunk`` and once at the end."""
    from chatmem.index import missing as missing_mod

    monkeypatch.setattr(missing_mod, "READ", 3)

    mem, _ = await _filled(
        tmp_path / "m.db", HashingEmbedder(32), [f"note {i} about the garden" for i in range(23)]
    )
    index = await mem.index.ready()
    reads, saves = [], []
    missing = index.embed_missing

    async def counted(*a, **kw):
        n = await missing(*a, **kw)
        reads.append((kw["limit"], n))
        return n

    index.embed_missing = counted
    answers, execute = [], index.execute

    async def answered(sql, *a, **kw):
        rows = await execute(sql, *a, **kw)
        if rows and "text" in rows[0]:
            answers.append(len(rows))
        return rows

    index.execute = answered
    mem.index._schedule_save = lambda soon=False: saves.append(sum(n for _, n in reads))
    done = await mem.index.embed_in_background(batch_size=2, chunk=8)
    rows = await execute("SELECT count(*) AS n FROM embeddings")
    temp = await execute("SELECT count(*) AS n FROM duckdb_tables() WHERE table_name LIKE 'embed_todo%'")
    progress = mem.index.embed_progress
    await mem.close()
    stored = int(rows[0]["n"])
    temp = int(temp[0]["n"])
    assert done == stored == 23 and progress == (23, 23)
    assert reads == [(8, 8), (8, 8), (8, 7), (8, 0)]
    assert answers == [3, 3, 2] * 2 + [3, 3, 1]  # never more than READ texts in one answer
    assert saves == [8, 16, 23]
    assert temp == 0  # the found rows' table is dropped after each chunk


async def test_background_embedding_waits_for_the_search_figures_then_loads_the_model(tmp_path):
    """``embed_in_background`` lets the background read a search started (the vocabulary,
    the docs, the rarest postings) finish, then loads the model, then embeds: in the page
    the reads and the model's download side by side made tasks over 50 ms."""
    events: list[tuple[str, bool]] = []

    class Loading(HashingEmbedder):
        async def load(self) -> None:
            events.append(("load", reading.done()))

        async def embed(self, texts):
            events.append(("embed", reading.done()))
            return await super().embed(texts)

    reading: Any = None
    mem, _ = await _filled(tmp_path / "m.db", Loading(16), [f"note {i} about the garden" for i in range(30)])
    assert await mem.search("garden", limit=3)
    index = await mem.index.ready()
    reading = index._vocabulary
    under_way = reading is not None and not reading.done()
    done = await mem.index.embed_in_background(batch_size=8)
    await mem.close()
    assert under_way and done == 30
    assert events[0] == ("load", True) and all(ok for _, ok in events)
    assert [e for e, _ in events].count("embed") >= 4


async def test_background_embedding_with_an_embedder_whose_load_is_not_a_coroutine(tmp_path):
    """``StaticEmbedder`` (usable as an embedder) has a class method ``load`` that reads a
    model file: ``embed_in_background`` calls only an ``async load()``."""

    class FileLoad(HashingEmbedder):
        @classmethod
        def load(cls, path=None):
            raise AssertionError("a synchronous load is not the embedder's warm-up")

    mem, _ = await _filled(tmp_path / "m.db", FileLoad(16), [f"note {i}" for i in range(5)])
    done = await mem.index.embed_in_background()
    await mem.close()
    result = done
    assert result == 5


async def test_background_embedding_saves_soon_at_the_end_also_after_a_whole_last_chunk(tmp_path):
    """A run whose last chunk is whole asks for that chunk's (possibly delayed) save, then
    at the end for a soon one: what it embedded reaches the cache file soon."""

    mem, _ = await _filled(tmp_path / "m.db", HashingEmbedder(16), [f"note {i}" for i in range(16)])
    await mem.index.ready()
    asked: list[tuple[int, bool]] = []

    def schedule(*, soon: bool = False) -> None:
        asked.append((mem.index.embed_progress[0], soon))

    mem.index._schedule_save = schedule
    done = await mem.index.embed_in_background(batch_size=4, chunk=8)
    await mem.close()
    assert done == 16 and asked == [(8, False), (16, False), (16, True)]
