"""IndexedDB behaviour in real Chromium: durability across reloads and
restarts, several tabs at once, streaming, upgrades, and no stray requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import CHROMIUM, CHROMIUM_ARGS, Page, unique_name

pytestmark = pytest.mark.browser


def start(page: Page, code: str) -> None:
    """Start runPython(code) without waiting; collect with ``finish``."""
    page.page.evaluate("code => { window.__job = window.chatmem.runPython(code); }", code)


def finish(page: Page) -> Any:
    return page.page.evaluate("window.__job")


def test_thousand_messages_survive_reload(new_page: Any) -> None:
    """1,000 appended messages are all there, in order with dense seq, after a reload."""
    db = unique_name("reload")
    p = new_page()
    sid = p.py(f"""
import chatmem
mem = await chatmem.open({db!r})
s = await mem.sessions.create(title="durable")
for i in range(1000):
    await mem.messages.append(s.session_id, "user" if i % 2 == 0 else "assistant", f"message {{i}}")
s.session_id
""")
    p.reload()
    out = p.py(f"""
import chatmem
mem = await chatmem.open({db!r})
msgs = await mem.messages.list({sid!r}, limit=None)
meta = await mem.sessions.get({sid!r})
[[m.seq for m in msgs], [m.content for m in msgs][:3], meta.message_count, meta.title]
""")
    seqs, first, count, title = out
    assert seqs == list(range(1000))
    assert first == ["message 0", "message 1", "message 2"]
    assert count == 1000 and title == "durable"


def test_data_survives_browser_restart(playwright_instance: Any, site: str, profile_dir: Path) -> None:
    """Closing and relaunching Chromium on the same profile keeps every message."""
    db = unique_name("restart")

    def session(code: str) -> Any:
        ctx = playwright_instance.chromium.launch_persistent_context(
            str(profile_dir), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = Page(ctx.pages[0] if ctx.pages else ctx.new_page(), site).boot()
            return page.py(code)
        finally:
            ctx.close()

    sid = session(f"""
import chatmem
mem = await chatmem.open({db!r})
s = await mem.sessions.create(title="restart me")
await mem.messages.append_many(s.session_id, [{{"role": "user", "content": f"m{{i}}"}} for i in range(300)])
await mem.messages.append(s.session_id, "assistant", "the last word")
s.session_id
""")
    out = session(f"""
import chatmem
mem = await chatmem.open({db!r})
msgs = await mem.messages.list({sid!r}, limit=None)
[len(msgs), [m.seq for m in msgs] == list(range(301)), msgs[-1].content, (await mem.sessions.get({sid!r})).title]
""")
    assert out == [301, True, "the last word", "restart me"]


def test_two_tabs_append_to_one_session(new_page: Any) -> None:
    """Two pages appending 200 messages each at once: 400 messages, seq 0..399 each once."""
    db = unique_name("tabs")
    a, b = new_page(), new_page()
    sid = a.py(f"""
import chatmem
mem = await chatmem.open({db!r})
(await mem.sessions.create(title="shared")).session_id
""")
    writer = """
import chatmem
mem = await chatmem.open({db!r})
for i in range(200):
    await mem.messages.append({sid!r}, "user", "{tab}-" + str(i))
"done"
"""
    start(a, writer.format(db=db, sid=sid, tab="A"))
    start(b, writer.format(db=db, sid=sid, tab="B"))
    assert finish(a) == "done" and finish(b) == "done"
    seqs, contents, count = a.py(f"""
import chatmem
mem = await chatmem.open({db!r})
msgs = await mem.messages.list({sid!r}, limit=None)
[[m.seq for m in msgs], [m.content for m in msgs], (await mem.sessions.get({sid!r})).message_count]
""")
    assert sorted(seqs) == list(range(400)) and seqs == list(range(400))
    assert count == 400
    assert sorted(contents) == sorted([f"A-{i}" for i in range(200)] + [f"B-{i}" for i in range(200)])
    # each tab's own messages stay in the order it wrote them
    assert [c for c in contents if c.startswith("A-")] == [f"A-{i}" for i in range(200)]


def test_write_in_one_tab_reaches_cached_reader_in_another(new_page: Any) -> None:
    """A tab that cached a page of messages sees another tab's append (BroadcastChannel)."""
    db = unique_name("coherent")
    a, b = new_page(), new_page()
    sid = a.py(f"""
import chatmem
mem = await chatmem.open({db!r})
s = await mem.sessions.create()
await mem.messages.append(s.session_id, "user", "one")
s.session_id
""")
    # tab A keeps its Memory open in a module global so its cache lives on
    a.py(f"""
import chatmem, builtins
builtins._mem = await chatmem.open({db!r})
len(await builtins._mem.messages.list({sid!r}))
""")
    b.py(f"""
import chatmem
mem = await chatmem.open({db!r})
await mem.messages.append({sid!r}, "user", "two")
""")
    a.page.wait_for_timeout(200)
    out = a.py(f"""
import builtins
[[m.content for m in await builtins._mem.messages.list({sid!r})], await builtins._mem.messages.count({sid!r})]
""")
    assert out == [["one", "two"], 2]


def test_stream_five_thousand_in_batches(page: Page) -> None:
    """stream() over 5,000 messages yields them in order, reading batch by batch."""
    db = unique_name("stream")
    out = page.py(f"""
import chatmem
mem = await chatmem.open({db!r})
s = await mem.sessions.create()
await mem.messages.append_many(s.session_id, [{{"role": "user", "content": str(i)}} for i in range(5000)])
calls = []
orig = mem.store.list_messages
async def counting(*a, **k):
    page = await orig(*a, **k)
    calls.append(len(page))
    return page
mem.store.list_messages = counting
seqs = [m.seq async for m in mem.messages.stream(s.session_id, batch_size=100)]
[seqs == list(range(5000)), max(calls), len(calls)]
""")
    assert out == [True, 100, 51]


def test_all_sessions_are_read_in_pages(page: Page) -> None:
    """Past a page of session records, all_sessions reads them page by page (no single
    read or parse holds the page's thread) and answers each session once."""
    db = unique_name("pages")
    out = page.py(f"""
import chatmem
mem = await chatmem.open({db!r})
made = [(await mem.sessions.create(title=f"s{{i}}")).session_id for i in range(2001)]
got = await mem.store.all_sessions()
pages = await mem.store._db.call("allSessions")
await mem.close()
[len(got), sorted(r["sessionId"] for r in got) == sorted(made), len(pages), [r["title"] for r in got][:1]]
""")
    assert out[:3] == [2001, True, 3]
    assert out[3][0].startswith("s")


def test_upgrade_in_another_tab_closes_old_connection(new_page: Any) -> None:
    """When another tab opens a newer schema, this tab's connection closes and says to reload."""
    db = unique_name("upgrade")
    a = new_page()
    a.py(f"""
import chatmem, builtins
builtins._old = await chatmem.open({db!r})
(await builtins._old.sessions.create()).session_id
""")
    a.page.evaluate(
        "() => { window.__vc = null; addEventListener('chatmem:versionchange', e => window.__vc = e.detail.name); }"
    )
    b = new_page()
    version = b.page.evaluate(f"""async () => {{
        const {{ SCHEMA_VERSION }} = window.chatmem.bridge;
        return await new Promise((resolve, reject) => {{
            const req = indexedDB.open({db!r}, SCHEMA_VERSION + 1);
            req.onsuccess = () => {{ const v = req.result.version; req.result.close(); resolve(v); }};
            req.onerror = () => reject(req.error);
            req.onblocked = () => reject(new Error('blocked'));
        }});
    }}""")
    assert version >= 2
    assert a.page.evaluate("window.__vc") == db
    err = a.py("""
import builtins
from chatmem import errors
try:
    await builtins._old.sessions.list()
    out = "no error"
except errors.DatabaseClosed as e:
    out = "closed: " + str(e)
out
""")
    assert err.startswith("closed:") and "reload" in err


def test_storage_errors_are_typed(page: Page) -> None:
    """The bridge's DOMException names arrive as typed StorageErrors with the original as cause."""
    out = page.py("""
from chatmem import errors
e = errors.translate_dom_error("QuotaExceededError", "full")
[type(e).__name__, isinstance(e, errors.StorageError), e.dom_name,
 type(errors.translate_dom_error("ConstraintError", "")).__name__,
 type(errors.translate_dom_error("AbortError", "")).__name__,
 type(errors.translate_dom_error("VersionError", "")).__name__]
""")
    assert out == [
        "QuotaExceeded",
        True,
        "QuotaExceededError",
        "ConstraintViolation",
        "TransactionAborted",
        "VersionConflict",
    ]


def test_no_request_leaves_loopback(browser: Any, site: str, requests_seen: Any) -> None:
    """Booting and using the page asks nothing of any host but the site itself on 127.0.0.1,
    and no test's page ever asked anything of a host other than loopback."""
    from urllib.parse import urlsplit

    ctx = browser.new_context()
    mine: list[str] = []
    ctx.on("request", lambda req: mine.append(req.url))
    try:
        p = Page(ctx.new_page(), site).boot()
        p.py("""
import chatmem
mem = await chatmem.open("no-network")
s = await mem.sessions.create()
await mem.messages.append(s.session_id, "user", "hello")
[h.message.text for h in await mem.search("hello")]
""")
    finally:
        ctx.close()
    assert len(mine) > 5 and any(u.endswith(".wasm") for u in mine)
    assert [u for u in mine if not (u.startswith(site) or u.startswith(("data:", "blob:")))] == []
    hosts = {urlsplit(u).hostname for u in requests_seen.urls if u.startswith("http")}
    assert hosts <= {"127.0.0.1", "localhost"}, hosts


def test_write_in_tab_a_is_found_by_search_in_tab_b(new_page: Any) -> None:
    """Tab B has a hydrated query index; tab A writes; B's next search finds A's message."""
    db = unique_name("xsearch")
    a, b = new_page(), new_page()
    sid = a.py(f"""
import chatmem, builtins
builtins._mem = await chatmem.open({db!r})
s = await builtins._mem.sessions.create(title="shared")
await builtins._mem.messages.append(s.session_id, "user", "first words about gardening")
s.session_id
""")
    before = b.py(f"""
import chatmem, builtins
builtins._mem = await chatmem.open({db!r})
[h.message.text for h in await builtins._mem.search("gardening")]
""")
    assert before == ["first words about gardening"]
    a.py(f"""
import builtins
await builtins._mem.messages.append({sid!r}, "assistant", "tomatoes need gardening patience")
await builtins._mem.sessions.update({sid!r}, title="garden")
""")
    b.page.wait_for_timeout(200)
    after = b.py(f"""
import builtins
hits = await builtins._mem.search("tomatoes")
rows = await builtins._mem.sql("SELECT title, message_count FROM sessions WHERE session_id = ?", [{sid!r}])
[[h.message.text for h in hits], rows, builtins._mem.index.hydrations]
""")
    assert after == [["tomatoes need gardening patience"], [{"title": "garden", "message_count": 2}], 1]


def test_version_two_database_upgrades_to_lean_messages(new_page: Any) -> None:
    """A database written before schema 3 (messages indexed by createdAt and role too) opens
    with every record, only the ``sessionSeq`` index left, and appends and reads as before."""
    src, old = unique_name("lean-src"), unique_name("lean-old")
    p = new_page()
    sid = p.py(f"""
import chatmem
mem = await chatmem.open({src!r})
s = await mem.sessions.create(title="before")
await mem.messages.append_many(s.session_id, [{{"role": "user", "content": f"old {{i}}"}} for i in range(5)])
await mem.close()
s.session_id
""")
    # copy the records into a database laid out as schema 2 left it
    names = p.page.evaluate(
        """async ([src, old]) => {
      const { SCHEMA } = await import(new URL("js/schema.js", location.href).href);
      const open = (name, version, upgrade) => new Promise((ok, fail) => {
        const r = version ? indexedDB.open(name, version) : indexedDB.open(name);
        if (upgrade) r.onupgradeneeded = () => upgrade(r.result);
        r.onsuccess = () => ok(r.result); r.onerror = () => fail(r.error);
      });
      const all = (db, store) => new Promise((ok) => {
        db.transaction(store).objectStore(store).getAll().onsuccess = (e) => ok(e.target.result); });
      const from = await open(src);
      const sessions = await all(from, "sessions"), messages = await all(from, "messages");
      from.close();
      const to = await open(old, 2, (db) => SCHEMA[0](db));
      const before = [...to.transaction("messages").objectStore("messages").indexNames].sort();
      const tx = to.transaction(["sessions", "messages"], "readwrite");
      for (const s of sessions) tx.objectStore("sessions").put(s);
      for (const m of messages) tx.objectStore("messages").put(m);
      await new Promise((ok) => { tx.oncomplete = ok; });
      to.close();
      return before;
    }""",
        [src, old],
    )
    assert names == ["createdAt", "role", "sessionSeq"]
    out = p.py(f"""
import chatmem
mem = await chatmem.open({old!r})
await mem.messages.append({sid!r}, "assistant", "after the upgrade")
msgs = await mem.messages.list({sid!r}, limit=None)
meta = await mem.sessions.get({sid!r})
await mem.close()
[[m.content for m in msgs], [m.seq for m in msgs], meta.title]
""")
    assert out == [[f"old {i}" for i in range(5)] + ["after the upgrade"], list(range(6)), "before"]
    after = p.page.evaluate(
        """async (old) => {
      const db = await new Promise((ok) => { const r = indexedDB.open(old); r.onsuccess = () => ok(r.result); });
      const names = [db.version, [...db.transaction("messages").objectStore("messages").indexNames]];
      db.close();
      return names;
    }""",
        old,
    )
    assert after == [5, ["sessionSeq"]]


def test_version_three_database_takes_order_keys(new_page: Any) -> None:
    """A database written before schema 4 (no order keys, seq with gaps, a sync cursor)
    opens with every message in its order, numbered densely, each with an order key that
    keeps that order, and no cursor (the next pull brings the server's keys)."""
    src, old = unique_name("keys-src"), unique_name("keys-old")
    p = new_page()
    sid = p.py(f"""
import chatmem
mem = await chatmem.open({src!r})
s = await mem.sessions.create(title="before")
await mem.messages.append_many(
    s.session_id, [{{"role": "user", "content": f"old {{i}}", "created_at": 1000 - i}} for i in range(5)]
)
await mem.close()
s.session_id
""")
    p.page.evaluate(
        """async ([src, old]) => {
      const { SCHEMA } = await import(new URL("js/schema.js", location.href).href);
      const open = (name, version, upgrade) => new Promise((ok, fail) => {
        const r = version ? indexedDB.open(name, version) : indexedDB.open(name);
        if (upgrade) r.onupgradeneeded = () => upgrade(r.result, r.transaction);
        r.onsuccess = () => ok(r.result); r.onerror = () => fail(r.error);
      });
      const all = (db, store) => new Promise((ok) => {
        db.transaction(store).objectStore(store).getAll().onsuccess = (e) => ok(e.target.result); });
      const from = await open(src);
      const sessions = await all(from, "sessions"), messages = await all(from, "messages");
      from.close();
      const to = await open(old, 3, (db, tx) => { SCHEMA[0](db, tx); SCHEMA[2](db, tx); });
      const tx = to.transaction(["sessions", "messages", "kv"], "readwrite");
      for (const s of sessions) tx.objectStore("sessions").put({ ...s, nextSeq: 99 });
      for (const m of messages) {
        const { hlc, ...rest } = m;
        tx.objectStore("messages").put({ ...rest, seq: 2 * m.seq + 1 });
      }
      tx.objectStore("kv").put("17", "sync.cursor");
      await new Promise((ok) => { tx.oncomplete = ok; });
      to.close();
    }""",
        [src, old],
    )
    out = p.py(f"""
import chatmem
mem = await chatmem.open({old!r})
msgs = await mem.store.list_messages({sid!r}, 0, None, False)
await mem.messages.append({sid!r}, "assistant", "after the upgrade")
after = await mem.messages.list({sid!r}, limit=None)
meta = await mem.store.get_session({sid!r})
cursor = await mem.store.kv_get("sync.cursor")
await mem.close()
[[m["hlc"] for m in msgs], [(m.seq, m.content) for m in after], meta["messageCount"], meta["nextSeq"], cursor]
""")
    keys, after, count, next_seq, cursor = out
    assert keys == [f"0000000001000-000{i}-0" for i in range(5)]
    assert after == [[i, f"old {i}"] for i in range(5)] + [[5, "after the upgrade"]]
    assert (count, next_seq, cursor) == (6, 6, None)


def test_facts_survive_a_reload(new_page: Any) -> None:
    """A fact and a correction of it, acknowledged, are there after a reload: both versions,
    linked, with every field."""
    db = unique_name("facts")
    p = new_page()
    before = p.py(f"""
import chatmem
mem = await chatmem.open({db!r})
home = await mem.facts.add("Lives in Lisbon", key="home", value="Lisbon")
moved = await mem.facts.update(home.fact_id, text="Lives in Porto", value="Porto")
[f.to_record() for f in await mem.facts.history(moved.fact_id)]
""")
    p.reload()
    after = p.py(f"""
import chatmem
mem = await chatmem.open({db!r})
[f.to_record() for f in await mem.facts.history({before[-1]["factId"]!r})]
""")
    assert after == before and [f["value"] for f in after] == ["Lisbon", "Porto"]
    assert after[0]["supersededBy"] == after[1]["factId"] and after[0]["status"] == "superseded"
