"""W8: the sync server for many people — several instances over one PostgreSQL.

    python bench/server_load.py [--devices 200 --accounts 20 --ops 50 --instances 3]

``D`` simulated devices (full ``chatmem.Memory`` + ``mem.sync`` each, in this
process) in ``A`` accounts push ``N`` operations each, all at once, through
``I`` server processes (``uvicorn --factory chatmem.server:create_app``) over
one PostgreSQL, with 10% of pushes hit by injected faults (500, a 2 s delay,
a dropped connection; half of them after the push was applied). Then every
device pulls. Checked: each account's space applied exactly D/A × N operations,
every device of an account holds the same state as the server, and no device
holds a record of another account. Reported: acknowledged ops/s, pushes/s,
p50/p95 latency of a push request; the same workload on one SQLite server
process; and the live-change latency from a push on one instance to the
``/v1/stream`` event on a device connected to another, p50/p95.

Needs ``CHATMEM_TEST_PG`` (``python build.py bench`` starts a throwaway cluster).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import chatmem
from chatmem.http import HTTPResponse
from chatmem.runtime import UrllibTransport
from chatmem.server import add_account, issue_token, open_storage
from chatmem.sync import SyncConfig
from chatmem.sync.protocol import SyncClient

__all__ = ["run_w8"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


class TimedTransport(UrllibTransport):
    """Records the duration of every answered ``POST /v1/push`` (ms)."""

    def __init__(self, sink: list[float]):
        self.sink = sink

    async def request(self, method: str, url: str, **kw: Any) -> HTTPResponse:
        t0 = time.perf_counter()
        resp = await super().request(method, url, **kw)
        if url.endswith("/v1/push") and resp.status == 200:
            self.sink.append((time.perf_counter() - t0) * 1000)
        return resp


class Servers:
    """``n`` server processes over ``db`` with a random fault plan, stopped on exit."""

    def __init__(self, db: str, n: int, faults: str):
        env = dict(
            os.environ,
            CHATMEM_SYNC_DB=db,
            CHATMEM_SYNC_FAULTS=faults,
            CHATMEM_SYNC_LOG_LEVEL="warning",
            CHATMEM_SYNC_POOL_SIZE="8",
            CHATMEM_SYNC_OPS_PER_MINUTE="0",
        )
        self.ports = [_port() for _ in range(n)]
        self.procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "--factory",
                    "chatmem.server:create_app",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(p),
                    "--log-level",
                    "warning",
                    "--no-access-log",
                    "--timeout-graceful-shutdown",
                    "2",
                ],
                # stderr too: every injected `drop` makes uvicorn log an error line
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for p in self.ports
        ]

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    async def ready(self) -> None:
        t = UrllibTransport()
        for proc, url in zip(self.procs, self.urls):
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"W8: server {url} exited with {proc.returncode}")
                try:
                    if (await t.request("GET", url + "/v1/health", timeout=2)).status == 200:
                        break
                except Exception:  # noqa: BLE001 - not up yet
                    pass
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()


def _accounts(db: str, n_accounts: int, per: int) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """(account, token) for every device, and each account's space."""
    st = open_storage(db, pool_size=1)
    try:
        devices, spaces = [], {}
        for a in range(n_accounts):
            acct = add_account(st, f"acct{a:03d}")
            spaces[acct.name] = acct.space
            devices += [(acct.name, issue_token(st, acct.name, label=f"d{d}")[1]) for d in range(per)]
        return devices, spaces
    finally:
        st.close()


async def _snapshot(mem: chatmem.Memory) -> tuple[Any, ...]:
    out = []
    for rec in await mem.store.all_sessions():
        sid = rec["sessionId"]
        msgs = await mem.store.list_messages(sid, 0, None, False)
        out.append((sid, rec.get("title"), tuple(sorted((m["id"], m["content"]) for m in msgs))))
    return tuple(sorted(out))


async def _load(urls: list[str], devices: list[tuple[str, str]], ops: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(64))
    lat: list[float] = []
    mems: list[chatmem.Memory] = []
    own: dict[str, set[str]] = {}
    for i, (acct, token) in enumerate(devices):
        mem = await chatmem.open()
        mem.sync.transport = TimedTransport(lat)
        await mem.sync.configure(
            SyncConfig(
                enabled=True,
                endpoint=urls[i % len(urls)],
                api_key=token,
                batch_size=10,
                max_retries=100,
                backoff_base=50,
                backoff_max=1_000,
                timeout=10_000,
            )
        )
        s = await mem.sessions.create(title=f"{acct} device {i}")
        await mem.messages.append_many(
            s.session_id, [{"role": "user", "content": f"{acct} d{i} m{k}"} for k in range(ops - 1)]
        )
        own.setdefault(acct, set()).add(s.session_id)
        mems.append(mem)
    t0 = time.perf_counter()
    reports = await asyncio.gather(*(m.sync.push() for m in mems))
    push_s = time.perf_counter() - t0
    acked = sum(r.acknowledged for r in reports)
    left = sum(r.remaining + r.dead_lettered for r in reports)
    await asyncio.gather(*(m.sync.pull() for m in mems))
    snaps = [await _snapshot(m) for m in mems]
    by_acct: dict[str, set[tuple[Any, ...]]] = {}
    foreign = 0
    for (acct, _), snap in zip(devices, snaps):
        by_acct.setdefault(acct, set()).add(snap)
        foreign += sum(1 for sid, _, _ in snap if sid not in own[acct])
    for m in mems:
        await m.close()
    return {
        "acked": acked,
        "left": left,
        "push_s": push_s,
        "lat": lat,
        "foreign": foreign,
        "states_per_account": max(len(v) for v in by_acct.values()),
        "sessions_per_device": min(len(s) for s in snaps),
    }


def _server_counts(db: str, spaces: dict[str, str]) -> dict[str, int]:
    st = open_storage(db, pool_size=1)
    try:
        return {a: st.applied_op_count(sp) for a, sp in spaces.items()}  # type: ignore[attr-defined]
    finally:
        st.close()


def _workload(db: str, instances: int, devices: int, accounts: int, ops: int, seed: int) -> dict[str, Any]:
    per = devices // accounts
    devs, spaces = _accounts(db, accounts, per)
    srv = Servers(db, instances, f"random:0.1:{seed}")
    try:
        asyncio.run(srv.ready())
        out = asyncio.run(_load(srv.urls, devs, ops))
    finally:
        srv.stop()
    counts = _server_counts(db, spaces)
    out["exactly_once"] = all(c == per * ops for c in counts.values()) and out["acked"] == devices * ops
    out["converged"] = out["states_per_account"] == 1 and out["sessions_per_device"] == per
    return out


async def _live(urls: list[str], token: str, n: int) -> list[float]:
    """Push ``n`` single ops through urls[0]; time until the stream on urls[1] announces each."""
    cfg = SyncConfig(enabled=True, endpoint=urls[1], api_key=token)
    listener = SyncClient(cfg, device_id="listener")
    pusher = SyncClient(cfg.replace(endpoint=urls[0]), device_id="pusher")
    got: asyncio.Queue[tuple[int, float]] = asyncio.Queue()

    async def listen() -> None:
        async for c in listener.stream():
            got.put_nowait((int(c), time.perf_counter()))

    async def next_event(what: str) -> tuple[int, float]:
        try:
            return await asyncio.wait_for(got.get(), 60)
        except TimeoutError:
            raise SystemExit(
                f"W8 live: no stream event within 60 s ({what}); "
                f"listener {'ended: ' + repr(task.exception()) if task.done() else 'still open'}"
            ) from None

    task = asyncio.get_running_loop().create_task(listen())
    base, _ = await next_event("the stream's first cursor")
    out = []
    start = int(time.time() * 1000)  # the server refuses an HLC minutes ahead of its clock
    for k in range(n):
        op = {
            "op_id": f"live-{k}",
            "type": "create",
            "resource": "session",
            "id": f"live-s{k}",
            "data": {"title": f"t{k}"},
            "timestamp": start + k,
            "hlc": f"{start + k:013d}-0000-pusher",
            "attempts": 0,
        }
        t0 = time.perf_counter()
        resp = await pusher.push([op])
        want = int(resp.cursor or 0)
        while True:
            c, t = await next_event(f"push {k}, cursor {want}")
            if c >= want:
                break
        out.append((t - t0) * 1000)
        await asyncio.sleep(0.05)
    task.cancel()
    return out


def run_w8(cfg: dict[str, Any], log: Any) -> dict[str, Any]:
    """Both workloads and the live latency; raises SystemExit if a check fails."""
    import psycopg

    pg = os.environ.get("CHATMEM_TEST_PG")
    if not pg:
        raise SystemExit("W8 needs CHATMEM_TEST_PG (python build.py bench starts PostgreSQL)")
    name = f"w8_{os.getpid()}_{int(time.time())}"
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    db = pg.rsplit("/", 1)[0] + "/" + name
    d, a, n, inst, seed = (
        cfg["w8_devices"],
        cfg["w8_accounts"],
        cfg["w8_ops"],
        cfg["w8_instances"],
        cfg["seed"],
    )
    result: dict[str, Any] = {"devices": d, "accounts": a, "ops": n, "instances": inst}
    try:
        log(f"W8 {d} devices / {a} accounts x {n} ops, {inst} instances over PostgreSQL, 10% faults")
        result["postgres"] = _workload(db, inst, d, a, n, seed)
        with tempfile.TemporaryDirectory() as tmp:
            log("W8 the same on one SQLite server")
            result["sqlite"] = _workload(str(Path(tmp) / "w8.db"), 1, d, a, n, seed)
        log("W8 live-change latency across instances")
        st = open_storage(db, pool_size=1)
        add_account(st, "live")
        token = issue_token(st, "live")[1]
        st.close()
        srv = Servers(db, 2, "")
        try:
            asyncio.run(srv.ready())
            result["live_ms"] = asyncio.run(_live(srv.urls, token, cfg["w8_live"]))
        finally:
            srv.stop()
    finally:
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    for kind in ("postgres", "sqlite"):
        r = result[kind]
        if not (r["exactly_once"] and r["converged"] and r["foreign"] == 0 and r["left"] == 0):
            raise SystemExit(f"W8 {kind} failed its checks: { {k: v for k, v in r.items() if k != 'lat'} }")
        r["ops_per_s"] = r["acked"] / r["push_s"]
        r["pushes_per_s"] = len(r["lat"]) / r["push_s"]
        r["p50_ms"], r["p95_ms"] = statistics.median(r["lat"]), _pct(r["lat"], 0.95)
    live = result["live_ms"]
    result["live_p50_ms"], result["live_p95_ms"] = statistics.median(live), _pct(live, 0.95)
    return result


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, default=200)
    ap.add_argument("--accounts", type=int, default=20)
    ap.add_argument("--ops", type=int, default=50)
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--live", type=int, default=50)
    ap.add_argument("--seed", type=int, default=20261101)
    args = ap.parse_args()
    out = run_w8(
        {
            "w8_devices": args.devices,
            "w8_accounts": args.accounts,
            "w8_ops": args.ops,
            "w8_instances": args.instances,
            "w8_live": args.live,
            "seed": args.seed,
        },
        lambda m: print(m, flush=True),
    )
    for kind in ("postgres", "sqlite"):
        r = out[kind]
        print(
            f"{kind}: {r['acked']} ops in {r['push_s']:.1f} s = {r['ops_per_s']:.0f} ops/s, "
            f"{r['pushes_per_s']:.0f} pushes/s, push p50 {r['p50_ms']:.0f} ms p95 {r['p95_ms']:.0f} ms"
        )
    print(f"live: p50 {out['live_p50_ms']:.0f} ms p95 {out['live_p95_ms']:.0f} ms")
