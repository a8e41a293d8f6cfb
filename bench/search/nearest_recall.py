"""The approximate index's recall on LoCoMo inside a large history, against exact search.

Every LoCoMo conversation is stored in one CPython memory (the shipped model's vectors,
in-context where it stores them), beside ``filler`` messages of the bench's payloads
embedded with the same model; each question is asked of all of them, unfiltered, as an
app's search over its whole history does: exactly (every vector's int8 cosine, numpy)
and through the page's approximate index (``web/js/nearest.js``, run by Node over the
same vectors, with the candidate count ``chatmem.index.nearest`` gives that many rows).
Reports evidence R@5, R@10 and hit@10 of both (an evidence turn of the question's own
conversation in the top 10), how much of exact search's top 10 and top ``RRF_DEPTH``
(hybrid's semantic list) the approximate one holds, and its median ms per query.

    python bench/search/nearest_recall.py [--filler 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE.parent), str(ROOT / "py")]

import payloads  # noqa: E402
import quality  # noqa: E402

import chatmem  # noqa: E402
from chatmem.embedding.static import StaticEmbedder  # noqa: E402
from chatmem.index import nearest  # noqa: E402
from chatmem.index.search import RRF_DEPTH  # noqa: E402

__all__ = ["run_recall", "render_rows"]


async def _locomo(
    convs: list[dict[str, Any]],
) -> tuple[np.ndarray, np.ndarray, list[tuple[str, str]], list[dict[str, Any]]]:
    """(int8 ranking vectors, their scales, (character, dia_id) per row, questions)."""
    mem = await chatmem.open("nearest-recall")
    dia_of: dict[str, str] = {}
    for conv in convs:
        dia_of.update((await quality.store_conversation(mem, conv))[0])
    await mem.search("warm up", mode="semantic", limit=1)  # embeds every message
    rows = await mem.sql(
        "SELECT e.message_id, coalesce(e.cvec, e.vec) AS v, coalesce(e.cscale, e.scale) AS s, x.character_id "
        "FROM embeddings e JOIN sessions x ON x.session_id = e.session_id ORDER BY e.message_id"
    )
    await mem.close()
    vecs = np.array([r["v"] for r in rows], dtype=np.int8)
    scales = np.array([r["s"] for r in rows], dtype=np.float32)
    where = [(str(r["character_id"]), dia_of[r["message_id"]]) for r in rows]
    qs = [dict(q, character=c["name"]) for c in convs for q in c["questions"]]
    return vecs, scales, where, qs


def _filler(model: StaticEmbedder, n: int, seed: int = 20261101) -> tuple[np.ndarray, np.ndarray]:
    """``n`` payload messages embedded by ``model`` (numpy sums of its token rows), as int8 and scales."""
    table = np.frombuffer(model.table_bytes(), dtype=np.int8).reshape(-1, model.dimensions).astype(np.float32)
    weights = np.array(model.weights, dtype=np.float64)
    out = np.zeros((n, model.dimensions), np.float32)
    i, s = 0, seed
    while i < n:
        for m in payloads.messages(s, 1000):
            if i == n:
                break
            if isinstance(m["content"], str):
                ids = np.array(model.token_ids(m["content"]), dtype=np.int64)
                if len(ids):
                    out[i] = (weights[ids][:, None] * table[ids]).sum(axis=0)
                i += 1
        s += 1
    top = np.maximum(np.abs(out).max(axis=1, keepdims=True), 1e-12)
    q = np.round(out * 127.0 / top).astype(np.int8)
    norms = np.maximum(np.linalg.norm(q.astype(np.float32), axis=1), 1e-12)
    return q, (1.0 / norms).astype(np.float32)


def run_recall(filler: int = 100_000, convs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    convs = convs if convs is not None else quality.load_conversations()
    model = StaticEmbedder.load()
    vecs, scales, where, qs = asyncio.run(_locomo(convs))
    t0 = time.perf_counter()
    fv, fs = _filler(model, filler)
    embed_s = time.perf_counter() - t0
    rank = np.concatenate([vecs, fv])
    scale = np.concatenate([scales, fs])
    n, dim = rank.shape
    queries = np.array([model.embed_one(q["question"]) for q in qs], dtype=np.float64)
    queries /= np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    k = RRF_DEPTH
    cands = nearest.candidates(n, k)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "meta.json").write_text(json.dumps({"n": n, "dim": dim, "k": k, "candidates": cands}))
        rank.tofile(d / "rank.i8")
        scale.tofile(d / "scale.f32")
        queries.tofile(d / "queries.f64")
        got = json.loads(
            subprocess.run(
                ["node", str(HERE / "nearest_recall.mjs"), str(d), str(ROOT / "web" / "js" / "nearest.js")],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
    exact_scores = (queries @ rank.astype(np.float64).T) * scale[None, :]
    acc: dict[str, list[float]] = {
        m: [] for m in ("exact R@5", "exact R@10", "exact hit@10", "R@5", "R@10", "hit@10")
    }
    over10, over_depth = [], []
    for i, q in enumerate(qs):
        exact = list(np.lexsort((-np.arange(n), -exact_scores[i]))[:k])
        approx = got["top"][i]
        ev = set(q["evidence"])

        def found(top: list[int], at: int, character: str = q["character"], ev: set[str] = ev) -> set[str]:
            return {where[r][1] for r in top[:at] if r < len(where) and where[r][0] == character} & ev

        for prefix, top in (("exact ", exact), ("", approx)):
            acc[prefix + "R@5"].append(len(found(top, 5)) / len(ev))
            acc[prefix + "R@10"].append(len(found(top, 10)) / len(ev))
            acc[prefix + "hit@10"].append(1.0 if found(top, 10) else 0.0)
        over10.append(len(set(exact[:10]) & set(approx[:10])) / 10)
        over_depth.append(len(set(exact) & set(approx)) / k)
    return {
        "rows": n,
        "filler": filler,
        "candidates": cands,
        "questions": len(qs),
        **{m: round(statistics.fmean(v), 4) for m, v in acc.items()},
        "top10_shared": round(statistics.fmean(over10), 4),
        f"top{k}_shared": round(statistics.fmean(over_depth), 4),
        "p50_ms_node": round(float(got["p50_ms"]), 2),
        "filler_embed_s": round(embed_s, 1),
    }


def render_rows(r: dict[str, Any]) -> str:
    """Two rows for quality.md: exact and approximate semantic search over LoCoMo inside the filler."""
    where = f"{r['filler']:,} other messages beside LoCoMo, unfiltered ({r['rows']:,} vectors)"
    depth = f"top{RRF_DEPTH}_shared"
    return "\n".join(
        [
            f"| semantic, exact | {where} | {r['exact R@5']:.3f} | {r['exact R@10']:.3f} | {r['exact hit@10']:.3f} | |",
            f"| semantic, approximate index ({r['candidates']:,} candidates) | {where}; shares "
            f"{r['top10_shared']:.3f} of exact's top 10, {r[depth]:.3f} of its top {RRF_DEPTH} "
            f"| {r['R@5']:.3f} | {r['R@10']:.3f} | {r['hit@10']:.3f} | {r['p50_ms_node']:.2f} (Node) |",
        ]
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filler", type=int, default=100_000)
    args = ap.parse_args()
    r = run_recall(args.filler)
    print(json.dumps(r, indent=1))
    print(render_rows(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
