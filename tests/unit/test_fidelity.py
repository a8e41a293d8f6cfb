"""Where users rely on the original: the session's system prompt, read-only windows,
dead letters as an error, per-format message overhead, the LFU cache, the active
session, and plain or async context providers."""

from __future__ import annotations

from pathlib import Path

import pytest

import chatmem
from chatmem.context.providers import ContextMessage, UserProfileProvider
from chatmem.context.summaries import MessageRetentionPolicy
from chatmem.context.tokens import MESSAGE_OVERHEAD, EstimateTokenizer
from chatmem.errors import SessionNotFound, ValidationError
from chatmem.stores.caches import LFUCache, LRUCache

LONG = "word " * 200  # ~250 tokens


async def seeded(mem: chatmem.Memory, turns: int = 30, system: str | None = "You are Airi.") -> str:
    s = await mem.sessions.create(title="t")
    items = [{"role": "system", "content": system}] if system else []
    for i in range(turns):
        items.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} {LONG}"})
    items.append({"role": "user", "content": "and now?"})
    await mem.messages.append_many(s.session_id, items)
    return s.session_id


async def test_stored_system_prompt_survives_a_full_budget():
    """The seq-0 system message is always sent first, even when the budget is full (pruneMessages keeps messages[0])."""

    async with await chatmem.open() as mem:
        sid = await seeded(mem)
        out = await mem.build_context(sid, max_tokens=700)
    assert out[0] == {"role": "system", "content": "You are Airi."}
    assert [m["role"] for m in out].count("system") == 1
    assert out[-1]["content"] == "and now?" and len(out) < 32


async def test_system_prompt_argument_overrides_the_stored_one():
    """system_prompt= replaces the stored prompt for the call: exactly one system message, first."""

    async with await chatmem.open() as mem:
        sid = await seeded(mem, turns=2)
        mem.modules.set("module:x", {"a": 1})
        out = await mem.build_context(sid, system_prompt="Be terse.", max_tokens=10_000)
    systems = [m for m in out if m["role"] == "system"]
    assert systems == [{"role": "system", "content": "Be terse."}] and out[0] is systems[0]
    assert "You are Airi." not in str(out)


async def test_build_context_never_writes_even_when_summarizing():
    """summarize= sends a computed summary in place of older messages; the store is untouched."""

    async with await chatmem.open() as mem:
        sid = await seeded(mem, turns=30)
        before = (await mem.export())["sessions"]
        policy = MessageRetentionPolicy(max_messages_per_session=10, summary_threshold=6)
        out = await mem.build_context(sid, max_tokens=100_000, summarize=policy)
        again = await mem.build_context(sid, max_tokens=100_000, summarize=policy)
        after = (await mem.export())["sessions"]
        sessions = await mem.sessions.list(archived=None, limit=None)
        n_sessions = len(sessions)
    assert before == after and n_sessions == 1
    assert out == again
    assert out[0]["content"] == "You are Airi."
    assert out[1]["role"] == "system" and out[1]["content"].startswith("Previous conversation summary: ")
    assert len(out) == 2 + 6 and out[-1]["content"] == "and now?"  # the newest 6 stay, 25 are summarized


async def test_retention_never_summarizes_the_system_prompt(tmp_path: Path):
    """Applying the message policy folds old turns, but seq 0 (the system prompt) stays first."""

    async with await chatmem.open(persist=str(tmp_path / "r.db")) as mem:
        sid = await seeded(mem, turns=12)
        pol = MessageRetentionPolicy(
            max_messages_per_session=4, summary_threshold=2, keep_system_messages=False
        )
        await mem.retention.apply_messages(sid, pol)
        msgs = await mem.messages.list(sid, limit=None)
        msgs = [(m.seq, m.role, m.text[:13]) for m in msgs]
    assert msgs[0] == (0, "system", "You are Airi.")


@pytest.mark.parametrize(("fmt", "overhead"), sorted(MESSAGE_OVERHEAD.items()))
async def test_message_overhead_follows_the_format(fmt: str, overhead: int):
    """The per-message overhead is the format's (documented table), and message_overhead= overrides it."""

    async with await chatmem.open() as mem:
        sid = await seeded(mem, turns=2, system=None)
        w = await mem.build_window(sid, max_tokens=10_000, format=fmt)
        w0 = await mem.build_window(sid, max_tokens=10_000, format=fmt, message_overhead=0)
    assert w.tokens - w0.tokens == overhead * len(w.messages)


async def test_explicit_tokenizer_overhead_wins_and_bad_format_is_refused():
    async with await chatmem.open(tokenizer=EstimateTokenizer(message_overhead=9)) as mem:
        sid = await seeded(mem, turns=2, system=None)
        w = await mem.build_window(sid, max_tokens=10_000, format="anthropic")
        w0 = await mem.build_window(sid, max_tokens=10_000, message_overhead=0)
        with pytest.raises(ValidationError):
            await mem.build_context(sid, max_tokens=100, format="gemini")
    assert w.tokens - w0.tokens == 9 * len(w.messages)


def test_lfu_evicts_the_least_used_and_lru_the_least_recent():
    """cache_strategy='lfu' keeps a hot entry that LRU would evict."""

    def exercise(cache: LRUCache[str, int]) -> set[str]:
        for k in "abc":
            cache.set(k, 1)
        for _ in range(3):
            cache.get("a")
        cache.get("b")
        cache.get("c")
        cache.set("d", 1)
        return {k for k in "abcd" if cache.get(k) is not None}

    assert exercise(LFUCache(3, 10_000, lambda: 0)) == {"a", "c", "d"}
    assert exercise(LRUCache(3, 10_000, lambda: 0)) == {"b", "c", "d"}


async def test_open_takes_a_cache_strategy():
    async with await chatmem.open(cache_strategy="lfu") as mem:
        kinds = {type(c) for c in mem.cache}
    with pytest.raises(ValidationError):
        await chatmem.open(cache_strategy="fifo")
    result = kinds
    assert result == {LFUCache}


async def test_active_session_is_persisted_per_profile(tmp_path: Path):
    """set_active survives a reopen; deleting the session clears it; unknown ids are refused."""
    db = str(tmp_path / "a.db")

    async with await chatmem.open(persist=db) as mem:
        assert await mem.sessions.active() is None
        a = await mem.sessions.create(title="a")
        await mem.sessions.set_active(a.session_id)
        with pytest.raises(SessionNotFound):
            await mem.sessions.set_active("nope")
    async with await chatmem.open(persist=db) as mem:
        first = await mem.sessions.active()
        await mem.sessions.delete(a.session_id)
        gone = await mem.sessions.active()
    async with await chatmem.open(persist=str(tmp_path / "other.db")) as other:
        elsewhere = await other.sessions.active()
    sid = a.session_id
    assert first == sid and gone is None and elsewhere is None


@pytest.mark.parametrize("kind", ["plain", "async"])
async def test_providers_accept_plain_or_async_callables(kind: str):
    """UserProfileProvider and register() take a plain or an async callable alike."""

    def plain_profile():
        return {"name": "Ada"}

    async def async_profile():
        return {"name": "Ada"}

    def plain_module():
        return ContextMessage("module:clock", "c", {"t": 1})

    async def async_module():
        return ContextMessage("module:clock", "c", {"t": 1})

    async with await chatmem.open() as mem:
        mem.context.register(UserProfileProvider(plain_profile if kind == "plain" else async_profile))
        mem.context.register(plain_module if kind == "plain" else async_module)
        failures = await mem.context.refresh()
        snap = mem.context.snapshot()
    assert failures == []
    assert snap["module:user-profile"] == {"name": "Ada"} and snap["module:clock"] == {"t": 1}


@pytest.mark.parametrize("then", ["replay", "discard"])
async def test_a_run_that_dead_letters_ends_in_error_until_replayed_or_discarded(then: str):
    """run() after a dead letter: state 'error', last_error names the reason, no fresh last_success;
    replay (and a successful run) or discard ends it."""
    import asyncio

    from chatmem.runtime import CPythonRuntime
    from chatmem.server import running_server
    from chatmem.sync import SyncConfig

    key = "k-fidelity-dead"

    async def no_wait(_s: float) -> None:
        await asyncio.sleep(0)

    with running_server(api_keys=[key]) as srv:
        mem = await chatmem.open(runtime=CPythonRuntime(sleep=no_wait))
        await mem.sync.configure(SyncConfig(enabled=True, endpoint=srv.url, api_key=key, timeout=2_000))
        s = await mem.sessions.create(title="ok")
        await mem.sync.run()
        ok = await mem.sync.status()
        srv.faults.fail(4, status=503)
        await mem.messages.append(s.session_id, "user", "doomed")
        after_run = await mem.sync.run()
        again = await mem.sync.status()
        if then == "replay":
            await mem.sync.replay("all")
            await mem.sync.run()
        else:
            await mem.sync.discard("all")
        end = await mem.sync.status()
        await mem.close()
    assert ok.state == "idle" and ok.last_success is not None
    for st in (after_run, again):
        assert st.state == "error" and st.dead_letters == 1
        assert "dead-lettered" in st.last_error and "HTTP 503" in st.last_error
        assert st.last_success == ok.last_success
    assert end.state == "idle" and end.dead_letters == 0 and end.last_error is None
