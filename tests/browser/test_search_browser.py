"""The same search checks as on CPython, in Chromium against DuckDB-Wasm."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import Page, three_sessions
from search_checks import CHECKS

pytestmark = pytest.mark.browser

SETUP = """
import sys, pathlib, json
pathlib.Path('/home/pyodide/search_checks.py').write_text({src})
sys.path.insert(0, '/home/pyodide')
import search_checks
from chatmem.runtime.page import DuckDBWasmEngine

class Shared:
    # one DuckDB-Wasm instance for every check; each check starts from empty tables
    in_thread, columnar, persistent, notice = False, True, False, None
    def __init__(self, engine):
        self.engine = engine
        self.open_ms = dict()
    def derivation(self, store, session_counts):
        return None
    async def execute_small(self, sql, params=None):
        return await self.engine.execute(sql, params)
    async def execute(self, sql, params=None, **kw):
        return await self.engine.execute(sql, params, **kw)
    async def execute_read_only(self, sql, params=None):
        return await self.engine.execute_read_only(sql, params)
    async def executemany(self, sql, rows):
        return await self.engine.executemany(sql, rows)
    async def load_rows(self, table, columns, rows):
        return await self.engine.load_rows(table, columns, rows)
    async def execute_columns(self, sql, params=None):
        return await self.engine.execute_columns(sql, params)
    async def nearest(self, model_key, dim, vector, k, candidates, filter=None):
        return await self.engine.nearest(model_key, dim, vector, k, candidates, filter)
    async def close(self):
        pass

import builtins
builtins._search_engine = Shared(await DuckDBWasmEngine.open())
len(search_checks.CHECKS)
"""

RUN = """
import builtins, traceback, search_checks
from chatmem.index import QueryIndex
eng = builtins._search_engine
# the tables of the database (not the temporary ones: a write of the last check's
# index may still be under way with its own)
for t in [r["name"] for r in await eng.execute("SELECT table_name AS name FROM information_schema.tables "
                                               "WHERE table_schema = 'main' AND table_catalog <> 'temp'")]:
    await eng.execute('DROP TABLE IF EXISTS "' + t + '"')
check = next(c for c in search_checks.CHECKS if c.__name__ == {name!r})
index = QueryIndex(eng)
try:
    await check(index)
    out = "ok"
except BaseException:
    out = traceback.format_exc()
out
"""


@pytest.fixture(scope="module")
def search_page(page: Page) -> Page:
    src = (Path(__file__).parents[1] / "search_checks.py").read_text()
    assert page.py(SETUP.format(src=repr(src))) == len(CHECKS)
    return page


@pytest.mark.parametrize("name", [c.__name__ for c in CHECKS])
def test_search_check_in_browser(search_page: Page, name: str) -> None:
    result = search_page.py(RUN.format(name=name))
    assert result == "ok", result


TYPES = """
import builtins
eng = builtins._search_engine
rows = await eng.execute(
    "SELECT * FROM (VALUES "
    "(1::INTEGER, 5000000000::BIGINT, 1.5::DOUBLE, 0.25::FLOAT, 'a', 12.34::DECIMAL(10, 2), 7::HUGEINT, TRUE, [1, 2]), "
    "(NULL, -3::BIGINT, -2.5e300::DOUBLE, NULL, NULL, -0.01::DECIMAL(10, 2), -7::HUGEINT, NULL, NULL), "
    "((-2147483648)::INTEGER, 9007199254740991::BIGINT, 0.0::DOUBLE, 3.0::FLOAT, 'é ü', 0::DECIMAL(10, 2), 0::HUGEINT, FALSE, []))"
    " t(i, b, d, f, s, dec, h, o, l) ORDER BY b")
whole = await eng.execute("SELECT range::INTEGER AS i, range * 2 AS b, range / 4 AS d FROM range(5000)")
# a list's null items (toArray() of an integer list is its raw buffer, garbage at a null)
lists = await eng.execute("SELECT [1, NULL, -1]::TINYINT[] AS t, [NULL, 7]::INTEGER[] AS i, "
                          "[NULL, 2]::BIGINT[] AS b, [0.5, NULL]::DOUBLE[] AS d, ['a', NULL] AS s")
empty = await eng.execute("SELECT 1::INTEGER AS x, 'y' AS y WHERE FALSE")
[rows, whole[::1000] + whole[-1:], len(whole), empty, lists]
"""


def test_engine_answers_every_type_by_column(search_page: Page) -> None:
    """An answer crosses column by column (whole arrays for number columns without nulls):
    every type, nulls included, arrives as the row-wise form gave it."""
    rows, sample, n, empty, lists = search_page.py(TYPES)
    assert lists == [{"t": [1, None, -1], "i": [None, 7], "b": [None, 2], "d": [0.5, None], "s": ["a", None]}]
    assert rows == [
        {
            "i": None,
            "b": -3,
            "d": -2.5e300,
            "f": None,
            "s": None,
            "dec": -0.01,
            "h": -7,
            "o": None,
            "l": None,
        },
        {
            "i": 1,
            "b": 5000000000,
            "d": 1.5,
            "f": 0.25,
            "s": "a",
            "dec": 12.34,
            "h": 7,
            "o": True,
            "l": [1, 2],
        },
        {
            "i": -2147483648,
            "b": 9007199254740991,
            "d": 0.0,
            "f": 3.0,
            "s": "é ü",
            "dec": 0.0,
            "h": 0,
            "o": False,
            "l": [],
        },
    ]
    assert n == 5000 and empty == []
    assert sample == [{"i": k, "b": 2 * k, "d": k / 4} for k in (0, 1000, 2000, 3000, 4000, 4999)]


LOAD = """
import builtins
from chatmem.index.sql_engine import columns
eng = builtins._search_engine
await eng.execute("CREATE TABLE load_t (a VARCHAR, b BIGINT, c VARCHAR[], d FLOAT[], e BOOLEAN, f DOUBLE, "
                  "v TINYINT[], m VARCHAR)")
base = [
    ('x,"y"\\n\\\\N;\\r', 1, ["a,b", 'c"', ""], [0.5, 1.25], True, 0.5, [-127, 0, 127], "1"),
    (None, None, [], None, False, None, None, 2),
    ("\\\\N", -3, None, [], None, -1e300, [], None),
    ("東京 ünï \\U0001F600", 2**40, ["\\x1fodd"], [1.0], True, 3.0, [5] * 384, "x"),
    ("", 0, ["東京"], [2.5, None], False, 2**53 - 1, [1, None, -1], 3.5),
]
out = []
for n in (5, 1000):
    rows = (base * (n // len(base) + 1))[:n]
    await eng.execute("DELETE FROM load_t")
    await eng.load_rows("load_t", ["a", "b", "c", "d", "e", "f", "v", "m"], rows)
    got = await eng.execute("SELECT * FROM load_t")
    cols = await columns(eng, "SELECT * FROM load_t")
    out.append([len(got), [list(r.values()) for r in got[:5]], [list(r.values()) for r in got] == [list(t) for t in zip(*cols)]])
out.append(await columns(eng, "SELECT * FROM load_t WHERE FALSE"))
await eng.execute("DROP TABLE load_t")
out
"""


def test_bulk_load_keeps_every_value(search_page: Page) -> None:
    """``load_rows`` lays numbers, lists of numbers and strings straight into Arrow
    columns: quotes, newlines, multibyte and astral text, NULLs (also inside a list),
    big integers, empty lists and a column of mixed values (the generic builder) all
    arrive as sent; ``columns`` answers the same as ``execute``."""
    *loads, empty = search_page.py(LOAD)
    assert empty == []
    for n, (count, head, same) in zip((5, 1000), loads):
        assert count == n and same
        assert head == [
            ['x,"y"\n\\N;\r', 1, ["a,b", 'c"', ""], [0.5, 1.25], True, 0.5, [-127, 0, 127], "1"],
            [None, None, [], None, False, None, None, "2"],
            ["\\N", -3, None, [], None, -1e300, [], None],
            ["東京 ünï \U0001f600", 2**40, ["\x1fodd"], [1.0], True, 3.0, [5] * 384, "x"],
            ["", 0, ["東京"], [2.5, None], False, float(2**53 - 1), [1, None, -1], "3.5"],
        ]


STRINGS = """
import builtins
eng = builtins._search_engine
await eng.execute("CREATE TABLE str_t (a VARCHAR, b VARCHAR, c VARCHAR)")
rows = [(f"01J{i:023d}", "caf\\u00e9 \\U0001F600" if i % 7 == 0 else f"plain {i}", None if i % 3 else "")
        for i in range(1000)]
# a value ending with a lone high surrogate, the next starting with a lone low one
rows[10:12] = [("abc\\ud83d", "x", None), ("\\ude00def", "y", None)]
await eng.load_rows("str_t", ["a", "b", "c"], rows)
got = [tuple(r.values()) for r in await eng.execute("SELECT * FROM str_t")]
await eng.execute("DROP TABLE str_t")
[got, [tuple(r) for r in rows]]
"""


def test_bulk_load_encodes_string_columns_whole(search_page: Page) -> None:
    """A string column is encoded in one call: an all-ASCII column (ids), a column with
    multibyte and astral text, a column of NULLs and empty strings, and two values whose
    lone surrogates would make one character if joined all arrive as sent (a lone
    surrogate as U+FFFD, as when each value is encoded alone)."""
    got, sent = search_page.py(STRINGS)
    fix = {"abc\ud83d": "abc\ufffd", "\ude00def": "\ufffddef"}
    assert [tuple(v) for v in got] == [tuple(fix.get(x, x) for x in r) for r in sent]
    assert got[10][0] == "abc\ufffd" and got[11][0] == "\ufffddef"
    assert got[7][1] == "caf\u00e9 \U0001f600" and got[3][2] == "" and got[1][2] is None


# --------------------------------------------------------------------------- the cached index (OPFS)

CACHE_FILL = (
    three_sessions('"apple " + t + str(i)', 3)
    + """
hits = await mem.search("apple", limit=20)
out = {"n": len(hits), "open": mem.index.last_open, "cache": mem.index.cache, "ids": ids}
await mem.close()
out
"""
)

# after a reload: writes made before the first query, then the first query catches up
CACHE_REOPEN = """
import chatmem, builtins
mem = await chatmem.open(NAME)
await mem.messages.append(IDS[0], "user", "banana split")
await mem.sessions.delete(IDS[1])
hits = await mem.search("apple", limit=20)
builtins._cache_mem = mem  # stays open: this tab holds the cache file
out = {"n": len(hits), "open": mem.index.last_open, "hydrations": mem.index.hydrations,
       "banana": [h.session_id for h in await mem.search("banana")], "resync": mem.index.query_index.last_resync}
# the catch-up scheduled a background save, and the opening from the file a copy into
# memory (then a whole save): wait for both, and make no more, so that what this tab
# learns from here on is, as the test says, not saved (a later save would race the reload)
while (task := next((t for t in (mem.index._moving, mem.index._saving) if t is not None and not t.done()), None)):
    await task
mem.index.save_delay = mem.index.move_delay = 3600
out
"""

SECOND_TAB = """
import chatmem, builtins
mem = await chatmem.open(NAME)
hits = await mem.search("apple", limit=20)
await mem.messages.append(IDS[2], "assistant", "cherry pie")
builtins._cache_mem2 = mem
{"n": len(hits), "open": mem.index.last_open, "role": mem.index.role}
"""

FIRST_TAB_SEES = """
import builtins, asyncio
mem = builtins._cache_mem
loop = asyncio.get_running_loop()
deadline = loop.time() + 60
while not (hits := await mem.search("cherry")) and loop.time() < deadline:
    await asyncio.sleep(0.1)  # until the other tab's notice arrives
[h.session_id for h in hits]
"""

AFTER_CRASH = """
import chatmem, builtins
from chatmem.runtime import page as _browser
mem = await chatmem.open(NAME)
hits = await mem.search("apple cherry banana", limit=20)
out = {"n": len(hits), "open": mem.index.last_open, "hydrations": mem.index.hydrations,
       "resync": mem.index.query_index.last_resync}
await mem.close()
out["removed"] = await _browser.opfs_remove("chatmem-index-" + NAME + ".duckdb")
out
"""


def test_index_cached_in_opfs_catches_up_and_second_tab_asks_the_owner(new_page) -> None:
    """The index is saved to OPFS; a reload reopens it and re-reads only changed sessions;
    a second tab asks the owner's index (it builds none); a tab that dies with unsaved
    changes is caught up at the next opening."""
    from conftest import unique_name

    name = unique_name("cache")
    a = new_page()
    first = a.py(CACHE_FILL.replace("NAME", repr(name)))
    assert first["n"] == 9 and first["open"]["mode"] == "rebuilt" and first["open"]["persistent"] is True
    assert first["cache"] == f"opfs://chatmem-index-{name}.duckdb"
    ids = repr(first["ids"])

    a.reload()
    got = a.py(CACHE_REOPEN.replace("NAME", repr(name)).replace("IDS", ids))
    assert got["open"] == {"mode": "cached", "persistent": True, "sessions": 2, "refreshed": 1, "dropped": 1}
    assert got["hydrations"] == 0 and got["n"] == 6 and got["banana"] == [first["ids"][0]]
    # the session only appended to got its new message, nothing dropped and reloaded
    assert got["resync"] == {"whole": 0, "appended": 1, "loaded": 1}

    b = new_page()
    second = b.py(SECOND_TAB.replace("NAME", repr(name)).replace("IDS", ids))
    assert second["n"] == 6 and second["role"] == "guest" and second["open"] == {}
    # tab B's write reaches tab A's cached index through the cross-tab notice
    assert a.py(FIRST_TAB_SEES) == [first["ids"][2]]

    b.py("import builtins\nawait builtins._cache_mem2.close()\nTrue")
    # tab A goes away without saving; the next opening finds session c changed
    a.reload()
    last = a.py(AFTER_CRASH.replace("NAME", repr(name)))
    assert last["open"]["mode"] == "cached" and last["open"]["refreshed"] == 1 and last["hydrations"] == 0
    assert last["n"] == 8 and last["removed"] is True
    assert last["resync"] == {"whole": 0, "appended": 1, "loaded": 1}


# the end of a script that set ``got = await answers(mem)`` and ``out``: the same answers from
# a fresh rebuild (a second handle with an in-memory index of its own), then both closed
SAME_AS_FRESH = """
from chatmem.runtime.page import DuckDBWasmEngine
from chatmem.memory import open_indexeddb
fresh = await open_indexeddb(NAME, engine_factory=DuckDBWasmEngine.open)
out["same_as_fresh"] = got == await answers(fresh)
out["fresh_open"] = fresh.index.last_open
await fresh.close()
await mem.close()
out
"""

RECOVERY_FILL = """
import chatmem
mem = await chatmem.open(NAME)
for t in ["a", "b", "c"]:
    s = await mem.sessions.create(title=t)
    await mem.messages.append_many(s.session_id, [{"role": "user", "content": f"apple {t} ripe banana {i}"} for i in range(4)])
await mem.search("apple")
await mem.close()
True
"""

RECOVERY_OPEN = (
    """
import chatmem
mem = await chatmem.open(NAME)
async def answers(m):
    return [[(h.message.id, round(h.score, 9)) for h in await m.search(q, limit=20)]
            for q in ["apple", "ripe banana", "b", "zebra"]]
got = await answers(mem)
out = {"open": mem.index.last_open, "notice": mem.index.notice, "n": len(got[0])}
"""
    + SAME_AS_FRESH
)


def test_a_corrupt_cached_index_file_is_rebuilt_with_a_notice(new_page) -> None:
    """Garbage in the OPFS index file: the owner tab deletes it, rebuilds from IndexedDB,
    says so, answers exactly like a fresh rebuild; the next opening uses the new file."""
    from conftest import unique_name

    name = unique_name("corrupt")
    a = new_page()
    assert a.py(RECOVERY_FILL.replace("NAME", repr(name))) is True
    a.page.evaluate(
        """async (file) => {
        const root = await navigator.storage.getDirectory();
        const h = await root.getFileHandle(file, { create: true });
        const w = await h.createWritable();
        await w.write("this is not a database file ".repeat(4000));
        await w.close();
    }""",
        f"chatmem-index-{name}.duckdb",
    )
    a.reload()
    got = a.py(RECOVERY_OPEN.replace("NAME", repr(name)))
    assert got["n"] == 12 and got["same_as_fresh"] is True, repr(got)
    assert got["fresh_open"]["persistent"] is False, repr(got)
    assert got["open"]["mode"] == "rebuilt" and got["open"]["persistent"] is True
    assert got["notice"] and "could not be read" in got["notice"]
    a.reload()
    again = a.py(RECOVERY_OPEN.replace("NAME", repr(name)))
    assert again["open"]["mode"] == "cached" and again["notice"] is None and again["same_as_fresh"] is True, (
        repr(again)
    )
    a.py(
        f"from chatmem.runtime import page as _browser\nawait _browser.opfs_remove('chatmem-index-{name}.duckdb')"
    )


# a store "too large for memory" (thresholds made small in this page): derived into the
# OPFS file and kept there, postings sorted in parts, answers like a fresh in-memory rebuild
LARGE_SMALL = """
from chatmem.index import keywords, live
live.IN_MEMORY_MAX, keywords.SORT_MESSAGES_MAX, keywords.SORT_PART = 10, 10, 15
"""

LARGE_OPEN = (
    LARGE_SMALL
    + """
import chatmem
mem = await chatmem.open(NAME)
mem.index.move_delay = 0
if FILL:
    for t in ["a", "b", "c"]:
        s = await mem.sessions.create(title=t)
        await mem.messages.append_many(s.session_id, [
            {"role": "user", "content": f"apple {t} ripe banana {i} " + " ".join(f"w{i * j % 11}" for j in range(i % 6))}
            for i in range(8)])
async def answers(m):
    return [[(h.message.id, round(h.score, 9)) for h in await m.search(q, limit=30)]
            for q in ["apple", "ripe banana", "b w3", "w7 -w0", "zebra"]]
got = await answers(mem)
await mem.index._move_later()  # what the copy into memory would do once its delay is over
out = {"open": mem.index.last_open, "in_memory": mem.index._cache.in_memory, "notice": mem.index.notice,
       "n": len(got[0])}
rows = await mem.index.query_index.execute("SELECT tid, doc FROM postings")
out["sorted"] = [(r["tid"], r["doc"]) for r in rows] == sorted((r["tid"], r["doc"]) for r in rows)
if WRITE:
    sid = (await mem.sessions.list())[0].session_id
    await mem.messages.append(sid, "user", "apple quince")
    out["quince"] = len(await mem.search("quince"))
    out["in_memory_after_write"] = mem.index._cache.in_memory
    got = await answers(mem)
"""
    + SAME_AS_FRESH
)


def test_a_store_too_large_for_memory_keeps_its_index_in_the_opfs_file(new_page) -> None:
    """Past ``live.IN_MEMORY_MAX`` messages (here 10) the index is derived into the OPFS
    file and stays there through a reload, the move that would copy it into memory and a
    write, sorted in parts; it answers exactly like an in-memory rebuild each time."""
    from conftest import unique_name

    name = unique_name("large")
    a = new_page()
    code = LARGE_OPEN.replace("NAME", repr(name))
    first = a.py(code.replace("FILL", "True").replace("WRITE", "False"))
    assert first["open"]["mode"] == "rebuilt" and first["open"]["persistent"] is True, first
    assert first["in_memory"] is False and first["sorted"] and first["n"] == 24 and first["same_as_fresh"], (
        first
    )
    a.reload()
    again = a.py(code.replace("FILL", "False").replace("WRITE", "True"))
    assert again["open"]["mode"] == "cached" and again["notice"] is None, again
    assert again["in_memory"] is False and again["in_memory_after_write"] is False and again["quince"] == 1, (
        again
    )
    assert again["sorted"] and again["same_as_fresh"], again
    a.reload()
    last = a.py(code.replace("FILL", "False").replace("WRITE", "False"))
    assert last["open"]["mode"] == "cached" and last["open"]["refreshed"] == 0 and last["same_as_fresh"], last
    a.py(
        f"from chatmem.runtime import page as _browser\nawait _browser.opfs_remove('chatmem-index-{name}.duckdb')"
    )


EARLY = (
    three_sessions('f"apple {t} ripe banana {i}"', 50)
    + """
await mem.close()  # no search yet: no index file
mem = await chatmem.open(NAME)
warm = mem.index.warm()  # the opening begins; these writes land while it reads the store
await mem.messages.append(ids[1], "user", "a quokka in session b")
late = await mem.sessions.create(title="late")
await mem.messages.append(late.session_id, "user", "a wombat arrived late")
await mem.sessions.delete(ids[0])
await mem.sessions.delete_messages(ids[2], [(await mem.messages.list(ids[2], limit=1))[0].id])
await warm
async def answers(m):
    return [[(h.message.id, round(h.score, 9)) for h in await m.search(q, limit=200)]
            for q in ["apple", "quokka", "wombat", "ripe"]]
got = await answers(mem)
out = {"early": mem.index.open_ms.get("derive: begun early"), "open": mem.index.last_open,
       "n": [len(a) for a in got]}
"""
    + SAME_AS_FRESH
)


def test_with_no_index_file_the_derivation_begins_while_the_engine_opens(page) -> None:
    """No cached index file: the page reads, splits and counts the store while DuckDB-Wasm
    opens (its loads wait for it), and writes made meanwhile (an append, a new session, a
    session and a message deleted) are in the answers, which equal those of a fresh rebuild."""
    from conftest import unique_name

    got = page.py(EARLY.replace("NAME", repr(unique_name("early"))))
    assert got["early"] == 1 and got["open"]["mode"] == "rebuilt", got
    assert got["n"] == [99, 1, 1, 99] and got["same_as_fresh"] is True, got
