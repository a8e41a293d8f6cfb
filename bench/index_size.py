"""The cached keyword index's file size against the UTF-8 size of the messages' text, on
CPython (not a test): the same DuckDB file format as the page's OPFS file, derived the same
way (``LiveIndex``: rebuilt in memory, then saved), from the messages bench/search's page
bench fills (30-150 words of a 30,000-word Zipf vocabulary, 100 per session, seed 7).

    .venv/bin/python bench/index_size.py [--messages 100000] [--storage default] [--catch-ups 2]

``--storage default`` opens the file at DuckDB's default storage version, as DuckDB-Wasm
does in the page (no ZSTD there); otherwise the file is ``DuckDBEngine``'s own.
``--catch-ups N`` then reopens it N times after a write made while no index was open (each
reopening copies the file into memory and saves it back), to show the saves do not grow it.
Prints one JSON line per state, with the file's blocks per table and its bytes per column
(``columns``, the largest first: each segment's share of its block, from
``pragma_storage_info``; a block's unused tail counts to its last segment) and what no
column holds (``other``: ART indexes, metadata, free blocks).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "py"))

import duckdb  # noqa: E402

import chatmem  # noqa: E402
from chatmem.index import DuckDBEngine  # noqa: E402
from chatmem.runtime.cpython import CPythonRuntime  # noqa: E402


class DefaultStorageEngine(DuckDBEngine):
    """``DuckDBEngine`` on a file of DuckDB's default storage version (as DuckDB-Wasm makes it)."""

    def _connect(self, path: str) -> object:
        return self._duckdb.connect(path)


class FileRuntime(CPythonRuntime):
    """chatmem on CPython with the query index cached in ``path``."""

    def __init__(self, path: str, default_storage: bool):
        super().__init__()
        self.path, self.default_storage = path, default_storage

    def index_cache(self, store: object) -> str | None:
        return self.path

    async def open_query_engine(self, cache: str | None = None) -> DuckDBEngine:
        assert cache
        return DefaultStorageEngine(cache) if self.default_storage else DuckDBEngine(cache)


def bench_messages(n: int) -> list[list[dict[str, str]]]:
    """bench/search/bench_browser.py's FILL: ``n`` messages, 100 per session."""
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab: set[str] = set()
    while len(vocab) < 30000:
        vocab.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 10))))
    words = sorted(vocab)
    rng.shuffle(words)
    cum, acc = [], 0.0
    for i in range(len(words)):
        acc += 1.0 / (i + 1)
        cum.append(acc)
    return [
        [
            {
                "role": ("user", "assistant")[i % 2],
                "content": " ".join(rng.choices(words, cum_weights=cum, k=rng.randint(30, 150))),
            }
            for i in range(100)
        ]
        for _ in range(n // 100)
    ]


def column_bytes(con: duckdb.DuckDBPyConnection, tables: list[str], block_size: int) -> dict[str, int]:
    """``{"table.column": bytes}`` of the file's persistent segments: a segment holds its
    block from its offset to the next segment's (or the block's end), plus whole
    additional blocks (e.g. the strings of a long FSST segment)."""
    segs: list[tuple[int, int, str]] = []
    extra: dict[str, int] = {}
    for t in tables:
        for col, block, offset, more in con.execute(
            f"SELECT column_name, block_id, block_offset, additional_block_ids FROM pragma_storage_info('{t}') "
            "WHERE persistent AND block_id >= 0"
        ).fetchall():
            name = f"{t}.{col}"
            segs.append((int(block), int(offset), name))
            extra[name] = extra.get(name, 0) + len(more or []) * block_size
    segs.sort()
    out = dict(extra)
    for i, (block, offset, name) in enumerate(segs):
        end = segs[i + 1][1] if i + 1 < len(segs) and segs[i + 1][0] == block else block_size
        out[name] = out.get(name, 0) + end - offset
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def file_facts(path: str) -> dict[str, object]:
    size = sum(os.path.getsize(f) for f in (path, path + ".wal") if os.path.exists(f))
    con = duckdb.connect(path, read_only=True)
    try:
        db = con.execute("PRAGMA database_size").fetchone()
        tag = con.execute(
            "SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = current_database()"
        ).fetchone()
        text = con.execute(
            "SELECT string_agg(DISTINCT compression, ',') FROM pragma_storage_info('messages') "
            "WHERE column_name = 'text' AND segment_type = 'VARCHAR'"
        ).fetchone()
        tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()]
        blocks = {
            t: con.execute(
                f"SELECT count(DISTINCT block_id) FROM pragma_storage_info('{t}') WHERE persistent"
            ).fetchone()[0]
            for t in tables
        }
        columns = column_bytes(con, tables, int(db[2]) if db else 262144)
        kinds = {
            f"{t}.{c}": k
            for t in tables
            for c, k in con.execute(
                f"SELECT column_name, string_agg(DISTINCT compression, ',') FROM pragma_storage_info('{t}') "
                "WHERE persistent AND block_id >= 0 GROUP BY ALL"
            ).fetchall()
        }
    finally:
        con.close()
    return {
        "file_bytes": size,
        "blocks": db[3] if db else None,
        "free_blocks": db[5] if db else None,
        "storage": tag[0] if tag else None,
        "text_compression": text[0] if text else None,
        "blocks_per_table": blocks,
        "columns": {k: [v, kinds.get(k)] for k, v in columns.items()},
        "other": size - sum(columns.values()),
    }


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--storage", choices=["engine", "default"], default="engine")
    ap.add_argument("--catch-ups", type=int, default=0)
    ap.add_argument("--file", default=None, help="the index file (a temporary one by default)")
    args = ap.parse_args()
    path = args.file or os.path.join(tempfile.mkdtemp(prefix="chatmem-size-"), "index.duckdb")
    for f in (path, path + ".wal"):
        if os.path.exists(f):
            os.remove(f)
    runtime = FileRuntime(path, args.storage == "default")
    store_path = path + ".store.db"  # SQLite, so that a second handle sees the same store
    sessions = bench_messages(args.messages)
    text_bytes = sum(len(m["content"].encode()) for s in sessions for m in s)
    mem = await chatmem.open("bench-size", persist=store_path, runtime=runtime)
    ids = []
    for i, msgs in enumerate(sessions):
        sess = await mem.sessions.create(title=f"session {i}")
        ids.append(sess.session_id)
        await mem.messages.append_many(sess.session_id, msgs)
    t = time.perf_counter()
    await mem.search("hello world", limit=10)  # derives the index, then saves it
    await mem.close()
    derive_s = time.perf_counter() - t

    def report(state: str) -> None:
        f = file_facts(path)
        print(
            json.dumps(
                {
                    "state": state,
                    "messages": args.messages,
                    "mode": args.storage,
                    "text_bytes": text_bytes,
                    "ratio": round(f["file_bytes"] / text_bytes, 3),  # type: ignore[operator]
                    **f,
                }
            ),
            flush=True,
        )

    report(f"derived and saved ({derive_s:.0f} s)")
    for k in range(args.catch_ups):
        other = await chatmem.open("bench-size", persist=store_path)  # no index opened
        await other.messages.append(ids[k % len(ids)], "user", f"catch-up marker {k}")
        await other.close()
        mem = await chatmem.open("bench-size", persist=store_path, runtime=runtime)
        await mem.search(f"marker {k}")
        await mem.close()
        report(f"after catch-up {k + 1}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
