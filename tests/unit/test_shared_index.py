"""The shared index's protocol on CPython: several ``Memory`` objects over one store play
the tabs, an in-process origin plays the Web Lock and the BroadcastChannel (the same rules
as ``web/js/index-share.js``; the browser tests run the real one)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

import pytest

import chatmem
from chatmem.errors import QueryTimeout, ReadOnlySQLError
from chatmem.index.sql_engine import DuckDBEngine
from chatmem.runtime.cpython import CPythonRuntime
from chatmem.stores.inprocess import MemoryStore

CLOSED = json.dumps({"ok": False, "error": {"type": "DatabaseClosed", "message": "closed"}})
CANCELLED = json.dumps({"ok": False, "error": {"type": "QueryError", "message": "cancelled"}})


class Origin:
    """One lock (the owner, then a line of waiting tabs) and one broadcast channel."""

    def __init__(self) -> None:
        self.holder: Tab | None = None
        self.line: list[tuple[Tab, Callable[[], None]]] = []
        self.tabs: list[Tab] = []

    def post(self, sender: Tab, msg: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        for t in list(self.tabs):
            if t is not sender:
                loop.call_soon(t.message, dict(msg))  # delivered later, like a BroadcastChannel

    def release(self, tab: Tab) -> None:
        if self.holder is not tab:
            self.line = [(t, cb) for t, cb in self.line if t is not tab]
            return
        self.holder = None
        while self.line:
            nxt, cb = self.line.pop(0)
            if nxt.role == "guest":
                self.holder, nxt.role = nxt, "owner"
                asyncio.get_running_loop().call_soon(cb)
                return


class Tab:
    """A ``ShareTransport`` on the origin, with index-share.js's rules."""

    def __init__(self, origin: Origin):
        self.origin = origin
        self.role = "none"
        self.handler: Callable[[str, str], None] | None = None
        self.queue: list[tuple[str, str]] = []
        self.pending: dict[str, tuple[str, asyncio.Future[str]]] = {}
        self.asked: dict[str, Tab] = {}
        self.seen: set[str] = set()

    async def claim(self, on_owner: Callable[[], None]) -> str:
        self.origin.tabs.append(self)
        if self.origin.holder is None:
            self.origin.holder, self.role = self, "owner"
            return "owner"
        self.role = "guest"
        self.origin.line.append((self, on_owner))
        return "guest"

    def message(self, m: dict[str, Any]) -> None:
        if m["t"] == "req" and self.role == "owner" and m["id"] not in self.seen:
            self.take(m["id"], m["body"], m["from"])
        elif m["t"] == "res" and m["to"] is self:
            self.settle(m["id"], m["body"])
        elif m["t"] == "owner" and self.role == "guest":
            for rid, (body, _) in self.pending.items():
                self.origin.post(self, {"t": "req", "id": rid, "from": self, "body": body})

    def take(self, rid: str, body: str, frm: Tab) -> None:
        self.seen.add(rid)
        self.asked[rid] = frm
        if self.handler:
            self.handler(rid, body)
        else:
            self.queue.append((rid, body))

    def settle(self, rid: str, body: str) -> None:
        got = self.pending.pop(rid, None)
        if got and not got[1].done():
            got[1].set_result(body)

    async def request(self, rid: str, body: str) -> str:
        if self.role not in ("owner", "guest"):
            return CLOSED
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.pending[rid] = (body, fut)
        if self.role == "owner":
            self.take(rid, body, self)
        else:
            self.origin.post(self, {"t": "req", "id": rid, "from": self, "body": body})
        return await fut

    def forget(self, rid: str) -> None:
        self.settle(rid, CANCELLED)

    def serve(self, handler: Callable[[str, str], None]) -> None:
        self.handler = handler
        queued, self.queue = self.queue, []
        for rid, body in queued:
            handler(rid, body)
        for rid, (body, _) in list(self.pending.items()):
            if rid not in self.seen:
                self.take(rid, body, self)
        self.origin.post(self, {"t": "owner", "from": self})

    def answer(self, rid: str, body: str) -> None:
        frm = self.asked.pop(rid, None)
        if frm is self:
            self.settle(rid, body)
        elif frm is not None:
            self.origin.post(self, {"t": "res", "id": rid, "to": frm, "body": body})

    def stop(self) -> None:
        self.role = "closing"
        for rid in list(self.pending):
            self.settle(rid, CLOSED)

    async def close(self) -> None:
        self.stop()
        self.role = "closed"
        self.crash()

    def crash(self) -> None:
        """The tab goes: it hears nothing more and the browser releases its lock."""
        if self in self.origin.tabs:
            self.origin.tabs.remove(self)
        self.origin.release(self)


class TabRuntime(CPythonRuntime):
    """CPython with a cache name (so the index is shared) and in-memory engines."""

    def __init__(self, origin: Origin):
        super().__init__()
        self.origin = origin
        self.tab: Tab | None = None

    def index_cache(self, store: Any) -> str:
        return "shared-index"

    async def open_query_engine(self, cache: str | None = None) -> DuckDBEngine:
        return DuckDBEngine()

    def index_share(self, cache: str) -> Tab:
        self.tab = Tab(self.origin)
        return self.tab


async def tabs(n: int) -> tuple[list[chatmem.Memory], list[TabRuntime]]:
    origin, store = Origin(), MemoryStore()
    runtimes = [TabRuntime(origin) for _ in range(n)]
    return [chatmem.Memory(store, runtime=r) for r in runtimes], runtimes


async def fill(mem: chatmem.Memory) -> str:
    s = await mem.sessions.create(title="fruit")
    await mem.messages.append_many(
        s.session_id, [{"role": "user", "content": f"apple {i}"} for i in range(4)]
    )
    return s.session_id


async def test_guests_ask_the_owner_and_see_their_own_writes() -> None:
    await _test_guests_ask_the_owner_and_see_their_own_writes()


async def _test_guests_ask_the_owner_and_see_their_own_writes() -> None:
    """Only the first tab builds an index; the others' queries, user SQL included, run on it;
    a guest's write is visible to its next query, and to the others' after that."""
    (a, b, c), _ = await tabs(3)
    sid = await fill(a)
    assert len(await a.search("apple", limit=10)) == 4
    assert len(await b.search("apple", limit=10)) == 4
    await c.messages.append(sid, "user", "banana split")  # before c's first query
    assert [h.message.content for h in await c.search("banana")] == ["banana split"]
    assert [b.index.role, c.index.role, a.index.role] == ["guest", "guest", "owner"]
    assert b.index.hydrations == 0 and type(b.index.query_index.engine).__name__ == "RemoteEngine"
    await c.messages.append(sid, "user", "banana bread")
    assert len(await c.search("banana")) == 2
    assert len(await b.search("banana")) == 2
    # the BM25 figures a guest read before the owner's writes are not reused after them
    await c.messages.append_many(
        sid, [{"role": "user", "content": f"apple apple tart {i}"} for i in range(3)]
    )
    assert len(await c.search("tart")) == 3

    def scored(hits: list[Any]) -> list[tuple[str, float]]:
        return [(h.message.id, round(h.score, 9)) for h in hits]

    assert scored(await b.search("apple", limit=20)) == scored(await a.search("apple", limit=20))
    assert await b.sql("SELECT count(*) AS n FROM messages") == [{"n": 9}]
    with pytest.raises(ReadOnlySQLError):
        await b.sql("DELETE FROM messages")
    assert a.index.hydrations == 1 and a.index.share.served >= 4
    for m in (b, c, a):
        await m.close()


async def test_a_guest_timeout_interrupts_the_query_at_the_owner() -> None:
    await _test_a_guest_timeout_interrupts_the_query_at_the_owner()


async def _test_a_guest_timeout_interrupts_the_query_at_the_owner() -> None:
    """``mem.sql(timeout=)`` from a guest interrupts the statement on the owner's engine,
    which then answers the next query at once."""
    (a, b), _ = await tabs(2)
    await fill(a)
    await a.search("apple")
    with pytest.raises(QueryTimeout):
        await b.sql("SELECT count(*) AS n FROM range(100000000000) t(x) WHERE x % 7 = 3", timeout=0.3)
    assert await b.sql("SELECT count(*) AS n FROM messages") == [{"n": 4}]
    for m in (b, a):
        await m.close()


@pytest.mark.parametrize("how", ["crash", "close"])
async def test_the_next_tab_takes_over_and_answers_what_was_asked_meanwhile(how: str) -> None:
    await _takeover(how)


async def _takeover(how: str) -> None:
    """The owner goes (crashes, or closes); requests asked meanwhile wait for the next owner
    and are answered, with the writes made during the handover."""
    (a, b, c), runtimes = await tabs(3)
    sid = await fill(a)
    for m in (a, b, c):
        await m.search("apple")
    assert [m.index.role for m in (a, b, c)] == ["owner", "guest", "guest"]
    if how == "crash":
        assert runtimes[0].tab is not None
        runtimes[0].tab.crash()
    else:
        await a.close()
    await c.messages.append(sid, "user", "cherry during the handover")
    got = await asyncio.gather(c.search("cherry apple", limit=10), b.search("apple", limit=10))
    assert [len(g) for g in got] == [5, 4]
    assert len(await b.search("cherry")) == 1
    assert sorted([b.index.role, c.index.role]) == ["guest", "owner"]
    owner = b if b.index.role == "owner" else c
    assert owner.index.takeovers == 1 and owner.index.share.served >= 1, owner.index.status()
    await c.messages.append(sid, "user", "damson after the handover")
    assert len(await c.search("damson")) == 1 and len(await b.search("damson")) == 1
    for m in (b, c):
        await m.close()


def _nearest(**over: Any) -> dict[str, Any]:
    """A well-formed nearest request but for ``over`` (a value None: the key left out)."""
    req = {"op": "nearest", "model_key": 1, "dim": 2, "vector": [1, 2], "k": 5, "candidates": 9, **over}
    return {k: v for k, v in req.items() if v is not None}


_NO_FILTER = {"sessions": None, "roles": None, "start": None, "end": None}

BAD_REQUESTS: list[tuple[dict[str, Any], str]] = [
    (_nearest(dim=3), "vector"),
    (_nearest(vector=[1, "x"]), "vector"),
    (_nearest(vector=[1, float("nan")]), "vector"),
    (_nearest(model_key="1"), "model_key"),
    (_nearest(k=0), "k"),
    (_nearest(candidates=None), "candidates"),
    (_nearest(dim=2**40, vector=[]), "dim"),
    (_nearest(filter=[1]), "filter"),
    (_nearest(filter={**_NO_FILTER, "sessions": ["a"], "start": "x"}), "filter"),
    (_nearest(filter={**_NO_FILTER, "sessions": [1]}), "filter"),
    ({"op": "execute", "sql": ["SELECT 1"]}, "sql"),
    ({"op": "execute"}, "sql"),
    ({"op": "sql", "sql": "SELECT 1", "params": "x"}, "params"),
    ({"op": "embed", "model": 3}, "model"),
    ({"op": "embed", "model": "m", "batch_size": -1}, "batch_size"),
    ({"op": "embed", "model": "m", "limit": True}, "limit"),
    ({"op": "load", "table": "embeddings", "columns": "id", "rows": []}, "columns"),
    ({"op": "load", "table": "embeddings", "columns": ["id"], "rows": [["a", "b"]]}, "rows"),
    ({"op": "load", "table": "embeddings", "columns": ["id"], "rows": {"a": 1}}, "rows"),
    ({"op": "load", "table": "messages", "columns": ["id"], "rows": []}, "table"),
    ({"op": "ready", "stale": [1, 2]}, "stale"),
    ({"op": "drop"}, "op"),
]


@pytest.mark.parametrize(("request_fields", "field"), BAD_REQUESTS, ids=[f for _, f in BAD_REQUESTS])
async def test_a_malformed_guest_request_is_a_validation_error(
    request_fields: dict[str, Any], field: str
) -> None:
    """Another tab may run another version of the page: each field of its request is
    checked, the answer is a ValidationError naming it, and the owner goes on serving."""
    from chatmem.index.shared import answer_guest

    (a, b), _ = await tabs(2)
    await fill(a)
    assert len(await b.search("apple", limit=10)) == 4
    with pytest.raises(chatmem.errors.ValidationError) as raised:
        await answer_guest(a.index, dict(request_fields))
    assert raised.value.field == field
    # through the share, the guest gets the same typed error
    op = request_fields["op"]
    args = {k: v for k, v in request_fields.items() if k != "op"}
    with pytest.raises(chatmem.errors.ValidationError):
        await b.index.share.call(op, **args)
    assert len(await b.search("apple", limit=10)) == 4
    assert await b.sql("SELECT count(*) AS n FROM messages") == [{"n": 4}]
    for m in (b, a):
        await m.close()


async def test_a_well_formed_nearest_request_with_a_real_model_key_is_answered() -> None:
    """Model keys are 53-bit hashes: the check takes any of them (the CPython engine keeps
    no approximate index and answers None)."""
    from chatmem.index.embeddings import model_key
    from chatmem.index.shared import answer_guest

    (a,), _ = await tabs(1)
    await fill(a)
    key = model_key("a model whose hash is large")
    assert key > 2**40
    req = _nearest(model_key=key, vector=[0.6, 0.8], k=3)
    assert await answer_guest(a.index, req) is None
    # with a filter, as a guest's filtered search sends it (an engine here keeps no
    # approximate index: None, not an error)
    flt = {"sessions": ["s1"], "roles": ["user"], "start": -(2**63), "end": 2**63 - 1}
    assert await answer_guest(a.index, dict(req, filter=flt)) is None
    assert await answer_guest(a.index, dict(req, filter=dict(flt, sessions=None, start=None))) is None
    await a.close()
