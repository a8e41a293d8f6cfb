"""CPython workloads: chatmem's memory and SQLite stores against LangChain's
InMemoryChatMessageHistory and SQLChatMessageHistory (W1 append, W2 bulk
import), and chatmem's window against ``trim_messages`` (W3), in one process
over the same seeded messages."""

from __future__ import annotations

import asyncio
import json
import math
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import payloads

import chatmem
from chatmem.context.tokens import EstimateTokenizer
from chatmem.context.window import fit_window

__all__ = ["run_all"]

SYSTEM_PROMPT = "You are a helpful companion."
ms = lambda t0: (time.perf_counter() - t0) * 1000  # noqa: E731


def _item(m: dict[str, Any], with_id: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m["role"], "content": m["content"]}
    if with_id:
        out["id"] = m["id"]
    if m.get("toolCalls"):
        out["tool_calls"] = m["toolCalls"]
    if m.get("toolCallId"):
        out["tool_call_id"] = m["toolCallId"]
    return out


def _lc_message(m: dict[str, Any]) -> Any:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    if m["role"] == "user":
        return HumanMessage(m["content"], id=m["id"])
    if m["role"] == "tool":
        return ToolMessage(m["content"], tool_call_id=m["toolCallId"], id=m["id"])
    calls = [
        {
            "name": c["function"]["name"],
            "args": json.loads(c["function"]["arguments"]),
            "id": c["id"],
            "type": "tool_call",
        }
        for c in m.get("toolCalls") or ()
    ]
    return AIMessage(m["content"], id=m["id"], tool_calls=calls)


# ---------------------------------------------------------------- chatmem


async def _chatmem_open(kind: str, tmp: Path, durability: str) -> Any:
    if kind == "sqlite":
        path = tmp / f"cm-{time.perf_counter_ns()}.db"
        return await chatmem.open(persist=str(path), durability=durability)
    return await chatmem.open()


async def _cm_w1(
    kind: str, tmp: Path, durability: str, seed: int, base: int, warmup: int, reps: int
) -> list[float]:
    mem = await _chatmem_open(kind, tmp, durability)
    s = await mem.sessions.create(title="bench")
    items = [_item(m) for m in payloads.messages(seed, base + warmup + reps)]
    for i in range(0, base, 1000):
        await mem.messages.append_many(s.session_id, items[i : min(base, i + 1000)])
    times = []
    for i, m in enumerate(items[base:]):
        fields = {k: v for k, v in m.items() if k not in ("role", "content")}
        t0 = time.perf_counter()
        await mem.messages.append(s.session_id, m["role"], m["content"], **fields)
        if i >= warmup:
            times.append(ms(t0))
    await mem.close()
    return times


async def _cm_w2(kind: str, tmp: Path, durability: str, seed: int, n: int, reps: int) -> list[float]:
    mem = await _chatmem_open(kind, tmp, durability)
    items = [_item(m) for m in payloads.messages(seed, n)]
    times = []
    for _ in range(reps):
        s = await mem.sessions.create(title="bench")
        t0 = time.perf_counter()
        for i in range(0, n, 10000):
            await mem.messages.append_many(s.session_id, items[i : i + 10000])
        times.append(ms(t0))
    await mem.close()
    return times


async def _cm_w3(kind: str, tmp: Path, seed: int, n: int, budget: int, reps: int) -> dict[str, Any]:
    mem = await _chatmem_open(kind, tmp, "relaxed")
    s = await mem.sessions.create(title="bench")
    items = [_item(m, with_id=True) for m in payloads.messages(seed, n)]
    for i in range(0, n, 10000):
        await mem.messages.append_many(s.session_id, items[i : i + 10000])
    times = []
    res = None
    for r in range(reps + 3):
        t0 = time.perf_counter()
        recs: list[dict[str, Any]] = []
        offset = tokens = 0
        while tokens <= budget:
            batch = await mem.store.list_messages(s.session_id, offset, 64, True)
            recs.extend(batch)
            tokens += sum(4 + b["tokenCount"] for b in batch)
            offset += len(batch)
            if len(batch) < 64:
                break
        recs.reverse()
        res = fit_window(SYSTEM_PROMPT, None, None, None, recs, max_tokens=budget)
        if r >= 3:
            times.append(ms(t0))
    all_recs = await mem.store.list_messages(s.session_id, 0, None, False)
    fit_only = []
    for r in range(reps + 3):
        t0 = time.perf_counter()
        full = fit_window(SYSTEM_PROMPT, None, None, None, all_recs, max_tokens=budget)
        if r >= 3:
            fit_only.append(ms(t0))
    await mem.close()
    assert res is not None
    return {
        "times": times,
        "fit_only": fit_only,
        "kept_ids": full.kept_ids,
        "tokens": full.tokens,
        "same_as_paged": res.kept_ids == full.kept_ids,
    }


# ---------------------------------------------------------------- LangChain


def _lc_history(kind: str, tmp: Path) -> Any:
    if kind == "sql":
        from langchain_community.chat_message_histories import SQLChatMessageHistory

        path = tmp / f"lc-{time.perf_counter_ns()}.db"
        return SQLChatMessageHistory(session_id="bench", connection=f"sqlite:///{path}")
    from langchain_core.chat_history import InMemoryChatMessageHistory

    return InMemoryChatMessageHistory()


def _lc_w1(kind: str, tmp: Path, seed: int, base: int, warmup: int, reps: int) -> list[float]:
    h = _lc_history(kind, tmp)
    msgs = [_lc_message(m) for m in payloads.messages(seed, base + warmup + reps)]
    for i in range(0, base, 1000):
        h.add_messages(msgs[i : min(base, i + 1000)])
    times = []
    for i, m in enumerate(msgs[base:]):
        t0 = time.perf_counter()
        h.add_message(m)
        if i >= warmup:
            times.append(ms(t0))
    return times


def _lc_w2(kind: str, tmp: Path, seed: int, n: int, reps: int) -> list[float]:
    msgs = [_lc_message(m) for m in payloads.messages(seed, n)]
    times = []
    for _ in range(reps):
        h = _lc_history(kind, tmp)
        t0 = time.perf_counter()
        h.add_messages(msgs)
        times.append(ms(t0))
    return times


def _token_counter(raw: list[dict[str, Any]]) -> Callable[[list[Any]], int]:
    """LangChain counter that charges each message exactly what chatmem's
    estimate charges it, so that differences in what is kept are policy only."""
    tk = EstimateTokenizer()
    cost = {m["id"]: tk.count_message(_item(m)) for m in raw}

    def count(messages: list[Any]) -> int:
        total = 0
        for m in messages:
            c = cost.get(m.id)
            total += c if c is not None else 4 + math.ceil(len(m.content) / 4)
        return total

    return count


def _lc_w3(kind: str, tmp: Path, seed: int, n: int, budget: int, reps: int) -> dict[str, Any]:
    from langchain_core.messages import SystemMessage, trim_messages

    raw = payloads.messages(seed, n)
    h = _lc_history(kind, tmp)
    h.add_messages([_lc_message(m) for m in raw])
    counter = _token_counter(raw)
    system = SystemMessage(SYSTEM_PROMPT, id="system")
    times = []
    kept: list[Any] = []
    for r in range(reps + 3):
        t0 = time.perf_counter()
        kept = trim_messages(
            [system, *h.messages],
            max_tokens=budget,
            token_counter=counter,
            strategy="last",
            include_system=True,
            start_on="human",
            allow_partial=False,
        )
        if r >= 3:
            times.append(ms(t0))
    return {"times": times, "kept_ids": [m.id for m in kept if m.id != "system"], "tokens": counter(kept)}


# ---------------------------------------------------------------- all


def _compare(cm: dict[str, Any], lc: dict[str, Any], raw: list[dict[str, Any]]) -> dict[str, Any]:
    a, b = cm["kept_ids"], lc["kept_ids"]
    pos = {m["id"]: i for i, m in enumerate(raw)}
    role = {m["id"]: m["role"] for m in raw}
    only_cm, only_lc = sorted(set(a) - set(b), key=pos.get), sorted(set(b) - set(a), key=pos.get)
    return {
        "chatmem_kept": len(a),
        "trim_kept": len(b),
        "common": len(set(a) & set(b)),
        "chatmem_tokens": cm["tokens"],
        "trim_tokens": lc["tokens"],
        "only_chatmem": [(pos[i], role[i]) for i in only_cm],
        "only_trim": [(pos[i], role[i]) for i in only_lc],
        "chatmem_first": (pos[a[0]], role[a[0]]) if a else None,
        "trim_first": (pos[b[0]], role[b[0]]) if b else None,
    }


def run_all(cfg: dict[str, Any], log: Callable[[str], None]) -> dict[str, Any]:
    """Every CPython workload; returns {key: times or details}."""
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    seed, dur = cfg["seed"], cfg["durability"]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="chatmem-bench-") as d:
        tmp = Path(d)
        for base, reps in cfg["w1_points"]:
            for kind in ("memory", "sqlite"):
                log(f"cpython W1 chatmem-{kind} @{base}")
                out[("W1", f"append @{base:,}", f"chatmem {kind}")] = asyncio.run(
                    _cm_w1(kind, tmp, dur, seed, base, cfg["w1_warmup"], reps)
                )
            for kind in ("memory", "sql"):
                log(f"cpython W1 langchain-{kind} @{base}")
                out[("W1", f"append @{base:,}", f"LangChain {kind}")] = _lc_w1(
                    kind, tmp, seed, base, cfg["w1_warmup"], reps
                )
        n, reps = cfg["w2_n"], cfg["w2_reps"]
        for kind in ("memory", "sqlite"):
            log(f"cpython W2 chatmem-{kind}")
            out[("W2", f"import {n:,}", f"chatmem {kind}")] = asyncio.run(
                _cm_w2(kind, tmp, dur, seed, n, reps)
            )[1:]
        for kind in ("memory", "sql"):
            log(f"cpython W2 langchain-{kind}")
            out[("W2", f"import {n:,}", f"LangChain {kind}")] = _lc_w2(kind, tmp, seed, n, reps)[1:]
        n3, budget, reps3 = cfg["w3_n"], cfg["w3_budget"], cfg["w3_reps"]
        raw = payloads.messages(seed, n3)
        details = {}
        for kind in ("memory", "sqlite"):
            log(f"cpython W3 chatmem-{kind}")
            r = asyncio.run(_cm_w3(kind, tmp, seed, n3, budget, reps3))
            out[("W3", f"window {n3:,} / {budget:,} tok", f"chatmem {kind} (store + fit)")] = r["times"]
            out[("W3", f"window {n3:,} / {budget:,} tok", f"chatmem fit_window only ({kind} records)")] = r[
                "fit_only"
            ]
            details[f"chatmem {kind}"] = r
        for kind in ("memory", "sql"):
            log(f"cpython W3 langchain-{kind}")
            r = _lc_w3(kind, tmp, seed, n3, budget, reps3)
            out[("W3", f"window {n3:,} / {budget:,} tok", f"LangChain {kind} (read + trim_messages)")] = r[
                "times"
            ]
            details[f"LangChain {kind}"] = r
        out["w3_compare"] = _compare(details["chatmem memory"], details["LangChain memory"], raw)
        out["w3_compare"]["chatmem_paged_equals_full"] = details["chatmem memory"]["same_as_paged"]
    return out


async def _cm_w7(tmp: Path, url: str, n: int, seed: int, passphrase: str = "") -> dict[str, Any]:
    """W7 on CPython: the same drain from a SQLite store (see benchpy.w7)."""
    import chatmem

    mem = await chatmem.open(persist=str(tmp / "w7.db"))
    # sync on first, so the writes below queue outbox operations (the drain measured)
    await mem.sync.configure(
        chatmem.SyncConfig(
            enabled=True,
            endpoint=url,
            api_key="bench",
            batch_size=100,
            max_retries=10,
            backoff_base=20,
            backoff_max=200,
            timeout=10_000,
            encryption=chatmem.Passphrase(passphrase) if passphrase else None,
        )
    )
    t = time.perf_counter()
    if passphrase:
        await mem.sync.pull()  # sets the space's key up: once per device, not per drain
    setup = (time.perf_counter() - t) * 1000
    s = await mem.sessions.create(title="drain")
    await mem.messages.append_many(s.session_id, [_item(m) for m in payloads.messages(seed, n - 1)])
    pending = (await mem.sync.status()).pending
    t = time.perf_counter()
    report = await mem.sync.push()
    ms = (time.perf_counter() - t) * 1000
    status = await mem.sync.status()
    await mem.close()
    return {
        "ms": ms,
        "ops": pending,
        "requests": report.requests,
        "acked": report.acknowledged,
        "left": status.pending,
        "dead": status.dead_letters,
        "setup_ms": setup,
        "state": status.state,
        "error": status.last_error,
    }


def w7(url: str, n: int, seed: int, reps: int, passphrase: str = "") -> list[dict[str, Any]]:
    """Runs on its own thread's event loop (the caller may hold Playwright's loop)."""
    import concurrent.futures

    out = []
    for i in range(reps):
        with tempfile.TemporaryDirectory() as d, concurrent.futures.ThreadPoolExecutor(1) as pool:
            out.append(pool.submit(asyncio.run, _cm_w7(Path(d), url, n, seed + i, passphrase)).result())
    return out
