"""One query index per database for every tab, in Chromium: the tab holding the Web Lock
owns the DuckDB-Wasm index, the others ask it over a BroadcastChannel, and when the
owner goes another tab takes over from the saved OPFS file."""

from __future__ import annotations

import pytest

from conftest import Page, unique_name

pytestmark = pytest.mark.browser

OPEN = """
import chatmem, builtins
mem = await chatmem.open(NAME)
if not hasattr(builtins, "_shared_mems"):
    builtins._shared_mems = {}
builtins._shared_mems[NAME] = mem
"""

STATUS = """
def status(mem):
    s = mem.index.status()
    s["engine"] = type(mem.index.query_index.engine).__name__ if mem.index.query_index is not None else None
    return s
"""

FILL = (
    OPEN
    + STATUS
    + """
s = await mem.sessions.create(title="fruit")
await mem.messages.append_many(s.session_id, [{"role": "user", "content": f"apple pie number {i}"} for i in range(6)])
hits = await mem.search("apple", limit=20)
{"n": len(hits), "status": status(mem), "sid": s.session_id}
"""
)

JOIN = (
    OPEN
    + STATUS
    + """
hits = await mem.search("apple", limit=20)
{"n": len(hits), "status": status(mem)}
"""
)

MEM = (
    """
import builtins, asyncio
mem = builtins._shared_mems[NAME]
"""
    + STATUS
)

# waits for the condition it asserts: the write notice of another tab arrives within moments
UNTIL_FOUND = (
    MEM
    + """
loop = asyncio.get_running_loop()
deadline = loop.time() + 60
while not (hits := await mem.search(WORD, limit=20)) and loop.time() < deadline:
    await asyncio.sleep(0.05)
{"found": sorted(h.message.content for h in hits), "status": status(mem)}
"""
)


def _run(page: Page, src: str, name: str, **consts: object) -> object:
    head = f"NAME = {name!r}\n" + "".join(f"{k} = {v!r}\n" for k, v in consts.items())
    return page.py(head + src)


def test_three_tabs_share_one_index_and_another_takes_over_when_the_owner_closes(new_page) -> None:
    """Tabs 2 and 3 answer from tab 1's index (no engine of their own); a write in tab 3 is
    found from tab 2; closing tab 1 hands the index to tab 2 or 3, and both still answer,
    including what tab 3 wrote during the handover."""
    name = unique_name("tabs")
    a, b, c = new_page(), new_page(), new_page()
    first = _run(a, FILL, name)
    assert first["n"] == 6 and first["status"]["role"] == "owner" and first["status"]["persistent"] is True
    for tab in (b, c):
        got = _run(tab, JOIN, name)
        assert got["n"] == 6, got
        st = got["status"]
        assert st["role"] == "guest" and st["engine"] == "RemoteEngine", st
        assert st["hydrations"] == 0 and st["catchups"] == 0 and st["persistent"] is False, st
    owner = _run(a, MEM + "status(mem)", name)
    assert owner["served"] >= 2 and owner["hydrations"] == 1, owner

    # a write in tab 3: tab 3's next query sees it; tab 2's once the write notice arrived
    wrote = _run(
        c,
        MEM
        + """
await mem.messages.append(SID, "assistant", "banana bread from the third tab")
[h.message.content for h in await mem.search("banana")]
""",
        name,
        SID=first["sid"],
    )
    assert wrote == ["banana bread from the third tab"]
    seen = _run(b, UNTIL_FOUND, name, WORD="banana")
    assert seen["found"] == ["banana bread from the third tab"]

    # the owner saves (as it does by itself a moment after a change), then goes without closing
    assert _run(a, MEM + "await mem.index.save()", name) is True
    a.page.close()
    during = _run(
        c,
        MEM
        + """
await mem.messages.append(SID, "user", "cherry jam written during the handover")
[h.message.content for h in await mem.search("cherry")]
""",
        name,
        SID=first["sid"],
    )
    assert during == ["cherry jam written during the handover"]
    after = _run(b, UNTIL_FOUND, name, WORD="cherry")
    assert after["found"] == ["cherry jam written during the handover"]
    everything = [
        _run(
            t,
            MEM
            + """
hits = await mem.search("apple banana cherry", limit=20)
{"n": len(hits), "status": status(mem)}
""",
            name,
        )
        for t in (b, c)
    ]
    assert [e["n"] for e in everything] == [8, 8], everything
    roles = sorted(e["status"]["role"] for e in everything)
    assert roles == ["guest", "owner"], everything
    new_owner = next(e["status"] for e in everything if e["status"]["role"] == "owner")
    assert new_owner["takeovers"] == 1 and new_owner["engine"] == "DuckDBWasmEngine", new_owner
    assert new_owner["last_open"]["mode"] == "cached", "taken over from the saved file"
    for t in (b, c):
        _run(t, MEM + "await mem.close()\nTrue", name)


def test_a_guest_uses_sql_semantic_search_and_rebuild_through_the_owner(new_page) -> None:
    """``mem.sql`` (guarded in both tabs), a semantic search (its vectors made by the owner)
    and ``rebuild_index`` from a guest run on the owner's index and answer like the owner."""
    name = unique_name("guest")
    a, b = new_page(), new_page()
    _run(a, FILL, name)
    got = _run(
        b,
        JOIN
        + """
from chatmem.errors import ReadOnlySQLError, QueryError
out = {"sql": await mem.sql("SELECT count(*) AS n FROM messages WHERE text LIKE ?", ["%pie%"])}
try:
    await mem.sql("DELETE FROM messages")
    out["write"] = "allowed"
except ReadOnlySQLError:
    out["write"] = "refused"
try:
    await mem.sql("SELECT * FROM no_such_table")
except QueryError as e:
    out["bad"] = type(e).__name__
out["semantic"] = [h.message.id for h in await mem.search("apple pie", mode="semantic", limit=3)]
await mem.rebuild_index()
out["after_rebuild"] = len(await mem.search("apple", limit=20))
out["status"] = status(mem)
out
""",
        name,
    )
    assert got["sql"] == [{"n": 6}] and got["write"] == "refused" and got["bad"] == "QueryError", got
    assert got["after_rebuild"] == 6 and got["status"]["role"] == "guest", got
    owner = _run(
        a,
        MEM
        + """
{"semantic": [h.message.id for h in await mem.search("apple pie", mode="semantic", limit=3)],
 "status": status(mem), "count": (await mem.sql("SELECT count(*) AS n FROM messages"))[0]["n"]}
""",
        name,
    )
    assert owner["semantic"] == got["semantic"] and len(owner["semantic"]) == 3, (owner, got)
    assert owner["status"]["hydrations"] == 2, "the guest's rebuild ran on the owner"
    assert owner["status"]["persistent"] is True and owner["count"] == 6
    for t in (b, a):
        _run(t, MEM + "await mem.close()\nTrue", name)


REBUILD = (
    MEM
    + """
before = [(h.message.id, round(h.score, 9)) for h in await mem.search("apple", limit=20)]
await mem.rebuild_index()
after = [(h.message.id, round(h.score, 9)) for h in await mem.search("apple", limit=20)]
await mem.messages.append(SID, "user", "apple strudel after the rebuild")
saved = await mem.index.save()
{"same": before == after, "status": status(mem), "saved": saved}
"""
)

REOPEN = (
    OPEN
    + STATUS
    + """
hits = await mem.search("apple", limit=20)
out = {"n": len(hits), "status": status(mem)}
await mem.close()
from chatmem.runtime import page as _browser
out["removed"] = await _browser.opfs_remove("chatmem-index-" + NAME + ".duckdb")
out
"""
)


def test_rebuild_index_keeps_the_saved_file(new_page) -> None:
    """``rebuild_index`` rebuilds in place: the index is still the saved OPFS file (no
    "File is not opened in write mode", no silent fallback to memory), and a reload
    opens the rebuilt file."""
    name = unique_name("rebuild")
    a = new_page()
    first = _run(a, FILL, name)
    got = _run(a, REBUILD, name, SID=first["sid"])
    st = got["status"]
    assert got["same"] is True and got["saved"] is True, got
    assert st["persistent"] is True and st["notice"] is None and st["role"] == "owner", st
    assert st["last_open"] == {"mode": "rebuilt", "persistent": True, "sessions": 1}, st
    a.reload()
    again = _run(a, REOPEN, name)
    assert again["n"] == 7 and again["status"]["last_open"]["mode"] == "cached", again
    assert again["status"]["hydrations"] == 0 and again["removed"] is True, again
