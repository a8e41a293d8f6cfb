"""The Python side of the in-page benchmark (runs in the page's Pyodide).

chatmem is driven from Python, as an app would; so is PyScript's
``pyscript.storage``. Payloads come from the page's seeded generator
(``bench.payloadJson``), parsed before any timing starts. Every function
returns plain data (times in milliseconds) for run.py.
"""

from __future__ import annotations

import json
import time
from typing import Any

import js  # type: ignore[import-not-found]

import chatmem
from chatmem.context.window import fit_window
from chatmem.runtime import page as _browser

bench = js.window.bench
now = js.performance.now


def payload(seed: int, n: int) -> list[dict[str, Any]]:
    return json.loads(bench.payloadJson(seed, n))


def item(m: dict[str, Any]) -> dict[str, Any]:
    """A generated message as chatmem's append fields."""
    out: dict[str, Any] = {"role": m["role"], "content": m["content"]}
    if m.get("toolCalls"):
        out["tool_calls"] = m["toolCalls"]
    if m.get("toolCallId"):
        out["tool_call_id"] = m["toolCallId"]
    return out


async def drop(db: str) -> None:
    await _browser.drop_database(db)


async def _session(db: str, durability: str, seed: int, n: int) -> tuple[Any, str, list[dict[str, Any]]]:
    await drop(db)
    mem = await chatmem.open(db, durability=durability)
    s = await mem.sessions.create(title="bench")
    return mem, s.session_id, [item(m) for m in payload(seed, n)]


class _Profile:
    """Splits an append into: Python before/after the bridge, JSON at the bridge,
    and the JS call (FFI crossing + bridge JS + IndexedDB transaction)."""

    def __init__(self, mem: Any):
        self.db = mem.store._db
        self.handle = self.db._handle
        self.js = 0.0
        self.bridge = 0.0
        outer = self

        class Handle:
            async def call(self, method: str, args: str, *extra: Any) -> Any:
                t0 = now()
                try:
                    return await outer.handle.call(method, args, *extra)
                finally:
                    outer.js += now() - t0

            def __getattr__(self, name: str) -> Any:  # batchAppend: fed chunk by chunk, not split here
                return getattr(outer.handle, name)

        self.jsparts = bench.instrument(self.handle)
        self.db._handle = Handle()
        self._orig_call = self.db.call

        async def call(method: str, **args: Any) -> Any:
            t0 = now()
            try:
                return await self._orig_call(method, **args)
            finally:
                self.bridge += now() - t0

        self.db.call = call
        self._orig_batches = getattr(self.db, "append_batches", None)  # absent in older builds

        self.batched = 0.0

        async def append_batches(*args: Any) -> Any:  # building, JSON and the transaction, overlapped
            t0 = now()
            try:
                return await self._orig_batches(*args)
            finally:
                self.batched += now() - t0

        if self._orig_batches is not None:
            self.db.append_batches = append_batches

    def take(self) -> tuple[float, ...]:
        """(bridge, js, JSON.parse, method, JSON.stringify, batched) summed since the last take;
        batched: a batch fed in chunks, whose building, JSON and transaction overlap."""
        js_parts = json.loads(self.jsparts.take())
        sums = [sum(p[i] for p in js_parts) for i in range(3)]
        out = (self.bridge, self.js, *sums, self.batched)
        self.bridge = self.js = self.batched = 0.0
        return out

    def restore(self) -> None:
        self.db._handle = self.handle
        self.db.call = self._orig_call
        if self._orig_batches is not None:
            self.db.append_batches = self._orig_batches


async def w1(
    db: str,
    durability: str,
    seed: int,
    base: int,
    warmup: int,
    reps: int,
    blocking: bool = False,
    profile: bool = False,
) -> dict[str, Any]:
    mem, sid, items = await _session(db, durability, seed, base + warmup + reps)
    for i in range(0, base, 1000):
        await mem.messages.append_many(sid, items[i : min(base, i + 1000)])
    for m in items[base : base + warmup]:
        await mem.messages.append(
            sid, m["role"], m["content"], **{k: v for k, v in m.items() if k not in ("role", "content")}
        )
    prof = _Profile(mem) if profile else None
    times: list[float] = []
    parts: list[tuple[float, ...]] = []
    intervals: list[list[float]] = []
    if blocking:
        bench.hbStart()
    for m in items[base + warmup :]:
        fields = {k: v for k, v in m.items() if k not in ("role", "content")}
        t0 = now()
        await mem.messages.append(sid, m["role"], m["content"], **fields)
        t1 = now()
        times.append(t1 - t0)
        intervals.append([t0, t1])
        if prof:
            parts.append((t1 - t0, *prof.take()))
    block = json.loads(bench.hbStop(json.dumps(intervals))) if blocking else None
    if prof:
        prof.restore()
    await mem.close()
    await drop(db)
    return {"times": times, "block": block, "parts": parts}


async def w2(
    db: str, durability: str, seed: int, n: int, reps: int, keep: bool = False, profile: bool = False
) -> dict[str, Any]:
    await drop(db)
    mem = await chatmem.open(db, durability=durability)
    items = [item(m) for m in payload(seed, n)]
    prof = _Profile(mem) if profile else None
    times: list[float] = []
    parts: list[tuple[float, ...]] = []
    for _ in range(reps):
        s = await mem.sessions.create(title="bench")
        if prof:
            prof.take()
        t0 = now()
        for i in range(0, n, 10000):
            await mem.messages.append_many(s.session_id, items[i : i + 10000])
        t = now() - t0
        times.append(t)
        if prof:
            parts.append((t, *prof.take()))
    if prof:
        prof.restore()
    await mem.close()
    if not keep:
        await drop(db)
    return {"times": times, "parts": parts}


async def _window(mem: Any, sid: str, budget: int, page: int) -> Any:
    """Read the newest messages page by page until the budget is covered, then fit."""
    recs: list[dict[str, Any]] = []
    offset = 0
    tokens = 0
    while tokens <= budget:
        batch = await mem.store.list_messages(sid, offset, page, True)
        recs.extend(batch)
        tokens += sum(4 + r["tokenCount"] for r in batch)
        offset += len(batch)
        if len(batch) < page:
            break
    recs.reverse()
    return fit_window("You are a helpful companion.", None, None, None, recs, max_tokens=budget)


async def w3(
    db: str, durability: str, seed: int, n: int, budget: int, page: int, reps: int
) -> dict[str, Any]:
    mem, sid, items = await _session(db, durability, seed, n)
    for i in range(0, n, 10000):
        await mem.messages.append_many(sid, items[i : i + 10000])
    times: list[float] = []
    for _ in range(reps + 3):
        t0 = now()
        res = await _window(mem, sid, budget, page)
        times.append(now() - t0)
    times = times[3:]
    # the window alone over every stored record already in Python memory
    all_recs = await mem.store.list_messages(sid, 0, None, False)
    fit_only: list[float] = []
    for _ in range(reps + 3):
        t0 = time.perf_counter()
        full = fit_window("You are a helpful companion.", None, None, None, all_recs, max_tokens=budget)
        fit_only.append((time.perf_counter() - t0) * 1000)
    fit_only = fit_only[3:]
    await mem.close()
    await drop(db)
    return {
        "times": times,
        "fit_only": fit_only,
        "kept": len(res.kept_ids),
        "tokens": res.tokens,
        "kept_full": len(full.kept_ids),
        "same": res.kept_ids == full.kept_ids,
    }


async def w5(db: str, reps: int) -> dict[str, Any]:
    """Everything as one JSON document through the public API (until mem.export lands)."""
    mem = await chatmem.open(db)
    times: list[float] = []
    size = 0
    for _ in range(reps):
        t0 = now()
        out = []
        for s in await mem.sessions.list(limit=1_000_000, archived=None):
            msgs = [m.to_record() async for m in mem.messages.stream(s.session_id, batch_size=2000)]
            out.append({"session": s.to_record(), "messages": msgs})
        doc = json.dumps({"format": "bench-dump", "sessions": out}, ensure_ascii=False)
        times.append(now() - t0)
        size = len(doc)
    await mem.close()
    await drop(db)
    return {"times": times, "bytes": size}


async def first_query(db: str) -> dict[str, Any]:
    """Open the database and answer the first query (newest 50 messages of the newest session)."""
    t0 = now()
    mem = await chatmem.open(db)
    sessions = await mem.sessions.list(limit=1)
    t1 = now()
    msgs = await mem.messages.list(sessions[0].session_id, limit=50, newest_first=True)
    t2 = now()
    await mem.close()
    return {"open": t1 - t0, "query": t2 - t1, "total": t2 - t0, "n": len(msgs)}


# ---------------------------------------------------------------- pyscript.storage


async def _pyscript(db: str) -> Any:
    from pyscript import storage  # type: ignore[import-not-found]  # PyScript's own module

    await drop("IDBMap/@pyscript/" + db)
    return await storage(db)


async def ps_w1(
    db: str, seed: int, base: int, warmup: int, reps: int, blocking: bool = False
) -> dict[str, Any]:
    st = await _pyscript(db)
    msgs = payload(seed, base + warmup + reps)
    sid = "s-w1"
    for seq, m in enumerate(msgs[:base]):
        st[f"{sid}:{seq:08d}"] = dict(m, sessionId=sid, seq=seq)
    st[sid] = {"sessionId": sid, "nextSeq": base}
    await st.sync()
    seq = base
    times: list[float] = []
    intervals: list[list[float]] = []
    for i, m in enumerate(msgs[base:]):
        if i == warmup and blocking:
            bench.hbStart()
        t0 = now()
        st[f"{sid}:{seq:08d}"] = dict(m, sessionId=sid, seq=seq, createdAt=int(time.time() * 1000))
        seq += 1
        st[sid] = {"sessionId": sid, "nextSeq": seq}
        await st.sync()
        t1 = now()
        if i >= warmup:
            times.append(t1 - t0)
            intervals.append([t0, t1])
    block = json.loads(bench.hbStop(json.dumps(intervals))) if blocking else None
    await st._store.close()
    await drop("IDBMap/@pyscript/" + db)
    return {"times": times, "block": block}


async def ps_w2(db: str, seed: int, n: int, reps: int) -> dict[str, Any]:
    st = await _pyscript(db)
    msgs = payload(seed, n)
    times: list[float] = []
    for r in range(reps):
        sid = f"s-w2-{r}"
        t0 = now()
        for seq, m in enumerate(msgs):
            st[f"{sid}:{seq:08d}"] = dict(m, sessionId=sid, seq=seq)
        st[sid] = {"sessionId": sid, "nextSeq": n}
        await st.sync()
        times.append(now() - t0)
    await st._store.close()
    await drop("IDBMap/@pyscript/" + db)
    return {"times": times}


async def w7(db: str, url: str, n: int, seed: int, passphrase: str = "") -> dict[str, Any]:
    """W7 outbox drain: ``n`` queued operations pushed to a local sync server that
    fails ~10% of pushes with a 500 (injected by run.py); backoff kept short so the
    figure is the drain's own cost, not waiting. With ``passphrase`` the drain
    encrypts end to end; the one-time key setup (PBKDF2, key check) is timed apart."""
    await drop(db)
    mem = await chatmem.open(db)
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
    t = now()
    if passphrase:
        await mem.sync.pull()  # sets the space's key up: once per device, not per drain
    setup = now() - t
    s = await mem.sessions.create(title="drain")
    msgs = payload(seed, n - 1)
    await mem.messages.append_many(s.session_id, [item(m) for m in msgs])
    pending = (await mem.sync.status()).pending
    t = now()
    report = await mem.sync.push()
    ms = now() - t
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
