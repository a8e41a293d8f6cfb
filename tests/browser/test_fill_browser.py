"""A large derivation in the page leaves the texts out and fills ``messages`` afterwards
(``chatmem.index.fill``): searches are answered meanwhile, what reads ``messages`` waits
for the fill, writes applied during it are neither undone nor doubled, and the cache file
is complete only once it ended. Small stores take the same path here, made large by
``TEXTS_LATER_FROM = 0``, with a few messages a step so that the writes land mid-fill."""

from __future__ import annotations

import pytest

from conftest import unique_name

pytestmark = pytest.mark.browser

STORE = """
import chatmem
mem = await chatmem.open(NAME)
sids = []
for k in range(6):
    s = await mem.sessions.create(title=f"s{k}")
    sids.append(s.session_id)
    await mem.messages.append_many(s.session_id, [
        {"role": ("user", "assistant")[i % 2], "content": f"apple {k} item {i} " + "pear " * (i % 5)}
        for i in range(60)])
await mem.close()
sids
"""

# what the store holds: every message's id and plain text, and the index's own rows
CONTENTS = """
from chatmem.records.models import extract_text

async def stored(mem):
    out = []
    for s in await mem.sessions.list(limit=None):
        out += [[m.id, extract_text(m.content)] for m in await mem.messages.list(s.session_id, limit=None)]
    return sorted(out)

async def indexed(mem):
    rows = await mem.sql("SELECT id, text FROM messages ORDER BY id")
    docs = await mem.sql("SELECT count(*) AS n, count(DISTINCT message_id) AS k FROM docs")
    return [[r["id"], r["text"]] for r in rows], docs[0]
"""

DURING = (
    CONTENTS
    + """
import chatmem
from chatmem.index import fill
from chatmem.runtime.page import duckdb_wasm
duckdb_wasm.TEXTS_LATER_FROM, fill.FILL_STEP = 0, 1
try:
    mem = await chatmem.open(NAME)
    first = len(await mem.search("apple", mode="keyword", limit=5))
    before = mem.index.status()["messages"]
    # writes while `messages` is filled, each applied by the search after it: appends to the
    # session read first and to the one read last, a session deleted, one cleared and
    # written again, a message deleted (its session is read again: that waits for the fill)
    during = []

    async def applied():
        hits = len(await mem.search("kiwi", mode="keyword", limit=10))
        during.append(mem.index.status()["messages"]["state"])
        return hits

    await mem.messages.append(SIDS[0], "user", "kiwi in the first session")
    await applied()
    await mem.messages.append(SIDS[5], "user", "kiwi in the last session")
    await applied()
    await mem.sessions.delete(SIDS[4])
    await applied()
    await mem.sessions.clear(SIDS[3])
    await applied()
    await mem.messages.append(SIDS[3], "user", "kiwi after clearing")
    await applied()
    gone = (await mem.messages.list(SIDS[2], limit=None))[7]
    await mem.sessions.delete_messages(SIDS[2], [gone.id])
    kiwi = await applied()
    rows, docs = await indexed(mem)  # waits for the fill
    after = mem.index.status()["messages"]
    substring = len(await mem.search("kiwi", mode="substring", limit=10))
    want = await stored(mem)
    await mem.close()
finally:
    duckdb_wasm.TEXTS_LATER_FROM, fill.FILL_STEP = 300_000, 40_000
{"first": first, "before": before, "during": during, "after": after, "kiwi": kiwi, "substring": substring,
 "rows": rows, "docs": docs, "want": want, "gone": gone.id}
"""
)

REOPEN = (
    CONTENTS
    + """
import chatmem
mem = await chatmem.open(NAME)
hits = len(await mem.search("apple", limit=5))
rows, docs = await indexed(mem)
out = {"open": mem.index.last_open, "notice": mem.index.notice, "hits": hits, "rows": rows, "docs": docs,
       "want": await stored(mem), "messages": mem.index.status()["messages"]}
await mem.close()
out
"""
)


def _check(got: dict, what: str) -> None:
    assert got["rows"] == got["want"], what
    assert got["docs"] == {"n": len(got["want"]), "k": len(got["want"])}, what


def test_messages_are_filled_after_the_first_search_and_writes_meanwhile_hold(new_page) -> None:
    name = unique_name("fill")
    a = new_page()
    sids = a.py(STORE.replace("NAME", repr(name)))
    got = a.py(DURING.replace("NAME", repr(name)).replace("SIDS", repr(sids)))
    assert got["first"] == 5
    assert got["before"]["state"] == "filling" and got["before"]["filled"] < 360, got["before"]
    assert got["during"][:5] == ["filling"] * 5, "the writes were applied while messages was filled"
    assert got["after"]["state"] == "done"
    assert got["kiwi"] == got["substring"] == 3
    assert len(got["want"]) == 360 - 60 - 60 - 1 + 3
    assert got["gone"] not in {i for i, _ in got["want"]}
    _check(got, "filled")
    # the file was saved complete: the next opening is answered from it
    a.reload()
    again = a.py(REOPEN.replace("NAME", repr(name)))
    assert again["open"]["mode"] == "cached" and again["notice"] is None, again["open"]
    assert again["hits"] == 5 and again["messages"] == {"state": "done"}
    _check(again, "reopened")


CLOSED_EARLY = """
import chatmem
from chatmem.index import fill
from chatmem.runtime.page import duckdb_wasm
duckdb_wasm.TEXTS_LATER_FROM, fill.FILL_STEP = 0, 1
try:
    mem = await chatmem.open(NAME)
    await mem.search("apple", mode="keyword")
    state = mem.index.status()["messages"]
    await mem.close()
finally:
    duckdb_wasm.TEXTS_LATER_FROM, fill.FILL_STEP = 300_000, 40_000
state
"""


def test_an_index_closed_before_its_messages_were_filled_is_derived_again(new_page) -> None:
    from chatmem.index.schema import UNFINISHED_INDEX

    name = unique_name("fill-closed")
    a = new_page()
    a.py(STORE.replace("NAME", repr(name)))
    state = a.py(CLOSED_EARLY.replace("NAME", repr(name)))
    assert state["state"] == "filling" and state["filled"] < 360, state
    a.reload()
    again = a.py(REOPEN.replace("NAME", repr(name)))
    assert again["open"]["mode"] == "rebuilt" and again["notice"] == UNFINISHED_INDEX, again
    assert again["hits"] == 5
    _check(again, "derived again")
