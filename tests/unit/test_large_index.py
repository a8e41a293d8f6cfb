"""A store too large for an index in memory: the index is derived into its cache file
and kept there (never copied into memory), its postings sorted by term in parts, and it
answers exactly like an index derived in memory. On CPython with the thresholds made
small; ``python build.py bench --huge`` runs the page at 1,000,000 messages."""

from __future__ import annotations

import asyncio

from chatmem import Memory
from chatmem.index import DuckDBEngine, QueryIndex, keywords, live
from chatmem.records.models import SessionMeta
from conftest import sqlite_memory as _mem

WORDS = ["apple", "banana", "cherry", "damson", "elder", "fig", "grape", "hazel", "kiwi", "lime"]


def run(coro):
    return asyncio.run(coro)


async def _fill(mem: Memory, sessions: int = 4, each: int = 12) -> list[str]:
    sids = []
    for s in range(sessions):
        meta = await mem.sessions.create(title=f"s{s}")
        sids.append(meta.session_id)
        await mem.messages.append_many(
            meta.session_id,
            [
                {
                    "role": ("user", "assistant")[i % 2],
                    "content": " ".join(WORDS[(s * 7 + i * j) % len(WORDS)] for j in range(1, 4 + i % 5)),
                }
                for i in range(each)
            ],
        )
    return sids


async def _answers(mem: Memory) -> dict:
    out = {}
    for q in ["apple", "banana cherry", '"fig grape"', "kiwi -lime", "zebra"]:
        out[q] = [(h.message.id, h.score) for h in await mem.search(q, limit=20)]
    out["df"] = await mem.sql("SELECT term, df FROM terms ORDER BY term")  # ids differ after writes
    out["stats"] = await mem.sql("SELECT n, total FROM stats")
    out["n"] = await mem.sql("SELECT count(*) AS n FROM messages")
    return out


def _small(monkeypatch) -> None:
    monkeypatch.setattr(live, "IN_MEMORY_MAX", 10)
    monkeypatch.setattr(keywords, "SORT_MESSAGES_MAX", 10)
    monkeypatch.setattr(keywords, "SORT_PART", 40)


async def test_a_large_store_is_derived_into_its_file_and_kept_there(tmp_path, monkeypatch):
    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    mem = _mem(db, None)
    sids = await _fill(mem)
    want = await _answers(mem)  # derived in memory, one sort
    await mem.close()

    _small(monkeypatch)
    mem = _mem(db, idx)
    mem.index.move_delay = 0
    assert await _answers(mem) == want
    assert mem.index.last_open["mode"] == "rebuilt" and not mem.index._cache.in_memory
    rows = await mem.index.query_index.execute("SELECT tid, doc FROM postings")
    assert [(r["tid"], r["doc"]) for r in rows] == sorted((r["tid"], r["doc"]) for r in rows)
    await mem.close()

    # reopened: answered from the file, which is never copied into memory
    mem = _mem(db, idx)
    mem.index.move_delay = 0
    assert await _answers(mem) == want and mem.index.last_open["mode"] == "cached"
    await mem.index._move_later()
    assert not mem.index._cache.in_memory
    # writes go to the file and are kept without a copy
    await mem.messages.append(sids[0], "user", "apple quince")
    await mem.sessions.delete(sids[1])
    after = await _answers(mem)
    assert not mem.index._cache.in_memory and len(await mem.search("quince")) == 1
    await mem.close()

    mem = _mem(db, idx)
    assert await _answers(mem) == after and mem.index.hydrations == 0
    await mem.close()
    monkeypatch.undo()
    fresh = _mem(db, None)
    assert await _answers(fresh) == after
    await fresh.close()


async def test_postings_sorted_in_parts_are_those_of_one_sort(monkeypatch):
    """The parts cut on the running count of postings per term: every term's postings in
    one part, the parts in term order, so the table is the one a single sort makes."""

    async def derive(part: int):
        monkeypatch.setattr(keywords, "SORT_PART", part)
        idx = QueryIndex(DuckDBEngine())
        sessions = [SessionMeta(f"s{s}", f"s{s}", 1, 1).to_record() for s in range(3)]
        msgs = [
            {
                "id": f"m{i:04d}",
                "sessionId": f"s{i % 3}",
                "seq": i,
                "role": "user",
                "content": " ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 2 + i % 7)) + f" w{i % 13}",
                "createdAt": 1_000 + (i * 37) % 90,
                "tokenCount": 1,
            }
            for i in range(90)
        ]
        await idx.rebuild(sessions, msgs)
        out = {t: await idx.execute(f"SELECT * FROM {t}") for t in ("postings", "terms", "stats", "docs")}
        out["messages"] = await idx.execute("SELECT id FROM messages ORDER BY created_at, id")
        await idx.close()
        return out

    one, parts, each = (await derive(10**9)), (await derive(25)), (await derive(1))
    assert len(one["postings"]) > 100
    assert parts == one and each == one
