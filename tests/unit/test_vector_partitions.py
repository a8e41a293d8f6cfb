"""Filtered semantic and hybrid search read a copy of the vectors their filter admits
(``chatmem.index.partitions``): the same hits as a scan of the whole table, through appends,
deletes, a session moving to another character and a change of embedder."""

from __future__ import annotations

import random
from typing import Any

import pytest

import chatmem
from chatmem.embedding import HashingEmbedder
from chatmem.index import partitions

WORDS = "garden tomato river stone cloud violin harbor lantern pepper meadow falcon copper".split()


def _text(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=6))


async def _memory() -> tuple[Any, dict[str, list[str]]]:
    rng = random.Random(7)
    mem = await chatmem.open(embedder=HashingEmbedder(dimensions=64))
    sessions: dict[str, list[str]] = {}
    for c in ("ada", "bo", "cy", "di"):
        for _ in range(2):
            s = await mem.sessions.create(title=c, character_id=c)
            sessions.setdefault(c, []).append(s.session_id)
            await mem.messages.append_many(
                s.session_id,
                [{"role": rng.choice(["user", "assistant"]), "content": _text(rng)} for _ in range(15)],
            )
    return mem, sessions


FILTERS: list[dict[str, Any]] = [
    {"character_ids": ["ada"]},
    {"character_ids": ["bo", "cy"]},
    {"roles": ["user"], "character_ids": ["di"]},
]


async def _both(
    mem: Any, monkeypatch: pytest.MonkeyPatch, query: str, **kw: Any
) -> tuple[list[Any], list[Any]]:
    """(hits read from the copy, hits from a scan of the table), as comparable tuples."""

    def shape(hits: list[Any]) -> list[Any]:
        return [(h.message.id, round(h.score, 6), h.breakdown.get("semantic_rank")) for h in hits]

    monkeypatch.setattr(partitions, "PARTITION_FROM", 1)
    copied = shape(await mem.search(query, limit=8, **kw))
    monkeypatch.setattr(partitions, "PARTITION_FROM", 10**9)
    scanned = shape(await mem.search(query, limit=8, **kw))
    monkeypatch.setattr(partitions, "PARTITION_FROM", 1)
    return copied, scanned


async def _partition_tables(mem: Any) -> int:
    rows = await mem.sql(
        "SELECT count(*) AS n FROM duckdb_tables() WHERE temporary AND table_name LIKE 'vector_partition_%'"
    )
    return int(rows[0]["n"])


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
async def test_a_filter_reads_its_copy_and_finds_what_a_scan_finds(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem, _ = await _memory()
    try:
        for flt in FILTERS:
            copied, scanned = await _both(mem, monkeypatch, "tomato river lantern", mode=mode, **flt)
            assert copied and copied == scanned, flt
        assert await _partition_tables(mem) == len(FILTERS)
    finally:
        await mem.close()


async def test_the_copy_follows_appends_deletes_and_a_move_to_another_character(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mem, sessions = await _memory()
    monkeypatch.setattr(partitions, "PARTITION_FROM", 1)
    try:
        q = "violin harbor falcon"
        before = await mem.search(q, mode="semantic", limit=5, character_ids=["ada"])
        assert before
        # an append to the character's session: the new message is read from the copy
        new = await mem.messages.append(sessions["ada"][0], "user", q)
        after = await mem.search(q, mode="semantic", limit=5, character_ids=["ada"])
        assert after[0].message.id == new.id
        # a delete: gone from the copy as well
        await mem.sessions.delete_messages(sessions["ada"][0], [new.id])
        again = await mem.search(q, mode="semantic", limit=5, character_ids=["ada"])
        assert new.id not in [h.message.id for h in again]
        copied, scanned = await _both(mem, monkeypatch, q, mode="semantic", character_ids=["ada"])
        assert copied == scanned
        # a session of another character moves to this one (as a pulled change can move it):
        # its messages join the filter
        moved = sessions["bo"][0]
        index = await mem.index.ready()
        await index.apply("session-updated", moved, {"characterId": "ada"})
        for mode in ("semantic", "hybrid"):
            copied, scanned = await _both(mem, monkeypatch, q, mode=mode, character_ids=["ada"])
            assert copied == scanned
            ids = {
                h.message.session_id for h in await mem.search(q, mode=mode, limit=50, character_ids=["ada"])
            }
            assert moved in ids
    finally:
        await mem.close()


async def test_a_filter_that_admits_most_rows_scans_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    mem, _ = await _memory()
    monkeypatch.setattr(partitions, "PARTITION_FROM", 1)
    try:
        copied, scanned = await _both(
            mem, monkeypatch, "copper meadow", mode="semantic", character_ids=["ada", "bo", "cy"]
        )
        assert copied == scanned
        assert await _partition_tables(mem) == 0
    finally:
        await mem.close()


async def test_another_embedder_gets_copies_of_its_own_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    mem, _ = await _memory()
    monkeypatch.setattr(partitions, "PARTITION_FROM", 1)
    try:
        await mem.search("stone cloud", mode="semantic", character_ids=["cy"])
        await mem.set_embedder(HashingEmbedder(dimensions=32))
        copied, scanned = await _both(mem, monkeypatch, "stone cloud", mode="semantic", character_ids=["cy"])
        assert copied and copied == scanned
    finally:
        await mem.close()


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
async def test_a_copy_dropped_under_a_search_is_replaced_by_a_scan(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another search may drop every copy (after a write) between this search's choice of
    its copy and its statement: the search then scans the table and answers the same."""
    mem, _ = await _memory()
    try:
        copied, scanned = await _both(mem, monkeypatch, "pepper falcon", mode=mode, character_ids=["bo"])

        async def gone(self: Any, where: str, params: list[Any], vectors: int) -> str:
            return "vector_partition_gone"

        monkeypatch.setattr(partitions.VectorPartitions, "table_for", gone)
        hits = await mem.search("pepper falcon", mode=mode, limit=8, character_ids=["bo"])
        assert [(h.message.id, round(h.score, 6), h.breakdown.get("semantic_rank")) for h in hits] == scanned
    finally:
        await mem.close()
