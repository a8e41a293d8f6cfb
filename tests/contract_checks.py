"""The store contract: one table of checks, run against every store.

Plain async functions (no pytest import) so the same file runs on CPython
(memory, SQLite) and in Pyodide in Chromium (IndexedDB). Each check gets
``make(**kwargs)``, an async factory of a *fresh* ``Memory`` (kwargs go to
``chatmem.open``), and raises ``AssertionError`` on failure.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable

import chatmem
from chatmem import errors

Make = Callable[..., Awaitable[chatmem.Memory]]
CHECKS: dict[str, Callable[[Make], Awaitable[None]]] = {}


def check(fn: Callable[[Make], Awaitable[None]]) -> Callable[[Make], Awaitable[None]]:
    CHECKS[fn.__name__.removeprefix("check_")] = fn
    return fn


class TickClock:
    """A clock that moves 1 ms per reading, from a fixed start."""

    def __init__(self, start: int = 1_700_000_000_000):
        self.t = start

    def __call__(self) -> int:
        self.t += 1
        return self.t


async def raises(exc: type[BaseException], aw: Awaitable[Any]) -> BaseException:
    try:
        await aw
    except exc as e:
        return e
    raise AssertionError(f"expected {exc.__name__}")


# ---------------------------------------------------------------------------- sessions


@check
async def check_session_create_get(make: Make) -> None:
    """create() returns defaults; get() returns the same; unknown id is SessionNotFound."""
    async with await make() as mem:
        s = await mem.sessions.create(title="Hello", character_id="airi", tags=["a", "b"])
        assert s.title == "Hello" and s.character_id == "airi" and s.user_id == "local"
        assert s.tags == ["a", "b"] and not s.pinned and not s.archived and s.message_count == 0
        assert isinstance(s.created_at, int) and s.created_at == s.updated_at
        got = await mem.sessions.get(s.session_id)
        assert got == s
        d = await mem.sessions.create()
        assert d.title == "New Conversation" and d.character_id == "default"
        assert d.session_id > s.session_id, "ids sort by creation time"
        await raises(errors.SessionNotFound, mem.sessions.get("nope"))


@check
async def check_session_list_order_and_filters(make: Make) -> None:
    """list(): newest updated first, pinned first, archived views, user/character filters, paging."""
    async with await make(clock=TickClock()) as mem:
        a = await mem.sessions.create(title="a", user_id="u1", character_id="c1")
        b = await mem.sessions.create(title="b", user_id="u2", character_id="c1")
        c = await mem.sessions.create(title="c", user_id="u1", character_id="c2")
        await mem.messages.append(a.session_id, "user", "bump a")  # a is now the newest
        ids = [m.session_id for m in await mem.sessions.list()]
        assert ids == [a.session_id, c.session_id, b.session_id], ids
        await mem.sessions.update(b.session_id, pinned=True)
        ids = [m.session_id for m in await mem.sessions.list()]
        assert ids == [b.session_id, a.session_id, c.session_id], ids
        ids = [m.session_id for m in await mem.sessions.list(pinned_first=False)]
        assert ids == [a.session_id, c.session_id, b.session_id], ids
        await mem.sessions.archive(c.session_id)
        assert [m.session_id for m in await mem.sessions.list()] == [b.session_id, a.session_id]
        assert [m.session_id for m in await mem.sessions.list(archived=True)] == [c.session_id]
        assert len(await mem.sessions.list(archived=None)) == 3
        assert {m.session_id for m in await mem.sessions.list(user_id="u1", archived=None)} == {
            a.session_id,
            c.session_id,
        }
        assert [m.session_id for m in await mem.sessions.list(character_id="c1")] == [
            b.session_id,
            a.session_id,
        ]
        assert [m.session_id for m in await mem.sessions.list(limit=1, offset=1)] == [a.session_id]
        await mem.sessions.unarchive(c.session_id)
        assert len(await mem.sessions.list()) == 3


@check
async def check_session_update(make: Make) -> None:
    """update() changes only what it is given; bad types are ValidationError; unknown id fails."""
    async with await make() as mem:
        s = await mem.sessions.create(title="old")
        u = await mem.sessions.update(s.session_id, title="new", tags=["x"])
        assert u.title == "new" and u.tags == ["x"] and not u.pinned
        assert (await mem.sessions.get(s.session_id)).title == "new"
        await raises(errors.ValidationError, mem.sessions.update(s.session_id, pinned="yes"))
        await raises(errors.ValidationError, mem.sessions.update(s.session_id, tags="notalist"))
        assert (await mem.sessions.get(s.session_id)).pinned is False
        await raises(errors.SessionNotFound, mem.sessions.update("missing", title="x"))


@check
async def check_session_delete_takes_messages(make: Make) -> None:
    """delete() removes the session and its messages."""
    async with await make() as mem:
        s = await mem.sessions.create()
        m = await mem.messages.append(s.session_id, "user", "hi")
        keep = await mem.sessions.create()
        await mem.messages.append(keep.session_id, "user", "stay")
        await mem.sessions.delete(s.session_id)
        await raises(errors.SessionNotFound, mem.sessions.get(s.session_id))
        await raises(errors.MessageNotFound, mem.messages.get(m.id))
        await raises(errors.SessionNotFound, mem.sessions.delete(s.session_id))
        assert await mem.messages.count(keep.session_id) == 1


# ---------------------------------------------------------------------------- messages


@check
async def check_append_and_read(make: Make) -> None:
    """append() assigns dense seq, bumps the session; get/list/count/paging agree."""
    async with await make(clock=TickClock()) as mem:
        s = await mem.sessions.create()
        msgs = []
        for i in range(12):
            role = "user" if i % 2 == 0 else "assistant"
            msgs.append(
                await mem.messages.append(s.session_id, role, f"message {i}", provider="p", model="m")
            )
        assert [m.seq for m in msgs] == list(range(12))
        meta = await mem.sessions.get(s.session_id)
        assert meta.message_count == 12 and meta.updated_at == msgs[-1].created_at > meta.created_at
        assert await mem.messages.count(s.session_id) == 12
        got = await mem.messages.get(msgs[3].id)
        assert got == msgs[3] and got.content == "message 3" and got.provider == "p"
        assert [m.seq for m in await mem.messages.list(s.session_id, limit=5, offset=2)] == [2, 3, 4, 5, 6]
        assert [m.seq for m in await mem.messages.list(s.session_id, limit=3, newest_first=True)] == [
            11,
            10,
            9,
        ]
        assert [
            m.seq for m in await mem.messages.list(s.session_id, limit=3, offset=10, newest_first=True)
        ] == [1, 0]
        assert len(await mem.messages.list(s.session_id, limit=None)) == 12
        assert await mem.messages.list(s.session_id, offset=50) == []
        await raises(errors.SessionNotFound, mem.messages.append("nope", "user", "x"))
        await raises(errors.MessageNotFound, mem.messages.get("nope"))


@check
async def check_many_sessions_messages_in_one_read(make: Make) -> None:
    """list_sessions_messages: each session's messages by seq, the sessions in the order
    asked (an unknown or empty one adds nothing), the same records as list_messages."""
    async with await make() as mem:
        a, b, empty = [await mem.sessions.create() for _ in range(3)]
        await mem.messages.append_many(a.session_id, [{"role": "user", "content": f"a{i}"} for i in range(5)])
        await mem.messages.append_many(b.session_id, [{"role": "user", "content": f"b{i}"} for i in range(3)])
        await mem.messages.append(a.session_id, "assistant", "a5")
        got = await mem.store.list_sessions_messages([b.session_id, "nope", empty.session_id, a.session_id])
        assert [m["content"] for m in got] == ["b0", "b1", "b2"] + [f"a{i}" for i in range(6)]
        assert got == (
            await mem.store.list_messages(b.session_id, 0, None, False)
            + await mem.store.list_messages(a.session_id, 0, None, False)
        )
        assert await mem.store.list_sessions_messages([]) == []


@check
async def check_rich_fields_roundtrip(make: Make) -> None:
    """Content parts, slices, tool results, categorization and tool calls come back intact."""
    async with await make() as mem:
        s = await mem.sessions.create()
        parts = [
            {"type": "text", "text": "look ✨ 日本語"},
            {"type": "image_url", "image_url": {"url": "data:,"}},
        ]
        call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        a = await mem.messages.append(
            s.session_id,
            "assistant",
            parts,
            slices=[{"type": "text", "text": "t"}, {"type": "tool-call", "toolCall": call}],
            tool_results=[{"id": "call_1", "result": "ok"}],
            categorization={"speech": "hi", "reasoning": "because"},
            tool_calls=[call],
            metadata={"k": [1, 2]},
        )
        t = await mem.messages.append(s.session_id, "tool", "ok", tool_call_id="call_1", name="f")
        b = await mem.messages.get(a.id)
        assert b.content == parts and b.slices[1]["toolCall"]["id"] == "call_1"
        assert b.tool_results == [{"id": "call_1", "result": "ok"}]
        assert b.categorization == {"speech": "hi", "reasoning": "because"}
        assert b.tool_calls == [call] and b.metadata == {"k": [1, 2]}
        assert b.text == "look ✨ 日本語" and b.token_count == chatmem.estimate_tokens("look ✨ 日本語")
        assert (await mem.messages.get(t.id)).tool_call_id == "call_1"


@check
async def check_bad_input_writes_nothing(make: Make) -> None:
    """Bad role, content, unknown field or wrong types raise ValidationError; nothing is written."""
    async with await make() as mem:
        s = await mem.sessions.create()
        await mem.messages.append(s.session_id, "user", "ok")
        before = await mem.sessions.get(s.session_id)
        bad: list[tuple[str, Any, dict[str, Any]]] = [
            ("robot", "x", {}),
            ("user", 42, {}),
            ("user", [{"text": "no type"}], {}),
            ("user", "x", {"colour": "red"}),
            ("user", "x", {"provider": 3}),
            ("user", "x", {"created_at": "yesterday"}),
            ("assistant", "x", {"slices": [{"type": "bogus"}]}),
            ("assistant", "x", {"categorization": {"speech": 1}}),
            ("assistant", "x", {"tool_results": [{"result": "no id"}]}),
        ]
        for role, content, fields in bad:
            e = await raises(
                errors.ValidationError, mem.messages.append(s.session_id, role, content, **fields)
            )
            assert str(e)
        e = await raises(
            errors.ValidationError,
            mem.messages.append_many(
                s.session_id, [{"role": "user", "content": "fine"}, {"role": "user", "content": None}]
            ),
        )
        assert e.index == 1 and e.field == "content"
        assert await mem.messages.count(s.session_id) == 1
        assert len(await mem.messages.list(s.session_id)) == 1
        after = await mem.sessions.get(s.session_id)
        assert after == before
        await raises(errors.ValidationError, mem.sessions.create(title=5))
        assert len(await mem.sessions.list(archived=None)) == 1


@check
async def check_failed_batch_leaves_nothing(make: Make) -> None:
    """A batch that fails midway (a duplicate id) writes none of its messages."""
    async with await make() as mem:
        s = await mem.sessions.create()
        first = await mem.messages.append(s.session_id, "user", "first", id="fixed-id")
        await raises(errors.DuplicateId, mem.messages.append(s.session_id, "user", "again", id="fixed-id"))
        batch = [{"role": "user", "content": f"b{i}"} for i in range(20)]
        batch[13]["id"] = "fixed-id"
        await raises(errors.DuplicateId, mem.messages.append_many(s.session_id, batch))
        assert await mem.messages.count(s.session_id) == 1
        assert [m.id for m in await mem.messages.list(s.session_id)] == [first.id]
        nxt = await mem.messages.append(s.session_id, "user", "next")
        assert nxt.seq == 1, "a failed batch consumes no seq"
        other = await mem.sessions.create()
        await raises(errors.DuplicateId, mem.messages.append(other.session_id, "user", "x", id="fixed-id"))


@check
async def check_append_many(make: Make) -> None:
    """append_many() writes a batch in order with consecutive seq."""
    async with await make() as mem:
        s = await mem.sessions.create()
        await mem.messages.append(s.session_id, "system", "sys")
        out = await mem.messages.append_many(
            s.session_id, [{"role": "user", "content": f"u{i}", "model": "m"} for i in range(100)]
        )
        assert [m.seq for m in out] == list(range(1, 101))
        assert [m.content for m in await mem.messages.list(s.session_id, limit=3, offset=1)] == [
            "u0",
            "u1",
            "u2",
        ]
        assert (await mem.sessions.get(s.session_id)).message_count == 101
        assert await mem.messages.append_many(s.session_id, []) == []


@check
async def check_concurrent_appends(make: Make) -> None:
    """Many tasks appending at once: every message kept, seq dense and unique."""
    async with await make() as mem:
        s = await mem.sessions.create()

        async def writer(w: int) -> None:
            for i in range(10):
                await mem.messages.append(s.session_id, "user", f"w{w}-{i}")

        await asyncio.gather(*(writer(w) for w in range(20)))
        msgs = await mem.messages.list(s.session_id, limit=None)
        assert sorted(m.seq for m in msgs) == list(range(200))
        assert len({m.content for m in msgs}) == 200
        assert (await mem.sessions.get(s.session_id)).message_count == 200


@check
async def check_fork(make: Make) -> None:
    """A fork at index 10 of 30 holds exactly the first 10; the parent is untouched."""
    async with await make() as mem:
        s = await mem.sessions.create(title="root", tags=["t"])
        src = await mem.messages.append_many(
            s.session_id,
            [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(30)],
        )
        f = await mem.sessions.fork(s.session_id, at_index=10, reason="try another way")
        assert f.parent_id == s.session_id and f.fork_index == 10 and f.fork_reason == "try another way"
        assert f.message_count == 10 and f.title == "root" and f.tags == ["t"]
        copied = await mem.messages.list(f.session_id, limit=None)
        assert [m.content for m in copied] == [f"m{i}" for i in range(10)]
        assert [m.seq for m in copied] == list(range(10))
        assert [m.role for m in copied] == [m.role for m in src[:10]]
        assert not {m.id for m in copied} & {m.id for m in src}
        assert await mem.messages.count(s.session_id) == 30
        assert (await mem.sessions.get(s.session_id)).parent_id is None
        whole = await mem.sessions.fork(s.session_id)
        assert whole.message_count == 30 and whole.fork_index == 30
        empty = await mem.sessions.fork(s.session_id, at_index=0)
        assert empty.message_count == 0
        await raises(errors.ValidationError, mem.sessions.fork(s.session_id, at_index=31))
        await raises(errors.ValidationError, mem.sessions.fork(s.session_id, at_index=-1))
        await raises(errors.SessionNotFound, mem.sessions.fork("missing"))
        n = await mem.messages.append(f.session_id, "user", "new branch")
        assert n.seq == 10 and await mem.messages.count(s.session_id) == 30


@check
async def check_stream(make: Make) -> None:
    """stream() yields every message in order, batch by batch."""
    async with await make() as mem:
        s = await mem.sessions.create()
        await mem.messages.append_many(
            s.session_id, [{"role": "user", "content": str(i)} for i in range(523)]
        )
        seen = [m.seq async for m in mem.messages.stream(s.session_id, batch_size=50)]
        assert seen == list(range(523))
        seen = [m.content async for m in mem.messages.stream(s.session_id, batch_size=1000)]
        assert seen == [str(i) for i in range(523)]
        e = await mem.sessions.create()
        assert [m async for m in mem.messages.stream(e.session_id)] == []


@check
async def check_clear_session(make: Make) -> None:
    """sessions.clear() drops the messages, keeps the session, and seq starts again."""
    async with await make() as mem:
        s = await mem.sessions.create(title="keep me")
        await mem.messages.append_many(s.session_id, [{"role": "user", "content": "x"}] * 5)
        cleared = await mem.sessions.clear(s.session_id)
        assert cleared.message_count == 0 and cleared.title == "keep me"
        assert await mem.messages.list(s.session_id) == []
        assert (await mem.messages.append(s.session_id, "user", "again")).seq == 0


@check
async def check_session_handle(make: Make) -> None:
    """mem.session(id): append, messages() and AIR's history() dicts."""
    async with await make() as mem:
        s = await mem.sessions.create()
        h = mem.session(s.session_id)
        await h.append("user", "hello", provider="openai", model="gpt-4o")
        await h.append("assistant", "hi!")
        hist = await h.history()
        assert [x["role"] for x in hist] == ["user", "assistant"]
        assert set(hist[0]) == {"role", "content", "provider", "model", "created_at"}
        assert hist[0]["provider"] == "openai" and hist[0]["model"] == "gpt-4o"
        assert [m.content for m in await h.messages()] == ["hello", "hi!"]


# ---------------------------------------------------------------------------- AIR's ContextStore


@check
async def check_context_store_contract(make: Make) -> None:
    """AIR's six methods over the same data as the Memory API."""
    async with await make() as mem:
        cs = mem.context_store
        assert isinstance(cs, chatmem.ContextStore)
        await cs.add_message("s1", "user", "hello", provider="openai", model="gpt-4o")
        await cs.add_message("s1", "assistant", "hi there")
        await cs.add_message("s2", "user", "other")
        msgs = await cs.get_messages("s1")
        assert msgs == [chatmem.Message("user", "hello"), chatmem.Message("assistant", "hi there")]
        hist = await cs.get_history("s1")
        assert hist[0]["provider"] == "openai" and hist[0]["model"] == "gpt-4o"
        assert isinstance(hist[0]["created_at"], int)
        assert set(hist[1]) == {"role", "content", "provider", "model", "created_at"}
        assert await cs.list_sessions() == ["s1", "s2"]
        assert (await mem.sessions.get("s1")).message_count == 2
        await cs.clear_session("s1")
        assert await cs.get_messages("s1") == []
        assert await cs.list_sessions() == ["s1", "s2"]
        await cs.delete_session("s2")
        assert await cs.list_sessions() == ["s1"]
        assert await cs.get_history("never") == []
        await cs.delete_session("never")  # no error: nothing to delete
        try:
            await cs.add_message("s1", "wizard", "x")
        except errors.ValidationError:
            pass
        else:
            raise AssertionError("bad role accepted")
        assert await cs.get_messages("s1") == []


@check
async def check_cache_is_coherent(make: Make) -> None:
    """Reads served from the LRU cache reflect every write made through the API."""
    async with await make() as mem:
        s = await mem.sessions.create()
        await mem.messages.append(s.session_id, "user", "a")
        assert len(await mem.messages.list(s.session_id)) == 1
        assert len(await mem.messages.list(s.session_id)) == 1  # cached
        await mem.messages.append(s.session_id, "user", "b")
        assert [m.content for m in await mem.messages.list(s.session_id)] == ["a", "b"]
        assert await mem.messages.count(s.session_id) == 2
        await mem.sessions.update(s.session_id, title="t2")
        assert (await mem.sessions.get(s.session_id)).title == "t2"
        await mem.sessions.delete(s.session_id)
        await raises(errors.SessionNotFound, mem.messages.list(s.session_id))
        meta_cache, page_cache = mem.cache
        assert meta_cache.hits + page_cache.hits > 0


# ---------------------------------------------------------------------------- the outbox


@check
async def check_outbox_fills_only_once_sync_is_on(make: Make) -> None:
    """Before sync is turned on no op is written; turning it on snapshots every session's
    nextSeq in one transaction; after it each change puts one op in the outbox in its own
    transaction (a failed write none), and a message op refers to the stored message."""
    from chatmem.sync.wire import resolve

    async with await make() as mem:
        old = await mem.sessions.create(title="before")
        await mem.messages.append_many(
            old.session_id, [{"role": "user", "content": f"h{i}"} for i in range(3)]
        )
        await mem.sessions.update(old.session_id, title="before 2")
        await mem.messages.add("early", "user", "x")
        assert await mem.store.outbox_counts() == (0, 0), "nothing queued while sync was never on"
        snap = await mem.store.outbox_activate(123)
        assert snap == {"at": 123, "sessions": sorted([[old.session_id, 3], ["early", 1]])}
        assert await mem.store.outbox_activate(456) == snap, "turned on once, for good"
        s = await mem.sessions.create(title="t")
        m = await mem.messages.append(s.session_id, "user", "hi")
        await mem.sessions.update(s.session_id, title="t2")
        await raises(
            errors.DuplicateId,
            mem.messages.append_many(
                s.session_id, [{"role": "user", "content": "x"}, {"role": "user", "content": "y", "id": m.id}]
            ),
        )
        await mem.messages.add(s.session_id, "assistant", "again")  # session exists: no session create
        await mem.messages.add("fresh", "user", "creates fresh")
        await mem.sessions.delete(s.session_id)
        ops = await mem.store.outbox_list()
        kinds = [(o["type"], o["resource"]) for o in ops]
        assert kinds == [
            ("create", "session"),
            ("create", "message"),
            ("update", "session"),
            ("create", "message"),
            ("create", "session"),
            ("create", "message"),
            ("delete", "session"),
        ], kinds
        assert ops[1]["id"] == m.id and ops[1]["data"] is None, "a message op refers, never copies"
        assert ops[2]["data"] == {"title": "t2"}
        assert all(
            set(o) >= {"op_id", "type", "resource", "id", "data", "timestamp", "hlc", "attempts"} for o in ops
        )
        assert len({o["op_id"] for o in ops}) == len(ops)
        hlcs = [o["hlc"] for o in ops]
        assert hlcs == sorted(hlcs), "HLCs grow"
        assert await mem.store.outbox_counts() == (7, 0)
        payload, gone = await resolve(mem.store, ops)
        # the session (and its messages) was deleted: their creates have nothing to deliver
        assert [o["id"] for o in gone] == [m.id, ops[3]["id"]]
        fresh = next(p for p in payload if p["resource"] == "message")
        stored = await mem.store.get_message(fresh["id"])
        assert fresh["hlc"] == stored.pop("hlc") and fresh["data"] == stored, "the record, its HLC apart"
        assert fresh["data"]["sessionId"] == "fresh" and fresh["data"]["content"] == "creates fresh"


@check
async def check_big_batches_and_imports_queue_ops_only_once_sync_is_on(make: Make) -> None:
    """A batch past the eager size and an import build their ops only when the outbox is on:
    none before; after, one per session and message, in order, HLCs growing; a failed batch none."""
    n = 40
    async with await make() as mem:
        s = await mem.sessions.create(title="big")
        await mem.messages.append_many(s.session_id, [{"role": "user", "content": f"b{i}"} for i in range(n)])
        await mem.import_sessions(await mem.export([s.session_id]))
        assert await mem.store.outbox_counts() == (0, 0), "nothing queued while sync was never on"
        await mem.store.outbox_activate(1)
        msgs = await mem.messages.append_many(
            s.session_id, [{"role": "user", "content": f"a{i}"} for i in range(n)]
        )
        report = await mem.import_sessions(await mem.export([s.session_id]))
        ops = await mem.store.outbox_list()
        assert [(o["type"], o["resource"], o["id"], o["data"]) for o in ops[:n]] == [
            ("create", "message", m.id, None) for m in msgs
        ]
        new_sid = report.session_ids[0]
        assert (ops[n]["type"], ops[n]["resource"], ops[n]["id"]) == ("create", "session", new_sid)
        assert "nextSeq" not in ops[n]["data"] and ops[n]["data"]["title"] == "big"
        imported = await mem.store.list_messages(new_sid, 0, None, False)
        assert [o["id"] for o in ops[n + 1 :]] == [m["id"] for m in imported] and len(imported) == 2 * n
        hlcs = [o["hlc"] for o in ops]
        assert hlcs == sorted(hlcs) and len(set(o["op_id"] for o in ops)) == len(ops)
        batch = [{"role": "user", "content": f"x{i}"} for i in range(20)] + [
            {"role": "user", "content": "y", "id": msgs[0].id}
        ]
        await raises(errors.DuplicateId, mem.messages.append_many(s.session_id, batch))
        assert (await mem.store.outbox_counts())[0] == len(ops), "a failed batch queues nothing"
        assert await mem.messages.count(s.session_id) == 2 * n


# ---------------------------------------------------------------------------- export / import


async def _sample(mem: chatmem.Memory) -> list[str]:
    a = await mem.sessions.create(title="Trip ✈ 東京", character_id="airi", tags=["travel"])
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    await mem.messages.append_many(
        a.session_id,
        [
            {"role": "system", "content": "be kind"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "weather?"}],
                "provider": "openai",
                "model": "gpt-4o",
            },
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call],
                "slices": [{"type": "tool-call", "toolCall": call}],
                "categorization": {"speech": "s", "reasoning": "r"},
            },
            {
                "role": "tool",
                "content": "sunny",
                "tool_call_id": "c1",
                "tool_results": [{"id": "c1", "result": "sunny"}],
            },
        ],
    )
    await mem.sessions.update(a.session_id, pinned=True)
    f = await mem.sessions.fork(a.session_id, at_index=2, reason="what if")
    b = await mem.sessions.create(title="empty")
    return [a.session_id, f.session_id, b.session_id]


@check
async def check_export_import_export_identity(make: Make) -> None:
    """export → import(preserve_ids=True) → export is identical but for exportedAt; a second import changes nothing."""
    from chatmem.transfer import canonical_dumps

    async with await make() as src:
        await _sample(src)
        first = await src.export()
    assert first["version"] == "1.0.0" and len(first["sessions"]) == 3
    async with await make() as dst:
        report = await dst.import_sessions(canonical_dumps(first), preserve_ids=True)
        assert report.sessions_imported == 3 and report.messages_imported == 6 and report.format == "chatmem"
        second = await dst.export()
        first["exportedAt"] = second["exportedAt"] = 0
        assert canonical_dumps(second) == canonical_dumps(first)
        pending = (await dst.store.outbox_counts())[0]
        again = await dst.import_sessions(first, preserve_ids=True)
        assert again.sessions_imported == 0 and again.sessions_skipped == 3
        third = await dst.export()
        third["exportedAt"] = 0
        assert canonical_dumps(third) == canonical_dumps(first)
        assert (await dst.store.outbox_counts())[0] == pending, "an idempotent re-import enqueues nothing"


@check
async def check_import_creates_new_sessions_by_default(make: Make) -> None:
    """A default import creates new sessions (fresh ids) and keeps the fork link between them."""
    async with await make() as src:
        ids = await _sample(src)
        data = await src.export([ids[0], ids[1]])
        partial = await src.export([ids[2]])
    assert [s["meta"]["sessionId"] for s in partial["sessions"]] == [ids[2]]
    async with await make() as dst:
        r1 = await dst.import_sessions(data)
        r2 = await dst.import_sessions(data)
        assert r1.sessions_imported == r2.sessions_imported == 2
        assert not set(r1.session_ids) & set(ids) and not set(r1.session_ids) & set(r2.session_ids)
        metas = {m.session_id: m for m in await dst.sessions.list(limit=None)}
        assert len(metas) == 4
        fork = metas[r1.session_ids[1]]
        assert fork.parent_id == r1.session_ids[0] and fork.fork_index == 2
        msgs = await dst.messages.list(r1.session_ids[0])
        assert [m.role for m in msgs] == ["system", "user", "assistant", "tool"]
        assert msgs[2].tool_calls[0]["id"] == "c1" and msgs[3].tool_call_id == "c1"


@check
async def check_bad_imports_write_nothing(make: Make) -> None:
    """Malformed JSON, a wrong version, one bad message among 1,000, an unknown format: a clear error, nothing written."""
    async with await make() as mem:
        await mem.store.outbox_activate(0)
        s = await mem.sessions.create()
        good = await mem.export()
        msgs = [
            {"id": f"m{i}", "sessionId": "S", "seq": i, "role": "user", "content": f"x{i}", "createdAt": 1}
            for i in range(1000)
        ]
        msgs[617]["role"] = "robot"
        one_bad = {
            "version": "1.0.0",
            "exportedAt": 1,
            "sessions": [{"meta": dict(good["sessions"][0]["meta"], sessionId="S"), "messages": msgs}],
        }
        cases = [
            ("{not json", "JSON"),
            (dict(good, version="9.9.9"), "version"),
            (one_bad, "messages[617].role"),
            ({"hello": "world"}, "format"),
        ]
        for data, needle in cases:
            e = await raises(errors.ValidationError, mem.import_sessions(data, preserve_ids=True))
            assert needle.lower() in str(e).lower(), (needle, str(e))
        assert [m.session_id for m in await mem.sessions.list(limit=None)] == [s.session_id]
        assert (await mem.store.outbox_counts())[0] == 1


@check
async def check_an_import_reusing_a_stored_message_id_writes_nothing(make: Make) -> None:
    """A restored backup whose message id is already stored in another session: DuplicateId
    from the store's one transaction, and none of the import written (nor queued)."""
    async with await make() as mem:
        await mem.store.outbox_activate(0)
        s = await mem.sessions.create()
        await mem.messages.append(s.session_id, "user", "kept", id="fixed-1")
        before = await mem.export()
        msgs = [
            {
                "id": f"new-{i}",
                "sessionId": "S2",
                "seq": i,
                "role": "user",
                "content": f"x{i}",
                "createdAt": 1,
            }
            for i in range(300)
        ]
        msgs[250]["id"] = "fixed-1"
        data = {
            "version": "1.0.0",
            "exportedAt": 1,
            "sessions": [
                {"meta": dict(before["sessions"][0]["meta"], sessionId="S1b"), "messages": []},
                {"meta": dict(before["sessions"][0]["meta"], sessionId="S2"), "messages": msgs},
            ],
        }
        await raises(errors.DuplicateId, mem.import_sessions(data, preserve_ids=True))
        assert [m.session_id for m in await mem.sessions.list(limit=None)] == [s.session_id]
        assert await mem.store.get_message("new-0") is None
        assert (await mem.export())["sessions"] == before["sessions"]
        assert (await mem.store.outbox_counts())[0] == 2


def _chatgpt(convs: int, per: int, *, ids: bool = False, first: int = 0) -> list[dict[str, Any]]:
    """A ChatGPT export of ``convs`` linear conversations of ``per`` messages (numbered
    from ``first``; with ``ids``, each has a ``conversation_id``)."""
    out = []
    for c in range(first, first + convs):
        mapping: dict[str, Any] = {
            f"c{c}-r": {"id": f"c{c}-r", "message": None, "parent": None, "children": [f"c{c}-0"]}
        }
        for i in range(per):
            mapping[f"c{c}-{i}"] = {
                "id": f"c{c}-{i}",
                "parent": f"c{c}-{i - 1}" if i else f"c{c}-r",
                "children": [f"c{c}-{i + 1}"] if i + 1 < per else [],
                "message": {
                    "id": f"c{c}-{i}",
                    "author": {"role": ("user", "assistant")[i % 2]},
                    "create_time": 1_700_000_000 + i,
                    "content": {"content_type": "text", "parts": [f"conv {c} turn {i}"]},
                },
            }
        out.append(
            {
                "title": f"c{c}",
                "create_time": 1_700_000_000,
                "update_time": 1_700_000_100,
                "mapping": mapping,
                "current_node": f"c{c}-{per - 1}",
            }
        )
        if ids:
            out[-1]["conversation_id"] = f"conv-{c}"
    return out


@check
async def check_every_message_keeps_the_hlc_of_its_create(make: Make) -> None:
    """Every way a message is written stamps it with an HLC, rising with ``seq``, that its
    ``create`` operation carries too; it is the store's own: not in the model, the export
    or the pushed data."""
    from chatmem.sync.wire import wire_op

    async with await make() as mem:
        await mem.store.outbox_activate(0)
        s = await mem.sessions.create(title="order")
        await mem.messages.append(s.session_id, "user", "one")
        await mem.messages.append_many(
            s.session_id, [{"role": "user", "content": f"m{i}"} for i in range(40)]
        )
        fork = await mem.sessions.fork(s.session_id, at_index=3)
        report = await mem.import_sessions(_chatgpt(1, 30, ids=True))
        ops = {op["id"]: op for op in await mem.store.outbox_list() if op["resource"] == "message"}
        for sid in (s.session_id, fork.session_id, *report.session_ids):
            records = await mem.store.list_messages(sid, 0, None, False)
            assert records and all(isinstance(r.get("hlc"), str) for r in records), sid
            assert [r["hlc"] for r in records] == sorted({r["hlc"] for r in records}), "rising with seq"
            assert all(ops[r["id"]]["hlc"] == r["hlc"] for r in records), "the create's HLC"
            assert all("hlc" not in wire_op(ops[r["id"]], r)["data"] for r in records)
        later = (await mem.store.list_messages(fork.session_id, 0, None, False))[0]["hlc"]
        assert later > (await mem.store.list_messages(s.session_id, 0, None, True))[0]["hlc"]
        assert "hlc" not in json.dumps(await mem.export())
        assert not hasattr(await mem.messages.get(records[0]["id"]), "hlc")


@check
async def check_importing_a_chatgpt_export_again_adds_only_what_is_new(make: Make) -> None:
    """A conversation already imported (same source id) is not copied again: unchanged it
    is skipped, grown it takes only its new messages (after what was added here), and the
    report says how many were new, updated and already here. The same conversation twice
    in one file is written once."""
    async with await make() as mem:
        await mem.store.outbox_activate(0)
        first = await mem.import_sessions(json.dumps(_chatgpt(3, 4, ids=True)))
        assert (first.sessions_imported, first.messages_imported) == (3, 12)
        by_title = {s.title: s.session_id for s in await mem.sessions.list(limit=None)}
        await mem.messages.append(by_title["c0"], "user", "said here")
        queued = (await mem.store.outbox_counts())[0]
        again = await mem.import_sessions(json.dumps(_chatgpt(3, 4, ids=True)))
        assert (again.sessions_imported, again.sessions_skipped, again.messages_imported) == (0, 3, 0)
        assert len(await mem.sessions.list(limit=None)) == 3
        assert (await mem.store.outbox_counts())[0] == queued
        grown = (
            _chatgpt(3, 6, ids=True) + _chatgpt(1, 2, ids=True, first=3) + _chatgpt(1, 2, ids=True, first=3)
        )
        del grown[2]  # c2 is not in this export: nothing happens to it
        report = await mem.import_sessions(grown)
        assert (report.sessions_imported, report.sessions_replaced, report.sessions_skipped) == (3, 2, 0)
        assert report.messages_imported == 2 + 2 + 2
        titles = sorted(s.title for s in await mem.sessions.list(limit=None))
        assert titles == ["c0", "c1", "c2", "c3"], titles
        assert [m.content for m in await mem.messages.list(by_title["c0"], limit=None)] == [
            *(f"conv 0 turn {i}" for i in range(4)),
            "said here",
            "conv 0 turn 4",
            "conv 0 turn 5",
        ]
        assert [m.seq for m in await mem.messages.list(by_title["c1"], limit=None)] == list(range(6))
        assert len(await mem.messages.list(by_title["c2"], limit=None)) == 4
        assert (await mem.store.outbox_counts())[0] == queued + 2 + 2 + 1 + 2
        assert [h.message.content for h in await mem.search('"conv 1 turn 5"', limit=1)] == ["conv 1 turn 5"]


@check
async def check_a_bad_conversation_late_in_a_big_import_writes_nothing(make: Make) -> None:
    """A ChatGPT export of several thousand messages whose last conversation holds a bad role:
    the error names it, and nothing is written or queued (the page writes such an import in
    chunks while it checks the rest); the same export without it imports whole."""
    async with await make() as mem:
        await mem.store.outbox_activate(0)
        s = await mem.sessions.create()
        data = _chatgpt(26, 200)
        data[-1]["mapping"]["c25-150"]["message"]["author"]["role"] = "robot"
        e = await raises(errors.ImportFormatError, mem.import_sessions(json.dumps(data)))
        assert "conversations[25]" in str(e) and "c25-150" in str(e), str(e)
        assert [m.session_id for m in await mem.sessions.list(limit=None)] == [s.session_id]
        assert (await mem.store.outbox_counts())[0] == 1
        report = await mem.import_sessions(data[:-1])
        assert report.sessions_imported == 25 and report.messages_imported == 5000
        assert len(await mem.sessions.list(limit=None)) == 26
        last = await mem.messages.list(report.session_ids[-1], limit=None)
        assert [m.content for m in last][-1] == "conv 24 turn 199" and len(last) == 200
        assert (await mem.store.outbox_counts())[0] == 1 + 25 + 5000
        assert [h.message.content for h in await mem.search('"conv 24 turn 199"', limit=1)] == [
            "conv 24 turn 199"
        ]


@check
async def check_export_iter_streams_the_same_text(make: Make) -> None:
    """export_iter() chunks join to the canonical JSON of export() (same exportedAt)."""
    from chatmem.transfer import canonical_dumps

    async with await make(clock=lambda: 1_700_000_000_000) as mem:
        ids = await _sample(mem)
        await mem.messages.append_many(ids[2], [{"role": "user", "content": "y" * 50} for _ in range(120)])
        chunks = [c async for c in mem.export_iter(batch_size=7)]
        whole = await mem.export()
        assert "".join(chunks) == canonical_dumps(whole)
        assert len(whole["sessions"][2]["messages"]) == 120


# ---------------------------------------------------------------------------- query index through Memory


@check
async def check_write_then_search_and_sql(make: Make) -> None:
    """A write is visible to search and SQL as soon as the awaited write returns."""
    async with await make() as mem:
        s = await mem.sessions.create(title="pets", character_id="airi")
        await mem.messages.append(s.session_id, "user", "My cat Miso likes tuna")
        assert (await mem.search("tuna"))[0].message.text == "My cat Miso likes tuna"
        await mem.messages.append(s.session_id, "assistant", "Tuna is a treat for most cats")
        hits = await mem.search("tuna treats")
        assert [h.message.role for h in hits][:1] == ["assistant"], "more matching terms rank first"
        assert all(
            h.session_id == s.session_id and set(h.breakdown) >= {"keyword", "semantic", "recency"}
            for h in hits
        )
        await mem.sessions.update(s.session_id, title="animals")
        rows = await mem.sql("SELECT title, message_count FROM sessions WHERE session_id = ?", [s.session_id])
        assert rows == [{"title": "animals", "message_count": 2}]
        rows = await mem.sql("SELECT role, count(*) AS n FROM messages GROUP BY role ORDER BY role")
        assert rows == [{"role": "assistant", "n": 1}, {"role": "user", "n": 1}]
        await mem.sessions.delete(s.session_id)
        assert await mem.search("tuna") == []
        assert await mem.sql("SELECT count(*) AS n FROM messages") == [{"n": 0}]


@check
async def check_sql_is_read_only(make: Make) -> None:
    """mem.sql rejects writes and several statements with a clear error; the index is unharmed."""
    async with await make() as mem:
        s = await mem.sessions.create()
        await mem.messages.append(s.session_id, "user", "keep me")
        for bad in [
            "INSERT INTO messages (id) VALUES ('x')",
            "DROP TABLE messages",
            "ATTACH 'x.db'",
            "COPY messages TO 'x.csv'",
            "INSTALL fts",
            "LOAD fts",
            "SELECT 1; DROP TABLE messages",
            "DELETE FROM messages",
        ]:
            await raises(errors.ReadOnlySQLError, mem.sql(bad))
        rows = await mem.sql(
            "SELECT text FROM messages WHERE text = ?", ["keep me'; DROP TABLE messages; --"]
        )
        assert rows == []
        assert await mem.sql("SELECT text FROM messages") == [{"text": "keep me"}]


@check
async def check_rebuild_equals_incremental(make: Make) -> None:
    """After many kinds of writes, a rebuild from the store answers exactly as the incremental index."""
    async with await make(clock=TickClock()) as mem:
        ids = await _sample(mem)
        await mem.search("weather")  # hydrate: every later write goes the incremental path
        extra = await mem.sessions.create(title="notes 日本語", tags=["x"])
        await mem.messages.append_many(
            extra.session_id,
            [{"role": "user", "content": f"note {i} about the weather in Kyoto 京都"} for i in range(30)],
        )
        await mem.sessions.update(ids[0], title="renamed", archived=True)
        await mem.sessions.clear(ids[2])
        await mem.messages.add("implicit", "user", "a session made on the fly, weather permitting")
        await mem.sessions.delete_messages(
            extra.session_id, [m.id for m in await mem.messages.list(extra.session_id, limit=3)]
        )
        await mem.import_sessions(await mem.export([ids[1]]))
        queries = ["weather", "Kyoto", "京都", '"the weather"', "sunny"]

        async def answers() -> Any:
            out = []
            for q in queries:
                out.append([(h.message.id, round(h.score, 6)) for h in await mem.search(q, limit=20)])
            out.append(
                await mem.sql(
                    "SELECT session_id, title, archived, message_count, tags FROM sessions ORDER BY session_id"
                )
            )
            out.append(await mem.sql("SELECT id, seq, role, text, token_count FROM messages ORDER BY id"))
            return out

        incremental = await answers()
        await mem.rebuild_index()
        assert await answers() == incremental


# ---------------------------------------------------------------------------- context window, retention, chat turn

#: URLs of live test services, set by the harness (e.g. SERVICES["llm"] = "http://127.0.0.1:port/v1")
SERVICES: dict[str, str] = {}


async def llm_plan(*plan: str) -> None:
    """Tell the test model server what to do with the next requests (and clear its log)."""
    import json as _json

    from chatmem.runtime import default_transport

    await default_transport().request(
        "POST",
        SERVICES["llm"] + "/control",
        headers={"Content-Type": "application/json"},
        body=_json.dumps({"plan": list(plan)}).encode(),
    )


async def llm_requests() -> list[dict[str, Any]]:
    from chatmem.runtime import default_transport

    resp = await default_transport().request("POST", SERVICES["llm"] + "/requests", body=b"{}")
    return resp.json()  # type: ignore[no-any-return]


class SetClock:
    """A clock the check sets by hand."""

    def __init__(self, t: int = 1_700_000_000_000):
        self.t = t

    def __call__(self) -> int:
        return self.t


@check
async def check_build_context_order_and_guarantees(make: Make) -> None:
    """System, context ("Module X: {json}"), then recent messages; in budget; tool pairs whole; newest user kept."""
    from chatmem.context.providers import ContextMessage, ContextUpdateStrategy

    async with await make() as mem:
        s = await mem.sessions.create()
        call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        await mem.messages.append_many(
            s.session_id,
            [
                {"role": "user", "content": "old question " + "x" * 400},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": "tool says " + "y" * 200, "tool_call_id": "c1"},
                {"role": "assistant", "content": "old answer"},
                {"role": "user", "content": "newest question"},
            ],
        )
        mem.context.update(
            ContextMessage(
                "module:discord",
                "bot",
                {"activeChannel": "general", "recentMentions": 3},
                ContextUpdateStrategy.REPLACE_SELF,
            )
        )
        out = await mem.build_context(s.session_id, system_prompt="You are Airi.", max_tokens=4000)
        assert out[0] == {"role": "system", "content": "You are Airi."}
        assert out[1]["role"] == "user"
        assert (
            out[1]["content"][0]["text"]
            == 'Module module:discord: {"activeChannel":"general","recentMentions":3}'
        )
        assert [m["content"] for m in out[2:]][-1] == "newest question" and len(out) == 7
        win = await mem.build_window(s.session_id, system_prompt="You are Airi.", max_tokens=60)
        assert win.tokens <= 60 and win.messages[0]["role"] == "system"
        assert win.messages[-1]["content"] == "newest question"
        roles = [m["role"] for m in win.messages]
        assert ("tool" in roles) == any(m.get("tool_calls") for m in win.messages), "tool pair kept whole"
        for budget in (30, 45, 70, 150, 260, 1000):
            msgs = (
                await mem.build_window(
                    s.session_id, system_prompt="You are Airi.", max_tokens=budget + 8, reserve_tokens=8
                )
            ).messages
            assert sum(mem.tokenizer.count_message(m) for m in msgs) <= budget
        await raises(
            errors.ContextOverflow, mem.build_context(s.session_id, system_prompt="S" * 400, max_tokens=20)
        )
        assert len(await mem.build_context(s.session_id, system_prompt="hi", budget="local-4k")) >= 3


@check
async def check_session_retention_policy(make: Make) -> None:
    """apply(): archive idle, delete old archived, cap the count; pinned untouched; dry run writes nothing."""
    from chatmem.conversations.retention import DAY_MS, RetentionPolicy

    clock = SetClock()
    async with await make(clock=clock) as mem:
        t0 = clock.t
        ids = {}
        for name, age_days in [
            ("fresh", 1),
            ("idle", 40),
            ("ancient", 100),
            ("pinned", 200),
            ("old-archived", 120),
        ]:
            clock.t = t0 - age_days * DAY_MS
            ids[name] = (await mem.sessions.create(title=name)).session_id
        clock.t = t0
        await mem.sessions.update(ids["pinned"], pinned=True)
        await mem.sessions.archive(ids["old-archived"])
        policy = RetentionPolicy(
            max_sessions=10, max_age=90 * DAY_MS, archive_after=30 * DAY_MS, delete_archived=True
        )
        dry = await mem.retention.apply(policy, dry_run=True, now=t0)
        assert (
            dry.dry_run
            and sorted(dry.archived) == sorted([ids["idle"]])
            or set(dry.archived) <= {ids["idle"], ids["ancient"]}
        )
        assert len(await mem.sessions.list(limit=None)) == 4, "dry run changed nothing"
        report = await mem.retention.apply(policy, now=t0)
        assert set(report.deleted) == {ids["ancient"], ids["old-archived"]}
        assert report.archived == [ids["idle"]]
        assert [m.title for m in await mem.sessions.list(limit=None)] == ["pinned", "fresh"]
        assert [m.title for m in await mem.sessions.list(archived=True)] == ["idle"]
        capped = await mem.retention.apply(RetentionPolicy(max_sessions=1), now=t0)
        assert capped.archived == [ids["fresh"]] and (await mem.sessions.get(ids["pinned"])).archived is False
        gone = await mem.delete_old_sessions(older_than=30 * DAY_MS, now=t0)
        assert gone == [ids["idle"]]


@check
async def check_message_retention_summarizes_and_window_uses_it(make: Make) -> None:
    """apply_messages() stores one summary, archives the originals, and the window then sends the summary."""
    from chatmem.context.summaries import MessageRetentionPolicy

    async with await make() as mem:
        s = await mem.sessions.create(title="long chat")
        await mem.messages.append(s.session_id, "system", "You are kind.")
        await mem.messages.append_many(
            s.session_id,
            [
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"Turn {i}: we discussed topic number {i}. The garden needs water on day {i}.",
                }
                for i in range(80)
            ],
        )
        policy = MessageRetentionPolicy(max_messages_per_session=200, summary_threshold=50)
        plan = await mem.retention.apply_messages(s.session_id, policy)
        assert len(plan.summarize) == 30 and plan.action == "archive"
        msgs = await mem.messages.list(s.session_id, limit=None)
        summaries = [m for m in msgs if (m.metadata or {}).get("summary")]
        assert len(summaries) == 1 and summaries[0].content.startswith("Previous conversation summary: ")
        assert summaries[0].metadata["summaryOf"]["count"] == 30
        assert len(msgs) == 1 + 50 + 1
        archived = await mem.sessions.list(archived=True)
        assert (
            len(archived) == 1 and archived[0].parent_id == s.session_id and archived[0].message_count == 30
        )
        out = await mem.build_context(s.session_id, system_prompt="SYS", max_tokens=100_000)
        assert out[0]["content"] == "SYS"
        assert out[1]["role"] == "system" and out[1]["content"].startswith("Previous conversation summary: ")
        assert "Turn 79" in out[-1]["content"]
        again = await mem.retention.apply_messages(s.session_id, policy)
        assert not again, "nothing more to summarize"
        await mem.messages.append_many(
            s.session_id, [{"role": "user", "content": f"more {i}"} for i in range(20)]
        )
        inc = await mem.retention.apply_messages(s.session_id, policy)
        assert len(inc.summarize) == 20 and inc.previous_summary_id == summaries[0].id, "incremental fold"


@check
async def check_retrieval_in_the_window(make: Make) -> None:
    """A relevant older message outside the recent part is retrieved into the window."""
    from chatmem.index import RetrievalConfig

    async with await make() as mem:
        s = await mem.sessions.create()
        await mem.messages.append(
            s.session_id, "user", "My sister Paloma lives in Valparaíso and loves kites"
        )
        await mem.messages.append_many(
            s.session_id,
            [
                {"role": "user" if i % 2 == 0 else "assistant", "content": f"filler chatter number {i} " * 4}
                for i in range(60)
            ],
        )
        await mem.messages.append(s.session_id, "user", "Where does Paloma live?")
        recent_only = await mem.build_context(s.session_id, system_prompt="S", max_tokens=300)
        assert not any("Valparaíso" in str(m["content"]) for m in recent_only)
        cfg = RetrievalConfig(strategy="relevant", recent_count=3, relevance_threshold=0.0)
        out = await mem.build_context(s.session_id, system_prompt="S", max_tokens=300, retrieval=cfg)
        texts = [str(m["content"]) for m in out]
        assert any("Valparaíso" in t for t in texts[:-1]) and texts[-1] == "Where does Paloma live?"
        recent = await mem.build_context(
            s.session_id,
            system_prompt="S",
            max_tokens=10_000,
            retrieval=RetrievalConfig(strategy="recent", recent_count=4),
        )
        assert len(recent) == 1 + 4


@check
async def check_chat_turn(make: Make) -> None:
    """send(): user stored first, answer streamed to on_token, assistant stored with provider and model."""
    from chatmem.chat.providers import OpenAICompatibleProvider

    if "llm" not in SERVICES:
        raise AssertionError("the harness must start the test model server")
    async with await make() as mem:
        s = await mem.sessions.create()
        provider = OpenAICompatibleProvider(SERVICES["llm"], api_key="sk-test", model="test-model")
        await llm_plan("ok")
        tokens: list[str] = []
        reply = await mem.session(s.session_id).send(
            "hello there", provider=provider, on_token=tokens.append, system_prompt="Be brief."
        )
        assert "".join(tokens) == "echo: hello there" == reply.content and len(tokens) == 3
        assert (
            reply.role == "assistant"
            and reply.provider == "openai-compatible"
            and reply.model == "test-model"
        )
        msgs = await mem.messages.list(s.session_id)
        assert [(m.role, m.content) for m in msgs] == [
            ("user", "hello there"),
            ("assistant", "echo: hello there"),
        ]
        sent = (await llm_requests())[0]
        assert sent["auth"] == "Bearer sk-test" and sent["body"]["stream"] is True
        assert sent["body"]["messages"] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello there"},
        ]


@check
async def check_chat_turn_failures_keep_only_what_arrived(make: Make) -> None:
    """A 500, 401, 429, 404: the user message kept, no assistant message. An error mid-stream,
    a cut stream: what arrived is kept, marked incomplete. A cancel (Stop): what arrived is
    kept, marked stopped, and the cancellation goes on."""
    import asyncio as _asyncio

    from chatmem.chat.providers import OpenAICompatibleProvider

    async with await make() as mem:
        s = await mem.sessions.create()
        h = mem.session(s.session_id)
        provider = OpenAICompatibleProvider(SERVICES["llm"], model="m")
        cases = [
            ("500", errors.ProviderServerError),
            ("break", errors.ProviderServerError),
            ("cut", errors.ProviderServerError),
            ("401", errors.ProviderAuthError),
            ("429", errors.ProviderRateLimited),
            ("404", errors.ProviderNotFound),
        ]
        partial = []
        for i, (behaviour, exc) in enumerate(cases):
            await llm_plan(behaviour)
            got: list[str] = []
            e = await raises(exc, h.send(f"try {i}", provider=provider, on_token=got.append))
            assert "sk-" not in str(e)
            if behaviour in ("break", "cut"):
                assert e.partial is not None and e.partial.content == "".join(got) and got
                partial.append(e.partial.id)
            else:
                assert e.partial is None
        msgs = await mem.messages.list(s.session_id, limit=None)
        assert [m.role for m in msgs] == [
            "user",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "user",
            "user",
        ]
        assert [m.id for m in msgs if m.role == "assistant"] == partial
        assert all(m.metadata == {"status": "incomplete"} for m in msgs if m.role == "assistant")
        await llm_plan("slow")
        got = []
        task = _asyncio.ensure_future(h.send("long one", provider=provider, on_token=got.append))
        for _ in range(200):
            await _asyncio.sleep(0.02)
            if len(got) >= 2:
                break
        task.cancel()
        await raises(_asyncio.CancelledError, task)
        assert 2 <= len(got) < 40
        msgs = await mem.messages.list(s.session_id, limit=None)
        assert [m.content for m in msgs[-2:]] == ["long one", "".join(got)]
        assert msgs[-1].role == "assistant" and msgs[-1].metadata == {"status": "stopped"}


@check
async def check_offline_responder_answers_from_memory(make: Make) -> None:
    """With no model, the offline responder quotes earlier messages and says it is offline."""
    from chatmem.conversations.offline import OFFLINE_LABEL, OfflineResponder

    async with await make() as mem:
        old = await mem.sessions.create(title="Travel")
        await mem.messages.append(old.session_id, "user", "We loved the tiles in Lisbon last spring")
        s = await mem.sessions.create()
        reply = await mem.session(s.session_id).send("Tell me about Lisbon", provider=OfflineResponder(mem))
        assert reply.content.startswith(OFFLINE_LABEL) and "tiles in Lisbon" in reply.content
        assert reply.provider == "offline"
        nothing = await mem.session(s.session_id).send("zyxxy qwertz", provider=OfflineResponder(mem))
        assert OFFLINE_LABEL in nothing.content and "nothing" in nothing.content


@check
async def check_changing_the_embedder_re_embeds_in_the_background(make: Make) -> None:
    """set_embedder() embeds every message for the new model in a background task; semantic search uses it."""
    from chatmem.embedding import HashingEmbedder

    async with await make() as mem:
        s = await mem.sessions.create()
        await mem.messages.append_many(
            s.session_id,
            [
                {"role": "user", "content": t}
                for t in [
                    "the quick brown fox jumps",
                    "a lazy dog sleeps all day",
                    "quick brown foxes jumping high",
                ]
            ],
        )
        await mem.search("fox", mode="semantic")
        new = HashingEmbedder(dimensions=64)
        task = mem.set_embedder(new)
        assert await task == 3
        rows = await mem.sql("SELECT model, count(*) AS n FROM embeddings GROUP BY model ORDER BY model")
        assert {"model": new.model, "n": 3} in rows and len(
            rows
        ) >= 2  # the old vectors (and in-context ones) stay
        hits = await mem.search("quick brown fox", mode="semantic", limit=2)
        assert {h.message.text for h in hits} == {
            "the quick brown fox jumps",
            "quick brown foxes jumping high",
        }


# ---------------------------------------------------------------------------- facts


@check
async def check_facts_are_kept_corrected_read_back_and_forgotten(make: Make) -> None:
    """``mem.facts``: a fact added is stored with every field; listed by user, character
    (its own and everyone's), key and status; a correction is a new version that ends the
    old one, so ``history`` and ``at`` read what was true when; pinning changes a version
    in place; ``delete`` forgets every version. Bad input is a typed error and writes nothing."""
    async with await make(clock=TickClock()) as mem:
        home = await mem.facts.add("Lives in Lisbon", key="home", value="Lisbon")
        cat = await mem.facts.add(
            "Has a cat called Miso", key="pet", value="Miso", character_id="airi", pinned=True
        )
        tea = await mem.facts.add("Likes  green\ttea", key="likes", user_id="someone else", importance=0.3)
        assert (home.user_id, home.origin, home.status, home.valid_to, home.character_id) == (
            "local",
            "user",
            "active",
            None,
            None,
        )
        assert tea.text == "Likes green tea" and tea.value == "Likes green tea" and tea.importance == 0.3
        assert await mem.facts.get(cat.fact_id) == cat
        assert [f.fact_id for f in await mem.facts.list(user_id="local")] == [home.fact_id, cat.fact_id]
        assert [f.key for f in await mem.facts.list(character_id="coach")] == ["home", "likes"]
        assert [f.key for f in await mem.facts.list(character_id="airi", user_id="local")] == ["home", "pet"]
        assert [f.fact_id for f in await mem.facts.list(key="likes")] == [tea.fact_id]

        moved = await mem.facts.update(home.fact_id, text="Lives in Porto", value="Porto")
        old = await mem.facts.get(home.fact_id)
        assert moved.fact_id != home.fact_id and moved.status == "active" and moved.value == "Porto"
        assert (old.status, old.superseded_by, old.valid_to) == (
            "superseded",
            moved.fact_id,
            moved.valid_from,
        )
        for fid in (home.fact_id, moved.fact_id):
            assert [f.value for f in await mem.facts.history(fid)] == ["Lisbon", "Porto"]
        assert [f.value for f in await mem.facts.list(key="home")] == ["Porto"]
        assert [f.value for f in await mem.facts.list(key="home", status=None)] == ["Lisbon", "Porto"]
        assert [f.value for f in await mem.facts.list(key="home", at=home.valid_from)] == ["Lisbon"]
        assert [f.value for f in await mem.facts.list(key="home", at=moved.valid_from)] == ["Porto"]
        assert await mem.facts.list(key="home", at=home.valid_from - 1) == []

        unpinned = await mem.facts.update(cat.fact_id, pinned=False, importance=0.9)
        assert unpinned.fact_id == cat.fact_id and not unpinned.pinned and unpinned.importance == 0.9
        assert len(await mem.facts.history(cat.fact_id)) == 1

        before = await mem.store.list_facts()
        for bad in (
            mem.facts.add(""),
            mem.facts.add("   "),
            mem.facts.add("x" * 501),
            mem.facts.add("ok", key="Not A Key"),
            mem.facts.add("ok", key="x" * 65),
            mem.facts.add("ok", value=7),  # type: ignore[arg-type]
            mem.facts.add("ok", importance=2),
            mem.facts.add("ok", pinned="yes"),  # type: ignore[arg-type]
            mem.facts.add("ok", user_id=""),
            mem.facts.update(moved.fact_id, text=""),
            mem.facts.update(home.fact_id, value="Faro"),  # a superseded version
            mem.facts.list(status="gone"),
        ):
            await raises(errors.ValidationError, bad)
        await raises(errors.FactNotFound, mem.facts.get("no-such-fact"))
        await raises(errors.FactNotFound, mem.facts.update("no-such-fact", text="x"))
        await raises(errors.FactNotFound, mem.facts.delete("no-such-fact"))
        assert sorted(map(json.dumps, await mem.store.list_facts())) == sorted(map(json.dumps, before))

        assert await mem.facts.delete(moved.fact_id) == 2
        await raises(errors.FactNotFound, mem.facts.get(home.fact_id))
        assert [f.fact_id for f in await mem.facts.list(user_id="local", status=None)] == [cat.fact_id]
        from chatmem.facts import check_fact_record

        for rec in await mem.store.list_facts():
            assert check_fact_record(rec) == rec


@check
async def check_facts_travel_in_exports_and_old_exports_still_import(make: Make) -> None:
    """A whole export carries the facts (version 1.1.0); restoring it gives the same export
    back; a copy takes them under new ids, still linked, without sources; an export without
    facts stays version 1.0.0 and still imports; a bad fact names its path and writes nothing."""
    async with await make(clock=TickClock()) as src:
        ids = await _sample(src)
        plain = await src.export()
        assert plain["version"] == "1.0.0" and "facts" not in plain
        home = await src.facts.add("Lives in Lisbon", key="home", value="Lisbon")
        await src.facts.update(home.fact_id, text="Lives in Porto", value="Porto")
        data = await src.export()
        assert data["version"] == "1.1.0" and [f["value"] for f in data["facts"]] == ["Lisbon", "Porto"]
        streamed = json.loads("".join([c async for c in src.export_iter()]))
        assert dict(streamed, exportedAt=0) == dict(data, exportedAt=0)
        assert "facts" not in await src.export([ids[0]])
    async with await make() as dst:
        report = await dst.import_sessions(data, preserve_ids=True)
        assert report.facts_imported == 2
        again = await dst.export()
        assert dict(again, exportedAt=0) == dict(data, exportedAt=0)
    async with await make() as copy:
        report = await copy.import_sessions(json.dumps(data))
        (porto,) = await copy.facts.list(key="home")
        history = await copy.facts.history(porto.fact_id)
        assert report.facts_imported == 2 and [f.value for f in history] == ["Lisbon", "Porto"]
        assert porto.fact_id != data["facts"][1]["factId"] and porto.source_ids == ()
        assert (await copy.import_sessions(plain)).facts_imported == 0
    async with await make() as bad:
        broken = json.loads(json.dumps(data))
        broken["facts"][1]["key"] = "Not A Key"
        e = await raises(errors.ImportFormatError, bad.import_sessions(broken))
        assert "facts[1].key" in str(e), str(e)
        old = dict(broken, version="1.0.0")
        e = await raises(errors.ImportFormatError, bad.import_sessions(old))
        assert "facts" in str(e)
        assert await bad.sessions.list(limit=None) == [] and await bad.store.list_facts() == []


@check
async def check_deleting_messages_closes_the_gaps_in_order(make: Make) -> None:
    """Deleted messages leave no gap: the later ones move up, in their order, and the next
    append takes the next position."""
    async with await make() as mem:
        s = await mem.sessions.create(title="gaps")
        await mem.messages.append_many(s.session_id, [{"role": "user", "content": f"m{i}"} for i in range(8)])
        held = await mem.messages.list(s.session_id, limit=None)
        meta = await mem.sessions.delete_messages(s.session_id, [held[2].id, held[5].id, "not-here"])
        await mem.messages.append(s.session_id, "user", "after")
        after = await mem.messages.list(s.session_id, limit=None)
        assert [(m.seq, m.content) for m in after] == list(
            enumerate(["m0", "m1", "m3", "m4", "m6", "m7", "after"])
        ), after
        assert meta.message_count == 6 and (await mem.sessions.get(s.session_id)).message_count == 7
