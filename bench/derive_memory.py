"""Deriving the keyword index under a memory limit with no temporary directory, as
DuckDB-Wasm must (CPython's DuckDB, the same engine):

    python bench/derive_memory.py [--messages 100000] [--memory-limit 310MB]

``QueryIndex.rebuild`` of the benchmark's messages (``bench/page/scalegen.py``), twice,
each in a fresh process-local engine over a database file: **memory** (an in-memory
working database, what an index of at most ``live.IN_MEMORY_MAX`` messages does) and
**file** (straight into the file, what a larger store does), with the postings sorted
in parts and the messages left unsorted at the same share of the size as in the page
(``keywords.SORT_PART`` and ``SORT_MESSAGES_MAX`` scaled by messages ÷ 1,000,000). At a
tenth of 1,000,000 messages with a tenth of the page's 3.1 GB, the in-memory way fails
as the page did at 1,000,000; the file way finishes. One thread, like the page; the
first way's time includes warming the stems' memo, so only whether each finishes compares.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "py"), str(HERE / "page")]


def _messages(n: int, per: int = 100) -> tuple[list[dict[str, Any]], Any]:
    from scalegen import Words

    words = Words()
    sessions = [
        {
            "sessionId": f"s{i:06d}",
            "title": f"s{i}",
            "createdAt": 1_000 + i,
            "updatedAt": 1_000 + i,
            "messageCount": per,
        }
        for i in range((n + per - 1) // per)
    ]

    def messages() -> Any:
        for i in range(n):
            yield {
                "id": f"m{i:08d}",
                "sessionId": f"s{i // per:06d}",
                "seq": i % per,
                "role": "user",
                "content": words.text(),
                "createdAt": 10_000 + (i * 7919) % n,
                "tokenCount": 1,
            }

    return sessions, messages


async def derive(way: str, n: int, limit: str, folder: str) -> dict[str, Any]:
    from chatmem.index import DuckDBEngine, QueryIndex, keywords
    from chatmem.index.cache import IndexCache

    keywords.SORT_PART = max(1, int(12_000_000 * n / 1_000_000))
    keywords.SORT_MESSAGES_MAX = int(250_000 * n / 1_000_000)
    connect = DuckDBEngine._connect

    def limited(self: Any, path: str) -> Any:
        con = connect(self, path)
        con.execute(f"SET memory_limit='{limit}'")
        con.execute("SET temp_directory=''")
        con.execute("SET threads=1")
        return con

    DuckDBEngine._connect = limited  # type: ignore[method-assign]
    engine = DuckDBEngine(os.path.join(folder, f"{way}.duckdb"))
    try:
        cache = IndexCache(engine)
        await cache.attach_work()
        if way == "memory":
            await cache.to_memory(copy=False)
        index = QueryIndex(engine, compress=cache.compress)
        sessions, messages = _messages(n)
        t = time.perf_counter()
        try:
            await index.rebuild(sessions, messages())
            out: dict[str, Any] = {
                "ok": True,
                "s": round(time.perf_counter() - t, 1),
                "phases_ms": index.rebuild_ms,
            }
        except Exception as e:  # noqa: BLE001 - the out-of-memory error is the result
            out = {"ok": False, "s": round(time.perf_counter() - t, 1), "error": str(e).splitlines()[0][:200]}
        out["postings"] = (await engine.execute("SELECT count(*) AS n FROM postings"))[0]["n"]
        out["buffers_mb"] = round(
            (await engine.execute("SELECT sum(memory_usage_bytes) AS b FROM duckdb_memory()"))[0]["b"] / 1e6,
            1,
        )
        return out
    finally:
        DuckDBEngine._connect = connect  # type: ignore[method-assign]
        await engine.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--memory-limit", default="310MB")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="chatmem-derive-memory-") as folder:
        for way in ("memory", "file"):
            r = asyncio.run(derive(way, args.messages, args.memory_limit, folder))
            print(f"{way:>6}: {r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
