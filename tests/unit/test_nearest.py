"""How search uses an engine's approximate index (``chatmem.index.nearest``): which
searches ask it, and that its rows rank, score and fuse as a scan's do. The index
itself is the page's (``web/js/nearest.js``, tests/browser/test_nearest_browser.py);
here an engine answers ``nearest`` with an exact ranking, so the hits must be equal."""

from __future__ import annotations

import math
import random
from typing import Any

import duckdb
import pytest

import chatmem
from chatmem.embedding import HashingEmbedder
from chatmem.index import nearest
from chatmem.index.embeddings import cosine_sql, rank_cosine_sql, vector_literal
from chatmem.index.search import RRF_DEPTH
from chatmem.index.sql_engine import may_rewrite_embeddings
from nearest_cases import REWRITES

WORDS = "garden tomato river stone cloud violin harbor lantern pepper meadow falcon copper".split()


def test_the_rows_found_become_the_semantic_ranking_cte() -> None:
    con = duckdb.connect()
    cte = nearest.nearest_cte([["it's", "b"], [5, None], [0.5, math.nan], [0.75, 0.25]])
    rows = con.execute(f"WITH {cte} SELECT * FROM sem").fetchall()
    assert rows == [("it's", 5, 0.5, 0.75), ("b", None, None, 0.25)]
    empty = con.execute(f"WITH {nearest.nearest_cte([[], [], [], []])} SELECT * FROM sem").fetchall()
    assert empty == []


def test_the_candidates_grow_with_the_index() -> None:
    assert nearest.candidates(1_000, 10) == nearest.MIN_CANDIDATES
    assert nearest.candidates(100_000, 26) == 100_000 // nearest.CANDIDATE_SHARE
    assert nearest.candidates(1_000, 500) == 2_000
    assert nearest.candidates(1_000_001, 10) == -(-1_000_001 // nearest.CANDIDATE_SHARE)


async def _memory() -> Any:
    rng = random.Random(11)
    mem = await chatmem.open(embedder=HashingEmbedder(dimensions=64))
    for c in ("ada", "bo"):
        s = await mem.sessions.create(title=c, character_id=c)
        await mem.messages.append_many(
            s.session_id,
            [
                {"role": rng.choice(["user", "assistant"]), "content": " ".join(rng.choices(WORDS, k=6))}
                for _ in range(40)
            ],
        )
    await mem.search("warm up", mode="semantic", limit=1)  # opens the index, embeds every message
    return mem


def _exact_nearest(engine: Any, calls: list[tuple[int, int]]) -> Any:
    async def answer(
        model_key: int, dim: int, vector: list[float], k: int, candidates: int, filter: Any = None
    ) -> list[list[Any]]:
        assert filter is None, "an unfiltered search asks for every row"
        calls.append((k, candidates))
        rows = await engine.execute(
            f"SELECT e.message_id, e.created_at, {cosine_sql()} AS sim, {rank_cosine_sql()} AS rsim "
            "FROM embeddings e CROSS JOIN (SELECT CAST(? AS FLOAT[]) AS v) q "
            f"WHERE e.model_key = {model_key} AND e.dim = {dim} ORDER BY rsim DESC, e.message_id DESC LIMIT {k}",
            [vector_literal(vector)],
        )
        return [[r[c] for r in rows] for c in ("message_id", "created_at", "sim", "rsim")]

    return answer


def _shape(hits: list[Any]) -> list[Any]:
    return [
        (
            h.message.id,
            round(h.score, 6),
            h.breakdown.get("semantic_rank"),
            round(h.breakdown.get("similarity", 0), 6),
        )
        for h in hits
    ]


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
async def test_an_engine_s_nearest_rows_answer_as_the_scan(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = await _memory()
    try:
        scanned = _shape(await mem.search("tomato river lantern", mode=mode, limit=8))
        engine = mem.index.query_index.engine
        calls: list[tuple[int, int]] = []
        monkeypatch.setattr(engine, "nearest", _exact_nearest(engine, calls))
        monkeypatch.setattr(nearest, "NEAREST_FROM", 1)
        found = _shape(await mem.search("tomato river lantern", mode=mode, limit=8))
        assert calls, "an unfiltered search over the index asked the engine"
        assert found and found == scanned
        k, cands = calls[-1]
        assert k == (8 + 16 if mode == "semantic" else RRF_DEPTH) and cands == nearest.candidates(80, k)
    finally:
        await mem.close()


@pytest.mark.parametrize(
    "kw",
    [
        {"character_ids": ["ada"]},
        {"limit": None},
        {"threshold": 0.1},
    ],
)
async def test_a_filter_a_threshold_or_every_hit_stays_exact(
    kw: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = await _memory()
    try:
        engine = mem.index.query_index.engine
        calls: list[tuple[int, int]] = []
        monkeypatch.setattr(engine, "nearest", _exact_nearest(engine, calls))
        monkeypatch.setattr(nearest, "NEAREST_FROM", 1)
        await mem.search("tomato river", mode="semantic", **{"limit": 5, **kw})
        assert calls == []
        monkeypatch.setattr(nearest, "NEAREST_FROM", 10**9)
        await mem.search("tomato river", mode="semantic", limit=5)
        assert calls == [], "below NEAREST_FROM the vectors are scanned"
    finally:
        await mem.close()


async def test_the_cpython_engine_keeps_no_approximate_index() -> None:
    mem = await _memory()
    try:
        engine = mem.index.query_index.engine
        assert await engine.nearest(1, 64, [1.0] + [0.0] * 63, 5, 200) is None
    finally:
        await mem.close()


async def test_embedding_new_messages_appends_and_a_delete_rewrites() -> None:
    """What keeps derived vector copies in step: vectors of new messages are appended (their
    rows read by rowid), a delete of messages is a rewrite (everything read again)."""
    mem = await _memory()
    try:
        engine = mem.index.query_index.engine
        appended, rewritten = engine.embeddings_appended, engine.embeddings_rewritten
        s = await mem.sessions.create(title="more")
        (m,) = await mem.messages.append_many(s.session_id, [{"role": "user", "content": "violin harbor"}])
        await mem.search("violin", mode="semantic", limit=3)
        assert engine.embeddings_appended > appended
        assert engine.embeddings_rewritten == rewritten, "an append is not a rewrite"
        await mem.sessions.delete_messages(s.session_id, [m.id])
        await mem.search("violin", mode="semantic", limit=3)
        assert engine.embeddings_rewritten > rewritten
    finally:
        await mem.close()


@pytest.mark.parametrize("sql", list(REWRITES))
def test_which_statements_rewrite_the_embeddings(sql: str) -> None:
    """A save's copy into the cache file or a filter's copy reads ``embeddings`` without
    changing it; a delete, a rebuild, a switch of database or a rollback may change it."""
    assert may_rewrite_embeddings(sql) is REWRITES[sql]
