"""Where a keyword search's time goes in the page, on a kept browser profile. Not a test.

    python bench/search/profile_keyword.py fill --profile DIR [--messages 1000000] [--sessions 10000]
    python bench/search/profile_keyword.py profile --profile DIR [--dist DIR] [--cut N] [--term-cache N] [--json FILE]

``fill`` stores the search bench's messages (``bench_browser.FILL``: Zipf words,
30-150 a message) in ``DIR``'s IndexedDB, derives the index into its OPFS file
with a first search, and saves it: about 1.5 minutes for 100,000 messages and
18 for 1,000,000 on 2 cores. ``profile`` then
opens that profile (a cached index), asks one query, waits until the index keeps
its doc table (``QueryIndex.doc_lengths``) and the rarest terms' postings
(``QueryIndex.rare_postings``; the seconds each took are reported),
and times 118 queries of the bench's kind, each split into its parts: scored in
Python (``keyword_top``: its postings read and the winners' names, ``doc_meta``)
or by one statement (``execute``), and the IndexedDB records (``_fetch``).
Medians per range of postings the query touches. ``--cut`` overrides the
Python-scoring cut-off (``scoring.PY_POSTINGS`` and ``PY_POSTINGS_WORKER``);
``--dist`` serves another build (e.g. a previous commit's) for an A/B in turns.
``--term-cache`` lowers ``figures.TERM_CACHE`` below the vocabulary's size (the bench's
has 30,000 words; a real history's is larger): searches then run as they do when the
whole vocabulary is not kept.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_browser as bb  # noqa: E402
from tools import base as build_base  # noqa: E402
from tools import serving  # noqa: E402

PROFILE = """
import asyncio, builtins, importlib, json, statistics, time
S = importlib.import_module("chatmem.index.search")
scoring = importlib.import_module("chatmem.index.scoring")
mem = builtins._bench_mem
qi = mem.index.query_index
QS = json.loads(QUERIES)
rec = {}

def wrap(mod, name, key):
    f = getattr(mod, name)
    async def timed(*a, **k):
        t = time.perf_counter()
        try:
            return await f(*a, **k)
        finally:
            rec[key] = rec.get(key, 0) + (time.perf_counter() - t) * 1000
    setattr(mod, name, timed)
    return (mod, name, f)

t0 = time.perf_counter()
await mem.search(QS[0], limit=10)
waited = rare_waited = None
fig = qi._figures
for _ in range(2400):  # the doc table is read in the background after an answer,
    if waited is None and getattr(qi, "doc_lengths", None) is not None:
        waited = round(time.perf_counter() - t0, 2)
    # then (builds that keep them) the rarest terms' postings: the background read is over
    if waited is not None and (getattr(qi, "_vocabulary", None) is None or qi._vocabulary.done()):
        rare_waited = round(time.perf_counter() - t0, 2)
        break
    await asyncio.sleep(0.05)
rare = getattr(fig, "rare", {})
if CUT:
    scoring.PY_POSTINGS = scoring.PY_POSTINGS_WORKER = CUT
saved = [wrap(S, "keyword_top", "python"), wrap(S, "_fetch", "records"),
         wrap(scoring, "_read_postings", "postings"), wrap(scoring, "doc_meta", "names")]
execute = qi.execute
async def counted(*a, **k):
    t = time.perf_counter()
    try:
        return await execute(*a, **k)
    finally:
        rec["statement"] = rec.get("statement", 0) + (time.perf_counter() - t) * 1000
qi.execute = counted
rows = []
try:
    for q in QS[1:6]:
        await mem.search(q, limit=10)
    for q in QS[6:]:
        terms = await S._term_stats(qi, S.parse_query(q))
        need = scoring.postings_needed(S.parse_query(q), terms) if terms else 0
        rec.clear()
        t = time.perf_counter()
        await mem.search(q, limit=10)
        rows.append(dict(rec, total=(time.perf_counter() - t) * 1000, need=need))
finally:
    for mod, name, f in saved:
        setattr(mod, name, f)
    del qi.execute

def med(xs):
    return round(statistics.median(xs), 1) if xs else None

out = {"p50_ms": med([r["total"] for r in rows]), "queries": len(rows), "table_read_s": waited,
       "rare_read_s": rare_waited, "rare_terms": len(rare), "rare_postings": sum(len(d) for d, _ in rare.values()),
       "names_kept": getattr(getattr(qi, "doc_lengths", None), "names", None), "by_postings": {}}
for lo, hi in ((0, 1024), (1024, 4096), (4096, 16384), (16384, 10**12)):
    rs = [r for r in rows if lo < r["need"] <= hi]
    out["by_postings"][f"{lo}-{hi}"] = {"queries": len(rs), **{k: med([r.get(k, 0) for r in rs]) for k in (
        "total", "python", "postings", "names", "statement", "records")}}
out
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=("fill", "profile"))
    ap.add_argument("--profile", required=True, help="the browser profile to fill, then to reuse")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--dist", default=str(build_base.DIST))
    ap.add_argument("--cut", type=int, default=0, help="Python-scoring cut-off (0: the library's)")
    ap.add_argument(
        "--port",
        type=int,
        default=8781,
        help="the same for fill and profile: the stored data belongs to the origin",
    )
    ap.add_argument(
        "--term-cache",
        type=int,
        default=0,
        help="terms kept whole in Python at most (0: the library's ``figures.TERM_CACHE``); "
        "below the vocabulary's size it stands for a history with more distinct terms",
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    dist = Path(args.dist)
    srv = serving.make_server(dist, args.port)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    site = f"http://127.0.0.1:{srv.server_address[1]}/"
    bb._put_lib_pages(dist)
    consts = {"NAME": repr(bb.NAME), "MESSAGES": str(args.messages), "SESSIONS": str(args.sessions)}
    vocab_file = Path(args.profile) / "chatmem-vocabulary.json"

    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            args.profile, executable_path=build_base.CHROMIUM, args=build_base.CHROMIUM_ARGS
        )
        page = ctx.new_page()
        page.set_default_timeout(7_200_000)

        def py(src: str, **extra: str):
            head = "".join(f"{k} = {v}\n" for k, v in {**consts, **extra}.items())
            return page.evaluate("c => window.chatmem.runPython(c)", head + src)

        def boot() -> None:
            page.goto(site + "bench/lib.html")
            page.evaluate("window.chatmem.ready")

        # a reused profile may hold another build's files in its HTTP cache, which the server
        # (If-Modified-Since) would confirm when they are newer than the served ones: an A/B
        # in turns would time one build twice
        ctx.new_cdp_session(page).send("Network.clearBrowserCache")
        boot()
        # a reused profile may hold an older build's service worker and caches
        page.evaluate(
            "async () => { for (const r of await navigator.serviceWorker.getRegistrations())"
            " await r.unregister(); for (const k of await caches.keys()) await caches.delete(k); }"
        )
        boot()
        if args.step == "fill":
            filled = py(bb.FILL)
            vocab_file.write_text(json.dumps(filled["vocab"]))
            r = py(bb.FIRST_QUERY, FIRST="'hello'", SECOND="'world'", MORE="[]")
            py(bb.CLOSE)
            print(
                f"filled {filled['filled']} sessions in {filled['s']} s; index derived in "
                f"{r['first_query_ms'] / 1000:.1f} s ({r['messages']:,} messages)",
                flush=True,
            )
        else:
            vocab = json.loads(vocab_file.read_text())
            rng = random.Random(11)
            qs = [" ".join(rng.choice(vocab[50:]) for _ in range(rng.randint(1, 3))) for _ in range(125)]
            if args.term_cache:
                py(f"from chatmem.index import figures\nfigures.TERM_CACHE = {args.term_cache}\n1")
            r = py(bb.FIRST_QUERY, FIRST=repr(qs[0]), SECOND=repr(qs[1]), MORE="[]")
            out = py(PROFILE, QUERIES=repr(json.dumps(qs[2:])), CUT=str(args.cut))
            out["first_query_s"] = round((r["open_ms"] + r["first_query_ms"]) / 1000, 2)
            py(bb.CLOSE)
            print(json.dumps(out, indent=1), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(out, indent=1))
        ctx.close()
    srv.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
