"""Where a ChatGPT import's time goes, export text to first hit, in one interpreter.

    python bench/import_speed.py [--messages 50000]          # CPython (memory store, duckdb)
    python bench/import_speed.py --page [--messages 50000]   # Pyodide in Chromium (dist/: IndexedDB, DuckDB-Wasm)

The export is W9's (``bench/page/scalegen.chatgpt_export``: 100 messages a conversation).
First ``mem.import_sessions(text)`` whole, into one empty store; then, into another, the
steps of an import checked whole before it is written, timed one by one: ``prepare_import``
(parsing, the ChatGPT tree walk, every record checked as a chatmem export's), the JSON of
the records (what the page's bridge sends), the store's one transaction, then the first
search that finds the export's marker word, with the index's phases (``open_ms``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(globals().get("__file__", ".")).resolve().parent  # exec'd without one in the page


async def measure(export: Any, marker: str, n: int = 50_000) -> dict[str, Any]:
    """The steps' seconds (and the first search's phases, ms), in this interpreter."""
    import chatmem
    from chatmem.transfer.adapters import prepare_import

    text = export(n)
    out: dict[str, Any] = {"messages": n, "python": sys.version.split()[0], "platform": sys.platform}
    whole = await chatmem.open(f"import-speed-{time.time_ns()}")
    try:  # the call as an app makes it (where the store allows, written while it is checked)
        await whole.search("warm", limit=1)
        t = time.perf_counter()
        await whole.import_sessions(text)
        out["import_sessions_s"] = round(time.perf_counter() - t, 2)
    finally:
        await whole.close()
    mem = await chatmem.open(f"import-speed-{time.time_ns()}")
    try:
        await mem.search("warm", limit=1)  # the (empty) index is up, as in W9
        core = mem._core
        t = time.perf_counter()
        _, todo = prepare_import(text, ids=core.ids, limits=core.limits)
        out["prepare_s"] = round(time.perf_counter() - t, 2)
        t = time.perf_counter()
        json.dumps(todo, separators=(",", ":"))
        out["records_json_s"] = round(time.perf_counter() - t, 2)
        t = time.perf_counter()
        await core.store.import_sessions(todo, replace=False, ops=await core.outbox.import_later(todo))
        out["store_s"] = round(time.perf_counter() - t, 2)
        for rec, msgs in todo:  # what import_sessions reports after its transaction
            core.invalidate(rec["sessionId"])
            core.changed("session-created", rec["sessionId"], rec)
            core.changed("messages-appended", rec["sessionId"], {"messages": msgs, "session": rec})
        t = time.perf_counter()
        hits = await mem.search(marker, limit=3)
        out["first_search_s"] = round(time.perf_counter() - t, 2)
        out["found"] = any(marker in (h.message.text or "") for h in hits)
        out["search_phases_ms"] = dict(getattr(mem.index, "open_ms", {}))
        return out
    finally:
        await mem.close()


def _page(n: int) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from in_page import run_in_page

    code = (
        "import sys, types\n"
        f"gen = types.ModuleType('scalegen'); exec({(HERE / 'page' / 'scalegen.py').read_text()!r}, gen.__dict__)\n"
        f"imp = types.ModuleType('import_speed'); exec({(HERE / 'import_speed.py').read_text()!r}, imp.__dict__)\n"
        f"await imp.measure(gen.chatgpt_export, gen.MARKER, {n})\n"
    )
    out: dict[str, Any] = run_in_page(code)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--page", action="store_true", help="in Pyodide in Chromium (the built dist/)")
    args = ap.parse_args()
    if args.page:
        out = _page(args.messages)
    else:
        sys.path.insert(0, str(HERE / "page"))
        sys.path.insert(0, str(HERE.parent / "py"))
        from scalegen import MARKER, chatgpt_export

        out = asyncio.run(measure(chatgpt_export, MARKER, args.messages))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
