"""Appends in real Chromium when the session changed behind this tab's back.

A tab appends over the session record it last wrote or read without waiting
for the read (one round trip); the read still runs first in the same
transaction, and a record that differs aborts it. Here a second writer that
sends no notice (plain IndexedDB from the page) changes the session between
two appends, so the tab's view is stale for sure."""

from __future__ import annotations

from typing import Any, Iterator

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
    return str(
        page.py(f"""
import chatmem, builtins
builtins._mem = mem = await chatmem.open({db!r})
s = await mem.sessions.create(title="mine")
await mem.messages.append_many(s.session_id, [{{"role": "user", "content": f"m{{i}}"}} for i in range(3)])
s.session_id
""")
    )


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


# A batch is built and fed to its transaction a chunk at a time; two-message chunks
# here, so every batch below spans several chunks.
CHUNKS = "import chatmem.conversations.messages\nchatmem.conversations.messages.BATCH_CHUNK = 2\n"


@pytest.fixture
def chunked(page: Page) -> Iterator[Page]:
    """The shared page with two-message chunks for the test, the default restored after."""
    page.py(
        "import builtins, chatmem.conversations.messages\n"
        "builtins._chunk = chatmem.conversations.messages.BATCH_CHUNK\nNone"
    )
    yield page
    page.py(
        "import builtins, chatmem.conversations.messages\n"
        "chatmem.conversations.messages.BATCH_CHUNK = builtins._chunk\nNone"
    )


def test_batch_in_chunks_survives_reload(new_page: Any) -> None:
    """A batch fed in many chunks is written whole, dense seq, and is there after a reload."""
    db = unique_name("chunks")
    p = new_page()
    sid = p.py(
        CHUNKS
        + f"""
import chatmem
mem = await chatmem.open({db!r})
s = await mem.sessions.create(title="chunks")
got = await mem.messages.append_many(s.session_id, [{{"role": "user", "content": f"m{{i}}"}} for i in range(41)])
assert [m.seq for m in got] == list(range(41)), [m.seq for m in got]
more = await mem.messages.append_many(s.session_id, [{{"role": "user", "content": f"n{{i}}"}} for i in range(17)])
assert [m.seq for m in more] == list(range(41, 58))
s.session_id
"""
    )
    p.reload()
    out = p.py(f"""
import chatmem
mem = await chatmem.open({db!r})
recs = await mem.store.list_messages({sid!r}, 0, None, False)
indexed = (await mem.sql("SELECT count(*) AS n FROM messages"))[0]["n"]
count = (await mem.sessions.get({sid!r})).message_count
await mem.close()
[[r["seq"] for r in recs], [r["content"] for r in recs][40:42], count, indexed]
""")
    seqs, around, count, indexed = out
    assert seqs == list(range(58)) and around == ["m40", "n0"] and count == 58 and indexed == 58


def test_batch_failing_in_a_later_chunk_writes_nothing(chunked: Page) -> None:
    """Bad input after the first chunks were fed: ValidationError; a stored id reused in a
    later chunk: DuplicateId. Either way none of the batch is written and the next
    append gets the next seq."""
    page = chunked
    db = unique_name("chunkfail")
    sid = _open(page, db)
    out = page.py(
        CHUNKS
        + f"""
import builtins
from chatmem import errors
mem = builtins._mem
first = (await mem.messages.list({sid!r}, limit=1))[0]
good = [{{"role": "user", "content": f"g{{i}}"}} for i in range(20)]
caught = []
for bad in ({{"role": "robot", "content": "x"}}, {{"role": "user", "content": "dupe", "id": first.id}}):
    try:
        await mem.messages.append_many({sid!r}, good + [bad] + good[:1])
        caught.append(None)
    except (errors.ValidationError, errors.DuplicateId) as e:
        caught.append([type(e).__name__, getattr(e, "index", None)])
after = [m.content for m in await mem.messages.list({sid!r}, limit=None)]
nxt = await mem.messages.append({sid!r}, "user", "d")
count = (await mem.sessions.get({sid!r})).message_count
stored = await mem.store.count_messages({sid!r})
await mem.close()
[caught, after, nxt.seq, count, stored]
"""
    )
    caught, after, seq, count, stored = out
    assert caught == [["ValidationError", 20], ["DuplicateId", None]]
    assert after == ["m0", "m1", "m2"] and seq == 3 and count == 4 and stored == 4


def test_batch_in_chunks_over_a_session_changed_elsewhere(chunked: Page) -> None:
    """The known record is stale: the chunks fed are dropped with the aborted transaction
    and the batch is written again over the stored record, after the other writer's message."""
    page = chunked
    db = unique_name("chunkstale")
    sid = _open(page, db)
    page.page.evaluate(ELSEWHERE, [db, sid, "renamed"])
    out = page.py(
        CHUNKS
        + f"""
import builtins
mem = builtins._mem
got = await mem.messages.append_many({sid!r}, [{{"role": "user", "content": f"b{{i}}"}} for i in range(20)])
msgs = await mem.messages.list({sid!r}, limit=None)
meta = await mem.sessions.get({sid!r})
await mem.close()
[[m.seq for m in got], [(m.seq, m.content) for m in msgs][2:5], meta.title, meta.message_count]
"""
    )
    seqs, around, title, count = out
    assert seqs == list(range(4, 24))
    assert around == [[2, "m2"], [3, "from elsewhere"], [4, "b0"]]
    assert title == "renamed" and count == 24


def test_batch_in_chunks_without_a_known_record(chunked: Page) -> None:
    """A fresh connection knows no session record: the batch is written over a read;
    a session that does not exist is refused with nothing written."""
    page = chunked
    db = unique_name("chunkfresh")
    sid = _open(page, db)
    out = page.py(
        CHUNKS
        + f"""
import builtins, chatmem
from chatmem import errors
await builtins._mem.close()
mem = await chatmem.open({db!r})
got = await mem.messages.append_many({sid!r}, [{{"role": "user", "content": f"f{{i}}"}} for i in range(20)])
try:
    await mem.messages.append_many("no-such-session", [{{"role": "user", "content": "x"}}] * 20)
    err = None
except errors.SessionNotFound as e:
    err = type(e).__name__
stored = await mem.store.count_messages("no-such-session")
count = (await mem.sessions.get({sid!r})).message_count
await mem.close()
[[m.seq for m in got][:2], err, stored, count]
"""
    )
    assert out == [[3, 4], "SessionNotFound", 0, 23]
