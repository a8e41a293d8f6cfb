"""Deriving the keyword index from scratch: the rebuild against the previous way, in turns.

    python bench/derive_speed.py [--messages 20000] [--rounds 2]          # CPython, DuckDB
    python bench/derive_speed.py --page [--messages 20000] [--rounds 2]   # Pyodide + DuckDB-Wasm in Chromium

``QueryIndex.rebuild`` of the benchmark's messages (``bench/page/scalegen.py``) into a
fresh in-memory engine, two ways in turns in one process: **now** (``stream_messages``:
the fast ASCII words, term ids numbered in Python, integers counted in SQL, a chunk
tokenised while the engine loads the one before) and **previous** (the regex words, each
chunk tokenised to term strings, then loaded, the strings grouped and joined with
``terms`` in SQL, one chunk after the other). A first rebuild warms the stems' memo, so
both ways are timed without Snowball. Medians of the rounds, seconds, with the phases.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

HERE = Path(globals().get("__file__", ".")).resolve().parent  # exec'd without one in the page


async def measure(
    words_source: Any, open_engine: Callable[[], Awaitable[Any]], n: int = 20_000, rounds: int = 2
) -> dict[str, Any]:
    from chatmem.index import QueryIndex, keywords
    from chatmem.index import index as index_module
    from chatmem.text import tokenize

    gen = words_source()
    recs = [
        {
            "id": f"m{i:025d}",
            "sessionId": f"s{i // 100:025d}",
            "seq": i % 100,
            "role": ("user", "assistant")[i % 2],
            "createdAt": 1_700_000_000_000 + i,
            "content": gen.text(),
        }
        for i in range(n)
    ]
    sessions = [
        {"sessionId": f"s{s:025d}", "title": "t", "createdAt": 0, "updatedAt": 0, "messageCount": 100}
        for s in range((n + 99) // 100)
    ]
    fast_words, now_stream = tokenize._ascii_words, index_module.stream_messages

    def definition(text: str) -> list[str]:
        ws = tokenize._ASCII_WORD.findall(text.lower())
        return [w.replace(",", "") if "," in w else w.replace("'", "") if "'" in w else w for w in ws]

    async def previous_stream(
        engine: Any, messages: Any, figures: Any, *, chunk: int, ms: dict[str, float] | None = None
    ) -> None:
        part: list[dict[str, Any]] = []
        for rec in messages:
            part.append(dict(rec))
            if len(part) >= chunk:
                await keywords.load_messages(engine, part, figures, counts=False, ms=ms)
                part = []
        if part:
            await keywords.load_messages(engine, part, figures, counts=False, ms=ms)

    async def rebuild(way: str) -> tuple[float, dict[str, float]]:
        tokenize._ascii_words = fast_words if way == "now" else definition
        index_module.stream_messages = now_stream if way == "now" else previous_stream  # type: ignore[assignment]
        idx = QueryIndex(await open_engine())
        try:
            t = time.perf_counter()
            await idx.rebuild(sessions, iter(recs))
            return time.perf_counter() - t, idx.rebuild_ms
        finally:
            await idx.close()

    out: dict[str, Any] = {"messages": n, "rounds": rounds, "platform": sys.platform}
    times: dict[str, list[float]] = {"now": [], "previous": []}
    phases: dict[str, dict[str, float]] = {}
    try:
        out["warm-up (stems every word) s"] = round((await rebuild("now"))[0], 2)
        for _ in range(rounds):
            for way in ("previous", "now"):
                s, ms = await rebuild(way)
                times[way].append(s)
                phases[way] = ms
    finally:
        tokenize._ascii_words, index_module.stream_messages = fast_words, now_stream
    for way, xs in times.items():
        out[f"{way} s"] = round(statistics.median(xs), 2)
        out[f"{way} phases ms (last)"] = {k: round(v) for k, v in phases[way].items()}
    out["speed-up"] = round(out["previous s"] / out["now s"], 2)
    return out


def _page(n: int, rounds: int) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from in_page import run_in_page

    code = (
        "import types\n"
        "from chatmem.runtime.page.duckdb_wasm import DuckDBWasmEngine\n"
        f"gen = types.ModuleType('scalegen'); exec({(HERE / 'page' / 'scalegen.py').read_text()!r}, gen.__dict__)\n"
        f"ds = types.ModuleType('derive_speed'); exec({(HERE / 'derive_speed.py').read_text()!r}, ds.__dict__)\n"
        f"await ds.measure(gen.Words, DuckDBWasmEngine.open, {n}, {rounds})\n"
    )
    out: dict[str, Any] = run_in_page(code)
    return out


def main() -> int:
    import asyncio

    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--page", action="store_true", help="in Pyodide + DuckDB-Wasm in Chromium (the built dist/)"
    )
    args = ap.parse_args()
    if args.page:
        out = _page(args.messages, args.rounds)
    else:
        sys.path.insert(0, str(HERE / "page"))
        sys.path.insert(0, str(HERE.parent / "py"))
        from scalegen import Words

        from chatmem.index import DuckDBEngine

        async def engine() -> Any:
            return DuckDBEngine()

        out = asyncio.run(measure(Words, engine, args.messages, args.rounds))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
