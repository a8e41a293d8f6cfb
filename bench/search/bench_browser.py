"""Search and cold-start benchmark in Chromium (Pyodide + DuckDB-Wasm + IndexedDB). Not a test.

    python bench/search/bench_browser.py [--messages 100000] [--sessions 1000] [--queries 200]
                                         [--profile DIR] [--port 8790] [--dist dist]

Fills the IndexedDB database ``bench-search`` with messages of 30-150 words
drawn from a 30,000-word vocabulary with Zipf frequencies (skipped when a
reused ``--profile`` already holds them), then in one browser:

1. cold page load, no cached index: open memory, time the first query (it
   derives the whole index from IndexedDB);
2. keyword BM25 top-10 p50/p95 over the ``--queries`` queries not asked in 1
   (once the figures a search keeps in Python are read: ``QueryIndex.figures_read``)
   (a repeated query is cheaper: the index keeps what it read), against the
   original's linear substring scan in Python over the same messages held in
   memory (loaded only for that baseline, then dropped), and the ratio;
3. semantic top-10 (384-dim vectors for every message) and hybrid p50;
4. cold page load with the index cached in OPFS: time to the first query,
   unchanged, unchanged with DuckDB-Wasm started while Pyodide boots
   (``bench/lib-prestart.html``: ``duckdbPrestart``; the time from navigation to
   ``ready`` is shown beside, as that start shares the 2 cores with the boot), and
   with 10 sessions written to while no index was open;
5. a second and a third tab while the first holds the index: they ask the
   first tab's index (no copy of their own); time from their ``ready`` to
   their first query's answer, and that of a few more queries.

Between 3 and 4, the OPFS files of the saved index (no embeddings) are
measured against the UTF-8 size of the messages' text, and again at the end,
after the catch-up of 4 saved the file once more.

Every page is ``bench/lib.html`` (``--page lib``): Python and chatmem booted as
the app's page boots them, and nothing else. ``--page app`` uses the app's own
page instead, whose interface opens its own (empty) database and starts its own
DuckDB-Wasm beside the benchmark's right after ``ready``.

Query words are drawn uniformly from the vocabulary except its 50 most
frequent (stop-word-like) words; queries holding one of those 50 are timed
separately. Prints one table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools import base as build_base  # noqa: E402
from tools import serving  # noqa: E402
from tools.base import CHROMIUM  # noqa: E402
from tools.base import CHROMIUM_ARGS as ARGS  # noqa: E402

NAME = "bench-search"

FILL = """
import chatmem, random, time, builtins
rng = random.Random(7)
letters = "abcdefghijklmnopqrstuvwxyz"
vocab = set()
while len(vocab) < 30000:
    vocab.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 10))))
vocab = sorted(vocab)
rng.shuffle(vocab)
cum, acc = [], 0.0
for i in range(len(vocab)):
    acc += 1.0 / (i + 1)
    cum.append(acc)
mem = await chatmem.open(NAME)
have = len(await mem.sessions.list(limit=None))
t = time.time()
per = MESSAGES // SESSIONS
for s in range(have, SESSIONS):
    sess = await mem.sessions.create(title="session %d" % s)
    await mem.messages.append_many(sess.session_id, [
        {"role": ("user", "assistant")[i % 2], "content": " ".join(rng.choices(vocab, cum_weights=cum, k=rng.randint(30, 150)))}
        for i in range(per)])
await mem.close()
{"filled": SESSIONS - have, "s": round(time.time() - t, 1), "vocab": vocab}
"""

# a cold page: nothing of the index is open yet
FIRST_QUERY = """
import chatmem, time, builtins
from chatmem.embedding import HashingEmbedder
t0 = time.perf_counter()
mem = await chatmem.open(NAME, embedder=HashingEmbedder(384))
t1 = time.perf_counter()
await mem.index.ready()
tr = time.perf_counter()
hits = await mem.search(FIRST, limit=10)
t2 = time.perf_counter()
await mem.search(SECOND, limit=10)
t3 = time.perf_counter()
xs = []
for q in MORE:
    t = time.perf_counter()
    await mem.search(q, limit=10)
    xs.append((time.perf_counter() - t) * 1000)
builtins._bench_mem = mem
{"open_ms": round((t1 - t0) * 1000), "first_query_ms": round((t2 - t1) * 1000), "hits": len(hits),
 "second_query_ms": round((t3 - t2) * 1000), "ready_ms": round((tr - t1) * 1000),
 "next_p50_ms": round(sorted(xs)[len(xs) // 2], 1) if xs else None, "phases_ms": getattr(mem.index, "open_ms", None),
 "last_open": getattr(mem.index, "last_open", None), "role": getattr(mem.index, "role", None),
 "messages": (await mem.sql("SELECT count(*) AS n FROM messages"))[0]["n"]}
"""

GUEST_TIMINGS = """
import builtins, time, json
mem = builtins._bench_mem
xs = []
for q in json.loads(QUERIES):
    t = time.perf_counter()
    await mem.search(q, limit=10)
    xs.append((time.perf_counter() - t) * 1000)
{"p50": round(sorted(xs)[len(xs) // 2], 2)}
"""

TIMINGS = """
import builtins, time, json
mem = builtins._bench_mem
Q = json.loads(QUERIES)

def pct(xs, q):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 2)

async def timed(qs, **kw):
    out = []
    for q in qs:
        s = time.perf_counter()
        await mem.search(q, limit=10, **kw)
        out.append((time.perf_counter() - s) * 1000)
    return out

res = {}
for q in Q["typical"][:5]:
    await mem.search(q, limit=10)  # warm the statement cache
# what a search keeps in Python (vocabulary, doc table, rare terms' postings) is read in the
# background after the first answer: timed once it is there, the time it took reported
idx = await mem.index.ready()
t = time.perf_counter()
if hasattr(idx, "figures_read"):
    await idx.figures_read()
res["figures_wait_s"] = round(time.perf_counter() - t, 2)
# only queries not asked before: the index keeps the postings and docs it has read,
# so a repeated query is cheaper than a new one
kw = await timed(Q["typical"][Q["asked"]:])
res["keyword"] = (pct(kw, .5), pct(kw, .95))
kc = await timed(Q["common"])
res["keyword_common"] = (pct(kc, .5), pct(kc, .95))
kf = await timed(Q["typical"][:50], roles=["user"], date_range=(0, 4_102_444_800_000))
res["keyword_filtered"] = (pct(kf, .5), pct(kf, .95))

# the original's searchMessages: every message's text in Python memory, scanned per query
t = time.perf_counter()
texts = []
for meta in await mem.store.all_sessions():
    for m in await mem.store.list_messages(meta["sessionId"], 0, None, False):
        c = m["content"]
        texts.append(c if isinstance(c, str) else json.dumps(c))
res["baseline_load_s"] = round(time.perf_counter() - t, 1)
res["text_bytes"] = sum(len(x.encode()) for x in texts)
sc = []
for q in Q["typical"][:50]:
    s = time.perf_counter()
    ql = q.lower()
    found = [i for i, x in enumerate(texts) if ql in x.lower()]
    sc.append((time.perf_counter() - s) * 1000)
res["substring_scan"] = (pct(sc, .5), pct(sc, .95))
del texts
res["ratio_p50"] = round(res["substring_scan"][0] / res["keyword"][0], 1)
ss = await timed(Q["typical"][:50], mode="substring")
res["substring_mode_duckdb"] = (pct(ss, .5), pct(ss, .95))

# semantic: a 384-dim vector per message (random unit-ish vectors made in SQL; the query is embedded for real)
emb = mem.index.embedder
idx = await mem.index.ready()
t = time.perf_counter()
await idx.execute("DELETE FROM embeddings")
# stored as the index stores them: int8 with a scale (an approximate unit scale is enough
# here), beside the message's session, role and time and the model's key
from chatmem.index.embeddings import model_key
# each row also has its in-context vector (``cvec``), as the default model stores them
await idx.execute(
    "INSERT INTO embeddings (message_id, model, dim, vec, scale, cvec, cscale, session_id, role, created_at, "
    "model_key) SELECT id, ?, ?, "
    "list_transform(range(CAST(? AS BIGINT)), x -> CAST(floor(random() * 255) - 127 AS TINYINT)), "
    "CAST(1.0 / (73.3 * sqrt(?)) AS FLOAT), "
    "list_transform(range(CAST(? AS BIGINT)), x -> CAST(floor(random() * 255) - 127 AS TINYINT)), "
    f"CAST(1.0 / (73.3 * sqrt(?)) AS FLOAT), session_id, role, created_at, {model_key(emb.model)} FROM messages",
    [emb.model, emb.dimensions, emb.dimensions, emb.dimensions, emb.dimensions, emb.dimensions])
res["vectors_load_s"] = round(time.perf_counter() - t, 1)
# each query timed with the approximate index the page keeps (``index.nearest``) and with
# the exact scan of every vector (the baseline) in the same page, in turns, so that both
# meet the same load; the first approximate search reads the vectors (timed apart)
from chatmem.index import nearest as _nearest
_from = _nearest.NEAREST_FROM
t = time.perf_counter()
await mem.search(Q["typical"][0], mode="semantic", limit=10)
res["nearest_first_s"] = round(time.perf_counter() - t, 2)
se, hy, se2, hy2 = [], [], [], []
try:
    for i, q in enumerate(Q["typical"][:50]):
        for base in ((False, True) if i % 2 else (True, False)):
            _nearest.NEAREST_FROM = 1 << 62 if base else _from
            (se2 if base else se).extend(await timed([q], mode="semantic"))
            (hy2 if base else hy).extend(await timed([q], mode="hybrid"))
finally:
    _nearest.NEAREST_FROM = _from
res["semantic"] = (pct(se, .5), pct(se, .95))
res["hybrid"] = (pct(hy, .5), pct(hy, .95))
res["semantic_exact"] = (pct(se2, .5), pct(se2, .95))
res["hybrid_exact"] = (pct(hy2, .5), pct(hy2, .95))
await idx.execute("DELETE FROM embeddings")  # keep the cached file the size of a keyword-only index
await mem.close()
res["samples"] = {"keyword": kw, "keyword_common": kc, "keyword_filtered": kf, "substring_scan": sc,
                  "substring_mode": ss, "semantic": se, "hybrid": hy,
                  "semantic_exact": se2, "hybrid_exact": hy2}
res
"""

CHANGE_THEN_QUERY = """
import chatmem, time, builtins
t0 = time.perf_counter()
mem = await chatmem.open(NAME)
metas = await mem.sessions.list(limit=10)
for m in metas:  # written while no index is open: the cached index must catch up
    await mem.messages.append(m.session_id, "user", "catchup marker " + FIRST)
t1 = time.perf_counter()
hits = await mem.search("catchup marker", limit=20)
t2 = time.perf_counter()
builtins._bench_mem = mem
{"first_query_ms": round((t2 - t1) * 1000), "hits": len(hits), "last_open": getattr(mem.index, "last_open", None),
 "notice": mem.index.notice, "phases_ms": getattr(mem.index, "open_ms", None)}
"""

CLOSE = """
import builtins
await builtins._bench_mem.close()
True
"""

REMOVE_CACHE = """
from chatmem.runtime import page as _browser
removed = []
if hasattr(_browser, "opfs_remove"):
    removed.append(await _browser.opfs_remove("chatmem-index-" + NAME + ".duckdb"))
removed
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=1_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--profile", default=None, help="browser profile to (re)use; a fresh one by default")
    ap.add_argument("--port", type=int, default=8790)
    ap.add_argument("--dist", default=str(build_base.DIST))
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    ap.add_argument(
        "--first-only",
        action="store_true",
        help="only the first queries: no cached index, then cached (unchanged, then 10 sessions "
        "changed); no query timings, no other tabs (to iterate on start-up)",
    )
    ap.add_argument(
        "--page",
        choices=("lib", "app"),
        default="lib",
        help="lib: a page with Python and chatmem only (bench/lib.html); app: the app's page, "
        "whose interface starts on its own database beside the benchmark",
    )
    ap.add_argument(
        "--no-cache-phases",
        action="store_true",
        help="stop after the query timings (for a build without the cached index)",
    )
    args = ap.parse_args()
    import random

    from playwright.sync_api import sync_playwright

    srv = serving.make_server(Path(args.dist), args.port)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    site = f"http://127.0.0.1:{srv.server_address[1]}/"  # --port 0: any free port
    url = site + "bench/lib.html" if args.page == "lib" else site
    _put_lib_pages(Path(args.dist))
    profile = args.profile or tempfile.mkdtemp(prefix="chatmem-bench-")
    consts = {"NAME": repr(NAME), "MESSAGES": str(args.messages), "SESSIONS": str(args.sessions)}

    def code(src: str, **extra: str) -> str:
        head = "".join(f"{k} = {v}\n" for k, v in {**consts, **extra}.items())
        return head + src

    rows: list[tuple[str, str]] = []
    metrics: dict[str, object] = {
        "messages": args.messages,
        "sessions": args.sessions,
        "queries": args.queries,
    }

    def row(label: str, value: str) -> None:
        rows.append((label, value))
        print(f"  {label}: {value}", flush=True)

    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=ARGS)
        page = ctx.new_page()
        page.set_default_timeout(3_600_000)

        def changed_sessions() -> None:
            """A reload after 10 sessions changed elsewhere: the cached index catches up."""
            boot(page)
            r = py(page, CHANGE_THEN_QUERY, FIRST=first)
            print(r, flush=True)
            row(
                "time to first query, cached index, 10 sessions changed, s",
                f"{r['first_query_ms'] / 1000:.2f}",
            )

        def finish_early() -> int:
            ctx.close()
            srv.shutdown()
            _table(args, rows)
            _write_json(args, metrics)
            return 0

        def boot(p, prestart: bool = False) -> float:
            """Load (or reload) the page until ``ready``; the seconds from navigation start."""
            target = site + "bench/lib-prestart.html" if prestart else url
            p.reload() if p.url == target else p.goto(target)
            return p.evaluate("window.chatmem.ready.then(() => performance.now())") / 1000

        def py(p, src: str, **extra: str):
            return p.evaluate("c => window.chatmem.runPython(c)", code(src, **extra))

        # a reused profile may hold another build's files in its HTTP cache, which the server
        # (If-Modified-Since) would confirm when they are newer than the served ones
        ctx.new_cdp_session(page).send("Network.clearBrowserCache")
        boot(page)
        # a reused profile may hold the service worker of an older build (it would serve its files)
        if page.evaluate(
            "async () => { const rs = await navigator.serviceWorker.getRegistrations();"
            " for (const r of rs) await r.unregister(); return rs.length; }"
        ):
            boot(page)
        fill = py(page, FILL)
        print(f"filled {fill['filled']} sessions in {fill['s']} s", flush=True)
        vocab = fill["vocab"]
        rng = random.Random(11)
        typical = [
            " ".join(rng.choice(vocab[50:]) for _ in range(rng.randint(1, 3))) for _ in range(args.queries)
        ]
        common = [
            " ".join([rng.choice(vocab[:50])] + [rng.choice(vocab[50:]) for _ in range(rng.randint(0, 2))])
            for _ in range(max(20, args.queries // 4))
        ]
        guests = [" ".join(rng.choice(vocab[50:]) for _ in range(rng.randint(1, 3))) for _ in range(40)]
        first, second = repr(typical[0]), repr(typical[1])
        asked = 22  # the first-query step asks typical[:asked]
        consts["MORE"] = repr(typical[2:asked])

        # 1. cold load, nothing cached
        py(page, REMOVE_CACHE)
        b = boot(page)
        r = py(page, FIRST_QUERY, FIRST=first, SECOND=second)
        print(r, flush=True)
        metrics.update(boot_s=b, first_query_uncached_s=(r["open_ms"] + r["first_query_ms"]) / 1000)
        row("page boot (Pyodide + chatmem), s", f"{b:.1f}")
        row(
            f"time to first query, no cached index ({r['messages']:,} messages), s",
            f"{(r['open_ms'] + r['first_query_ms']) / 1000:.1f}",
        )

        if args.first_only:
            py(page, CLOSE)  # saves the index file
            # in turns, as the machine's load drifts
            for label in (
                "unchanged",
                "unchanged, prestarted",
                "unchanged again",
                "unchanged again, prestarted",
            ):
                b = boot(page, prestart=label.endswith("prestarted"))
                r = py(page, FIRST_QUERY, FIRST=first, SECOND=second)
                print(r, flush=True)
                metrics[f"first_query_cached_s ({label})"] = (r["open_ms"] + r["first_query_ms"]) / 1000
                row(
                    f"time to first query, cached index, {label}, s",
                    f"{(r['open_ms'] + r['first_query_ms']) / 1000:.2f} (+ {b:.1f} page boot; "
                    f"second query {r['second_query_ms']} ms)",
                )
                py(page, CLOSE)
            changed_sessions()
            py(page, CLOSE)
            return finish_early()

        # 2-3. query timings
        t = py(
            page, TIMINGS, QUERIES=repr(json.dumps({"typical": typical, "common": common, "asked": asked}))
        )
        print(t, flush=True)
        metrics["timings"] = t
        row("keyword BM25 top-10 p50 / p95, ms", f"{t['keyword'][0]} / {t['keyword'][1]}")
        row("  timed once the figures kept in Python were read (waited, s)", f"{t['figures_wait_s']}")
        row(
            "  queries with a top-50 word, p50 / p95, ms",
            f"{t['keyword_common'][0]} / {t['keyword_common'][1]}",
        )
        row(
            "  with role + date filters, p50 / p95, ms",
            f"{t['keyword_filtered'][0]} / {t['keyword_filtered'][1]}",
        )
        row(
            "original substring scan in Python (in memory) p50 / p95, ms",
            f"{t['substring_scan'][0]} / {t['substring_scan'][1]}",
        )
        row("BM25 speed-up over the scan at p50", f"{t['ratio_p50']}x")
        row(
            "substring mode in DuckDB p50 / p95, ms",
            f"{t['substring_mode_duckdb'][0]} / {t['substring_mode_duckdb'][1]}",
        )
        row(
            "semantic top-10, 384-dim, approximate index, p50 / p95, ms",
            f"{t['semantic'][0]} / {t['semantic'][1]}",
        )
        row("hybrid top-10 p50 / p95, ms", f"{t['hybrid'][0]} / {t['hybrid'][1]}")
        row(
            "first semantic search (reads the vectors for the approximate index), s",
            f"{t.get('nearest_first_s')}",
        )
        if "semantic_exact" in t:
            row(
                "semantic / hybrid p50 with every vector scanned (baseline), ms",
                f"{t['semantic_exact'][0]} / {t['hybrid_exact'][0]}",
            )

        if args.no_cache_phases:
            py(page, CLOSE)
            return finish_early()

        # the saved index (closed above) against the text it indexes
        files = opfs_files(page)
        metrics["opfs_files"] = files
        metrics["text_bytes"] = t["text_bytes"]
        # the profile holds this one store: every OPFS file is its index (whatever the files are called)
        metrics["index_bytes"] = sum(v for v in files.values() if isinstance(v, int))
        row(
            "keyword index files in OPFS (no embeddings) / UTF-8 text, MB",
            f"{metrics['index_bytes'] / 1e6:.1f} / {t['text_bytes'] / 1e6:.1f} "
            f"= {metrics['index_bytes'] / max(1, t['text_bytes']):.2f}x",
        )

        # 4. cold load with the cached index
        b = boot(page)
        r = py(page, FIRST_QUERY, FIRST=first, SECOND=second)
        print(r, flush=True)
        metrics.update(first_query_cached_s=(r["open_ms"] + r["first_query_ms"]) / 1000, cached_boot_s=b)
        row(
            "time to first query, cached index, unchanged store, s",
            f"{(r['open_ms'] + r['first_query_ms']) / 1000:.2f} (+ {b:.1f} page boot)",
        )
        py(page, CLOSE)
        # 4b. the same with DuckDB-Wasm started while Pyodide boots (duckdbPrestart)
        b = boot(page, prestart=True)
        r = py(page, FIRST_QUERY, FIRST=first, SECOND=second)
        print(r, flush=True)
        metrics.update(
            first_query_cached_prestart_s=(r["open_ms"] + r["first_query_ms"]) / 1000,
            cached_prestart_boot_s=b,
        )
        row(
            "  the same, DuckDB-Wasm prestarted while Pyodide boots, s",
            f"{(r['open_ms'] + r['first_query_ms']) / 1000:.2f} (+ {b:.1f} page boot)",
        )
        py(page, CLOSE)
        changed_sessions()

        # 5. a second and a third tab while this one (still open from 4) holds the index: they ask it
        others = []
        for n, label in enumerate(("second", "third")):
            other = ctx.new_page()
            other.set_default_timeout(3_600_000)
            boot(other)
            r = py(other, FIRST_QUERY, FIRST=first, SECOND=second)
            print(r, flush=True)
            t = py(other, GUEST_TIMINGS, QUERIES=repr(json.dumps(guests[20 * n : 20 * n + 20])))
            lo = r.get("last_open") or (
                {"mode": "shared", "persistent": True} if r.get("role") == "guest" else {}
            )
            metrics[f"{label}_tab_s"] = (r["open_ms"] + r["first_query_ms"]) / 1000
            metrics[f"{label}_tab_open"] = lo
            metrics[f"{label}_tab_role"] = r.get("role")
            metrics[f"{label}_tab_keyword_p50_ms"] = t["p50"]
            row(
                f"{label} tab (the first one open): first query after ready, s",
                f"{metrics[f'{label}_tab_s']:.2f} (role {r.get('role')}, {lo.get('mode')} index, "
                f"keyword p50 {t['p50']} ms)",
            )
            others.append(other)
        for other in others:
            py(other, CLOSE)
        py(page, CLOSE)
        # the file again after the catch-up of step 4 saved it (a save rewrites the whole index)
        after = sum(v for v in opfs_files(page).values() if isinstance(v, int))
        metrics["index_bytes_after_catch_up"] = after
        row(
            "  the same after a catch-up saved it again, MB",
            f"{after / 1e6:.1f} = {after / max(1, metrics['text_bytes']):.2f}x",
        )  # type: ignore[call-overload]
        ctx.close()
    srv.shutdown()
    _table(args, rows)
    _write_json(args, metrics)
    return 0


OPFS_FILES = """async () => {
  const out = {};
  async function walk(dir, prefix) {
    for await (const [name, h] of dir.entries()) {
      if (h.kind === "directory") await walk(h, prefix + name + "/");
      else {
        try { out[prefix + name] = (await h.getFile()).size; } catch (e) { out[prefix + name] = String(e); }
      }
    }
  }
  await walk(await navigator.storage.getDirectory(), "");
  return out;
}"""


def _put_lib_pages(dist: Path) -> None:
    """Two pages into the served site, made from the bench page (``bench/page/index.html``,
    the same import map) without its harness: ``bench/lib.html`` boots Python and chatmem
    and nothing else (no interface, no other database), and ``bench/lib-prestart.html``
    does the same with ``lib-prestart.js`` (DuckDB-Wasm started first) run before boot.js."""
    here = Path(__file__).resolve().parent.parent / "page"
    page = (here / "index.html").read_text()
    boot, harness = (f'<script type="module" src="{src}"></script>' for src in ("../js/boot.js", "./main.js"))
    assert boot in page and harness in page, "bench/page/index.html: boot.js and main.js not where expected"
    lib = page.replace(harness, "")
    out = dist / "bench"
    out.mkdir(exist_ok=True)
    (out / "lib.html").write_text(lib)
    (out / "lib-prestart.html").write_text(
        lib.replace(boot, '<script type="module" src="./lib-prestart.js"></script>\n  ' + boot)
    )
    (out / "lib-prestart.js").write_bytes((here / "lib-prestart.js").read_bytes())


def opfs_files(page) -> dict[str, object]:
    """Every file in the origin's OPFS with its size in bytes (or why it could not be read)."""
    return page.evaluate(OPFS_FILES)


def _write_json(args: argparse.Namespace, metrics: dict[str, object]) -> None:
    if args.json:
        Path(args.json).write_text(json.dumps(metrics, indent=1))


def _table(args: argparse.Namespace, rows: list[tuple[str, str]]) -> None:
    w = max(len(a) for a, _ in rows)
    print(f"\n{args.messages:,} messages in {args.sessions:,} sessions, {args.queries} queries, Chromium")
    for a, v in rows:
        print(f"| {a.ljust(w)} | {v} |")


if __name__ == "__main__":
    sys.exit(main())
