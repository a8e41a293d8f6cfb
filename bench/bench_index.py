"""Query index benchmark on CPython (not a test): 100,000 synthetic messages in
1,000 sessions. Prints load time, keyword/semantic/hybrid/substring query p50/p95,
and incremental append cost.

    PYTHONPATH=py python bench/bench_index.py [--messages 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import sys
import time

from chatmem.embedding import HashingEmbedder
from chatmem.index import DuckDBEngine, QueryIndex, search
from chatmem.index.embeddings import EMBEDDING_COLUMNS, model_key, quantize
from chatmem.records.models import extract_text


def make_vocab(rng: random.Random, n: int = 30_000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = set()
    while len(out) < n:
        out.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 10))))
    return sorted(out)


def zipf_sampler(rng: random.Random, vocab: list[str]):
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    cum = []
    acc = 0.0
    for w in weights:
        acc += w
        cum.append(acc)

    def sample(k: int) -> list[str]:
        return rng.choices(vocab, cum_weights=cum, k=k)

    return sample


def p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, math.ceil(q * len(xs)) - 1)] * 1000


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=1_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--dims", type=int, default=384)
    args = ap.parse_args()
    rng = random.Random(42)
    vocab = make_vocab(rng)
    sample = zipf_sampler(rng, vocab)
    t0 = 1_700_000_000_000
    sessions = [
        {
            "sessionId": f"s{i:05d}",
            "title": f"session {i}",
            "createdAt": t0,
            "updatedAt": t0,
            "characterId": f"c{i % 7}",
            "messageCount": args.messages // args.sessions,
        }
        for i in range(args.sessions)
    ]
    messages = []
    for i in range(args.messages):
        s = i % args.sessions
        messages.append(
            {
                "id": f"m{i:08d}",
                "sessionId": f"s{s:05d}",
                "seq": i // args.sessions,
                "role": ("user", "assistant")[i % 2],
                "content": " ".join(sample(rng.randint(8, 50))),
                "createdAt": t0 + i * 1000,
                "tokenCount": 20,
            }
        )
    texts = [extract_text(m["content"]) for m in messages]
    print(
        f"{len(messages):,} messages, {len(sessions):,} sessions, mean {statistics.mean(len(t) for t in texts):.0f} chars"
    )

    index = QueryIndex(DuckDBEngine())
    t = time.perf_counter()
    await index.rebuild(sessions, iter(messages))
    load_s = time.perf_counter() - t
    counts = await index.counts()
    print(f"rebuild (tokenise + bulk load + sort): {load_s:.2f} s; postings {counts['postings']:,}")

    # queries: 1-3 words drawn from the mid/rare vocabulary, a few with a common word
    queries = []
    for _ in range(args.queries):
        k = rng.randint(1, 3)
        ws = [vocab[int(rng.paretovariate(0.6)) % len(vocab)] for _ in range(k)]
        queries.append(" ".join(ws))

    async def timed(fn) -> list[float]:
        out = []
        for q in queries:
            s = time.perf_counter()
            await fn(q)
            out.append(time.perf_counter() - s)
        return out

    kw = await timed(lambda q: search(index, q, limit=10))
    print(f"keyword BM25 top-10: p50 {p(kw, 0.5):.1f} ms, p95 {p(kw, 0.95):.1f} ms")
    dfs = []
    for q in queries:
        rows = await index.sql(
            "SELECT max(df) AS n FROM terms WHERE term IN (" + ", ".join("?" for _ in q.split()) + ")",
            q.split(),
        )
        dfs.append(rows[0]["n"] or 0)
    rare = [t for t, d in zip(kw, dfs) if d < len(messages) // 100]
    common = [t for t, d in zip(kw, dfs) if d >= len(messages) // 100]
    if rare and common:
        print(
            f"  queries whose terms are all in < 1% of messages ({len(rare)}): p50 {p(rare, 0.5):.1f} ms; "
            f"with a term in >= 1% ({len(common)}): p50 {p(common, 0.5):.1f} ms"
        )
    kwf = await timed(
        lambda q: search(
            index, q, limit=10, roles=["user"], character_ids=["c1", "c2"], date_range=(t0, t0 + 50_000_000)
        )
    )
    print(f"keyword BM25 top-10 with filters: p50 {p(kwf, 0.5):.1f} ms, p95 {p(kwf, 0.95):.1f} ms")

    def scan(q: str) -> list[int]:
        ql = q.lower()
        return [i for i, t in enumerate(texts) if ql in t.lower()]

    sc = []
    for q in queries[:50]:
        s = time.perf_counter()
        scan(q)
        sc.append(time.perf_counter() - s)
    print(
        f"original linear substring scan in Python (in memory): p50 {p(sc, 0.5):.1f} ms "
        f"-> BM25 is {p(sc, 0.5) / p(kw, 0.5):.1f}x faster at p50"
    )
    ss = await timed(lambda q: search(index, q, limit=10, mode="substring"))
    print(f"substring mode in DuckDB: p50 {p(ss, 0.5):.1f} ms")

    # semantic: hashing-embedder throughput, then 384-dim vectors for every message
    emb = HashingEmbedder(args.dims)
    s = time.perf_counter()
    vecs = await emb.embed(texts[:2000])
    rate = 2000 / (time.perf_counter() - s)
    print(
        f"HashingEmbedder({args.dims}): {rate:,.0f} texts/s in pure Python "
        f"(~{len(texts) / rate:.0f} s for all)"
    )
    # to keep the bench short the other vectors are cheap random unit vectors of the same model
    rows = []
    key = model_key(emb.model)
    for i, m in enumerate(messages):
        if i < len(vecs):
            v = vecs[i]
        else:
            v = [rng.gauss(0, 1) for _ in range(args.dims)]
            n = math.sqrt(sum(x * x for x in v))
            v = [x / n for x in v]
        q, scale = quantize(v)
        rows.append(
            (
                m["id"],
                emb.model,
                args.dims,
                q,
                scale,
                None,
                None,
                m["sessionId"],
                m["role"],
                m["createdAt"],
                key,
            )
        )
    s = time.perf_counter()
    await index.engine.load_rows("embeddings", EMBEDDING_COLUMNS, rows)
    print(f"load {len(rows):,} x {args.dims} vectors: {time.perf_counter() - s:.1f} s")
    index.embedder = emb
    sem = await timed(lambda q: search(index, q, limit=10, mode="semantic"))
    print(f"semantic top-10 (brute force cosine): p50 {p(sem, 0.5):.1f} ms, p95 {p(sem, 0.95):.1f} ms")
    hyb = await timed(lambda q: search(index, q, limit=10, mode="hybrid", now=t0 + 10**8))
    print(f"hybrid top-10: p50 {p(hyb, 0.5):.1f} ms, p95 {p(hyb, 0.95):.1f} ms")

    # incremental: append 1 message at a time
    index.embedder = None
    app = []
    for j in range(50):
        rec = {
            "id": f"n{j:06d}",
            "sessionId": "s00001",
            "seq": 10_000 + j,
            "role": "user",
            "content": " ".join(sample(30)),
            "createdAt": t0 + 10**9 + j,
            "tokenCount": 20,
        }
        s = time.perf_counter()
        await index.apply("messages-appended", "s00001", [rec])
        app.append(time.perf_counter() - s)
    print(f"incremental apply of one appended message: p50 {p(app, 0.5):.1f} ms")
    s = time.perf_counter()
    await index.compact()
    print(f"compact (re-sort postings): {time.perf_counter() - s:.2f} s")
    await index.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
