"""The cached index file stays small: its text is ZSTD-compressed, a save reuses the blocks of
the copy it replaces, and a file of an older storage version is replaced (with a notice).

On CPython the cache is a DuckDB file (``DuckDBEngine(path)``), the same file format as the
page's OPFS file (tests/browser/test_index_file_browser.py checks the page's)."""

from __future__ import annotations

import os
import random

import duckdb

from chatmem import Memory
from chatmem.index import DuckDBEngine
from chatmem.index.schema import STORAGE_VERSION, storage_at_least
from conftest import run
from conftest import sqlite_memory as _mem


def _words(rng: random.Random, k: int) -> str:
    return " ".join("".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 8))) for _ in range(k))


async def _fill(mem: Memory, sessions: int, per: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    ids = []
    for s in range(sessions):
        sess = await mem.sessions.create(title=f"s{s}")
        ids.append(sess.session_id)
        await mem.messages.append_many(
            sess.session_id,
            [{"role": "user", "content": _words(rng, rng.randint(30, 150))} for _ in range(per)],
        )
    return ids


async def _answers(mem: Memory) -> dict:
    out = {}
    for q in ["abc", "abcd efg", "hij"]:
        out[q] = [(h.message.id, round(h.score, 9)) for h in await mem.search(q, limit=10)]
    out["n"] = await mem.sql("SELECT count(*) AS n, sum(length(text)) AS chars FROM messages")
    return out


def _storage_tag(con) -> str:
    return con.execute(
        "SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()[0]


def _file_facts_tag(path: str) -> str:
    con = duckdb.connect(path, read_only=True)
    try:
        return _storage_tag(con)
    finally:
        con.close()


def _file_facts(path: str) -> dict:
    con = duckdb.connect(path, read_only=True)
    try:
        tag = _storage_tag(con)
        comp = {
            r[0]
            for r in con.execute(
                "SELECT compression FROM pragma_storage_info('messages') "
                "WHERE column_name = 'text' AND segment_type = 'VARCHAR'"
            ).fetchall()
        }
        size = con.execute("PRAGMA database_size").fetchone()
        return {"storage": tag, "text_compression": comp, "blocks": size[3], "free_blocks": size[5]}
    finally:
        con.close()


async def test_saved_file_keeps_text_zstd_compressed(tmp_path):
    """A new cache file has a storage version with ZSTD, and its messages' text uses it."""
    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    mem = _mem(db, idx)
    await _fill(mem, 3, 40)
    await mem.search("abc")
    await mem.close()
    facts = _file_facts(idx)
    assert storage_at_least(facts["storage"], STORAGE_VERSION), facts
    assert facts["text_compression"] == {"ZSTD"}, facts


async def test_saves_after_catch_ups_do_not_grow_the_file(tmp_path):
    """Each reopening after writes elsewhere catches up in the file, which is then copied
    into memory (here at close) and saved back whole: the save reuses the blocks of the
    copy it replaces, so the file stays the size of one copy (replacing it in one
    transaction left it twice that; writes left in place, 45-62 blocks for 25), and
    answers stay exact."""
    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    mem = _mem(db, idx)
    ids = await _fill(mem, 8, 150)
    await mem.search("abc")
    await mem.close()
    first = _file_facts(idx)["blocks"]
    rng = random.Random(5)
    for round_ in range(3):
        other = _mem(db, None)  # a write while no index is open
        await other.messages.append(ids[round_], "user", _words(rng, 60))
        await other.close()
        mem = _mem(db, idx)
        got = await _answers(mem)
        assert mem.index.last_open["mode"] == "cached" and mem.index.last_open["refreshed"] == 1
        await mem.close()
        facts = _file_facts(idx)
        assert facts["blocks"] <= first + 3, (round_, first, facts)
    fresh = _mem(db, None)
    assert await _answers(fresh) == got
    await fresh.close()


async def test_index_file_of_older_storage_version_is_replaced_with_a_notice(tmp_path):
    """A cache file in DuckDB's default (older) storage version, which cannot hold ZSTD
    columns, is replaced by a new file and rebuilt from the store; the notice says so."""
    db, idx = str(tmp_path / "store.db"), str(tmp_path / "index.duckdb")

    mem = _mem(db, None)
    await _fill(mem, 2, 20)
    want = await _answers(mem)
    await mem.close()
    con = duckdb.connect(idx)  # the default storage version, as an earlier chatmem made it
    con.execute("CREATE TABLE index_meta (key VARCHAR, value VARCHAR)")
    con.execute("INSERT INTO index_meta VALUES ('schema', '6'), ('complete', '1')")
    con.close()
    assert not storage_at_least(_file_facts_tag(idx), STORAGE_VERSION)

    async def reopen():
        mem = _mem(db, idx)
        got = await _answers(mem)
        notice = mem.index.notice
        await mem.close()
        return got, notice

    got, notice = run(reopen())
    assert got == want
    assert notice and "older version" in notice
    facts = _file_facts(idx)
    assert storage_at_least(facts["storage"], STORAGE_VERSION) and facts["text_compression"] == {"ZSTD"}


async def test_a_database_file_that_is_not_an_index_is_left_alone(tmp_path):
    """``DuckDBEngine(path)`` replaces only index files: any other DuckDB file is opened as it is."""
    path = str(tmp_path / "mine.duckdb")
    con = duckdb.connect(path)
    con.execute("CREATE TABLE notes AS SELECT 1 AS x")
    con.close()

    eng = DuckDBEngine(path)
    rows = await eng.execute("SELECT x FROM notes")
    await eng.close()
    notice = eng.notice
    assert rows == [{"x": 1}] and notice is None
    assert os.path.getsize(path) > 0
