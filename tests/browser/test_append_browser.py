"""Appends in real Chromium when the session changed behind this tab's back.

A tab appends over the session record it last wrote or read without waiting
for the read (one round trip); the read still runs first in the same
transaction, and a record that differs aborts it. Here a second writer that
sends no notice (plain IndexedDB from the page) changes the session between
two appends, so the tab's view is stale for sure."""

from __future__ import annotations

import pytest

from conftest import Page, unique_name

pytestmark = pytest.mark.browser

# another writer: one message at the session's next seq, the title changed, no notice sent
ELSEWHERE = """async ([db, sid, title]) => {
  const conn = await new Promise((ok, fail) => {
    const r = indexedDB.open(db);
    r.onsuccess = () => ok(r.result);
    r.onerror = () => fail(r.error);
  });
  const tx = conn.transaction(["sessions", "messages"], "readwrite");
  const sessions = tx.objectStore("sessions");
  await new Promise((ok) => {
    sessions.get(sid).onsuccess = (ev) => {
      const s = ev.target.result;
      tx.objectStore("messages").add({ id: "elsewhere-" + s.nextSeq, sessionId: sid, seq: s.nextSeq, role: "user",
        content: "from elsewhere", createdAt: 1, provider: null, model: null, slices: null, tool_results: null,
        categorization: null, toolCalls: null, toolCallId: null, name: null, metadata: null, tokenCount: 4 });
      sessions.put({ ...s, title, nextSeq: s.nextSeq + 1, messageCount: s.messageCount + 1 });
      ok();
    };
  });
  await new Promise((ok, fail) => { tx.oncomplete = ok; tx.onabort = () => fail(tx.error); });
  conn.close();
}"""

DROP_SESSION = """async ([db, sid]) => {
  const conn = await new Promise((ok) => { const r = indexedDB.open(db); r.onsuccess = () => ok(r.result); });
  const tx = conn.transaction(["sessions"], "readwrite");
  tx.objectStore("sessions").delete(sid);
  await new Promise((ok) => { tx.oncomplete = ok; });
  conn.close();
}"""


def _open(page: Page, db: str) -> str:
    return str(page.py(f"""
import chatmem, builtins
builtins._mem = mem = await chatmem.open({db!r})
s = await mem.sessions.create(title="mine")
await mem.messages.append_many(s.session_id, [{{"role": "user", "content": f"m{{i}}"}} for i in range(3)])
s.session_id
"""))


def test_append_over_a_session_changed_elsewhere_keeps_both(page: Page) -> None:
    """The other writer's message and title survive; ours lands at the next seq."""
    db = unique_name("stale")
    sid = _open(page, db)
    page.page.evaluate(ELSEWHERE, [db, sid, "renamed elsewhere"])
    out = page.py(f"""
import builtins, chatmem
m = await builtins._mem.messages.append({sid!r}, "assistant", "mine")
again = await builtins._mem.messages.append({sid!r}, "user", "next")
await builtins._mem.close()
mem = await chatmem.open({db!r})
msgs = await mem.messages.list({sid!r}, limit=None)
meta = await mem.sessions.get({sid!r})
await mem.close()
[m.seq, again.seq, [(x.seq, x.content) for x in msgs], meta.title, meta.message_count]
""")
    seq, seq2, msgs, title, count = out
    assert (seq, seq2) == (4, 5)
    assert msgs == [[0, "m0"], [1, "m1"], [2, "m2"], [3, "from elsewhere"], [4, "mine"], [5, "next"]]
    assert title == "renamed elsewhere" and count == 6


def test_append_to_a_session_deleted_elsewhere_is_refused(page: Page) -> None:
    """SessionNotFound, and nothing written, when the session went away behind this tab."""
    db = unique_name("gone")
    sid = _open(page, db)
    page.page.evaluate(DROP_SESSION, [db, sid])
    out = page.py(f"""
import builtins
from chatmem import errors
try:
    await builtins._mem.messages.append({sid!r}, "user", "lost?")
    err = None
except errors.SessionNotFound as e:
    err = type(e).__name__
left = await builtins._mem.store.count_messages({sid!r})
await builtins._mem.close()
[err, left]
""")
    assert out == ["SessionNotFound", 3]


def test_failed_batch_over_a_known_session_writes_nothing(page: Page) -> None:
    """A batch whose last message reuses a stored id: DuplicateId, none of it written,
    and the next append still gets the next seq."""
    db = unique_name("dupe")
    sid = _open(page, db)
    out = page.py(f"""
import builtins
from chatmem import errors
mem = builtins._mem
first = (await mem.messages.list({sid!r}, limit=1))[0]
try:
    await mem.messages.append_many({sid!r}, [{{"role": "user", "content": "a"}}, {{"role": "user", "content": "b"}},
                                             {{"role": "user", "content": "c", "id": first.id}}])
    err = None
except errors.DuplicateId as e:
    err = type(e).__name__
after = [m.content for m in await mem.messages.list({sid!r}, limit=None)]
nxt = await mem.messages.append({sid!r}, "user", "d")
count = (await mem.sessions.get({sid!r})).message_count
await mem.close()
[err, after, nxt.seq, count]
""")
    assert out == ["DuplicateId", ["m0", "m1", "m2"], 3, 4]


def test_two_memories_in_one_page_alternate_appends(page: Page) -> None:
    """Two connections appending in turn, each with its own view of the session: dense seq, all kept."""
    db = unique_name("alternate")
    out = page.py(f"""
import chatmem
a = await chatmem.open({db!r})
b = await chatmem.open({db!r})
s = await a.sessions.create()
for i in range(30):
    await (a if i % 3 else b).messages.append(s.session_id, "user", str(i))
msgs = await a.store.list_messages(s.session_id, 0, None, False)
meta = await a.store.get_session(s.session_id)
await a.close()
await b.close()
[[m["seq"] for m in msgs], [m["content"] for m in msgs], meta["messageCount"], meta["nextSeq"]]
""")
    seqs, contents, count, nxt = out
    assert seqs == list(range(30)) and contents == [str(i) for i in range(30)]
    assert count == 30 and nxt == 30
