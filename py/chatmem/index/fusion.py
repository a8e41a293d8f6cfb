"""Hybrid search: reciprocal rank fusion (RRF) of the keyword and semantic rankings.

Both rankings are taken within the filtered messages. A message ranked ``r``
(1 = best) in a list earns ``weight * (RRF_K + 1) / (RRF_K + r)`` from it, so
the best of a list earns its whole weight and the 10th about half of it; a
message absent from a list earns nothing from it. ``recency`` adds
``weights["recency"] * 0.5 ** (age / half_life)``. Ranks, not raw scores, are
fused: BM25 sums and cosines live on different scales, ranks do not. The
``breakdown`` of a hit keeps each weighted part (``keyword``, ``semantic``,
``recency``), the raw ``bm25`` and ``similarity``, and the two ranks
(``keyword_rank``, ``semantic_rank``; 0 where absent).

Each ranking is read to its top ``RRF_DEPTH`` (200, or ``limit`` if more;
all of it for ``limit=None``): a message further down earns at most
``weight * 11 / 210`` (about 0.026 with the default weights) from that list, so
the fused top 10 is that of the full rankings save for near-ties, and the
fusion sorts a few hundred rows instead of every match.

``RRF_K`` = 10 was chosen on the LoCoMo dev conversations (R@10 0.63 at 10,
0.62 at 30, 0.61 at 60 with the static model).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

from ..text.tokenize import ParsedQuery
from . import embeddings, scoring
from .embeddings import cosine_sql, model_key, semantic_ctes
from .hits import (
    Filters,
    SearchHit,
    _fetch,
    _phrase_sql,
    _term_stats,
    bm25_ctes,
    bm25_sql,
    hit_from_row,
    phrase_matches,
)
from .protocols import SearchIndex
from .scoring import keyword_ranking, postings_needed, round9, term_weights, vector_sql

__all__ = ["RRF_DEPTH", "RRF_K", "hybrid"]

RRF_K = 10
#: how deep each ranking is read: a message past it in one list earns nothing from that list
RRF_DEPTH = 200


async def _phrase_ids(
    index: SearchIndex, pq: ParsedQuery, kw_flt: Filters, stats: tuple[int, float]
) -> list[str] | None:
    """The ids of the keyword candidates that hold every phrase (None: no phrase)."""
    if not pq.phrases:
        return None
    sql, params, required = bm25_sql(pq, stats, kw_flt, await _term_stats(index, pq))
    rows = await index.execute(f"SELECT k.message_id AS id FROM ({sql}) k WHERE k.req = {required}", params)
    return [str(r["id"]) for _, r in await phrase_matches(index, pq, rows)]


async def hybrid(
    index: SearchIndex,
    pq: ParsedQuery,
    kw_flt: Filters,
    flt: Filters,
    sem_cte: str,
    sem_params: list[Any],
    stats: tuple[int, float],
    w: Mapping[str, float],
    now_ms: int,
    half_life_ms: int,
    thr: float | None,
    lim_sql: str,
    lim_params: list[Any],
    sem_query: tuple[str, str, int] | None = None,
    sem_flt: Filters | None = None,
) -> list[SearchHit]:
    """One SQL statement: the keyword CTEs (``kw_flt`` over ``docs d``), the semantic
    CTE ``sem`` (already filtered; it carries ``created_at``), ranks, fusion. Both rankings
    hold only messages that pass the filters, so the fused rows need no join (``flt``,
    the same filters over ``messages m``, is not read). ``sem_flt``: the same filters over
    ``embeddings e``, for the fusion here."""
    terms = await _term_stats(index, pq)
    # fused here where statements are cheap (an engine in this thread: CPython); in the
    # page every statement is a round trip to the engine's worker, and the one statement
    # below answers sooner (20,000 messages: 43 against 78 ms p50)
    if (
        index.in_thread
        and terms is not None
        and lim_params
        and sem_query is not None
        and not pq.phrases
        and (kw_flt.sql == "TRUE" or sem_flt is not None)
        and postings_needed(pq, terms) <= scoring.PY_POSTINGS
    ):
        narrow = kw_flt.sql != "TRUE"
        return await _fused_here(
            index,
            pq,
            terms,
            sem_query,
            stats,
            w,
            now_ms,
            half_life_ms,
            thr,
            int(lim_params[0]),
            (kw_flt, sem_flt) if narrow and sem_flt is not None else None,
        )
    if terms is not None:
        # the term-id form keyword search uses: postings by term id, no per-term unions
        kw_sql, cparams, required = bm25_sql(pq, stats, kw_flt, terms)
        ctes = f"kw AS ({kw_sql})"
    else:
        ctes, cparams, required = bm25_ctes(pq, kw_flt, stats)
    phrase, pparams = _phrase_sql(await _phrase_ids(index, pq, kw_flt, stats))
    kwf = (
        "kwf AS (SELECT kw.message_id, kw.kw, kw.created_at FROM kw "
        + f"WHERE kw.req = {required}"
        + (f" AND {phrase}" if phrase else "")
        + ")"
    )
    k = float(RRF_K)
    # each ranking read to its top RRF_DEPTH (more when the caller wants more), all of it for limit=None
    depth = f"LIMIT {max(RRF_DEPTH, int(lim_params[0]))}" if lim_params else ""
    inner = (
        f"WITH {ctes},\n{kwf},\n{sem_cte},\n"
        "kr AS (SELECT message_id, kw, created_at, row_number() OVER (ORDER BY kw DESC, message_id DESC) AS r "
        f"FROM (SELECT message_id, kw, created_at FROM kwf ORDER BY kw DESC, message_id DESC {depth})),\n"
        "sr AS (SELECT message_id, sim, created_at, row_number() OVER (ORDER BY rsim DESC, message_id DESC) AS r "
        f"FROM (SELECT message_id, sim, rsim, created_at FROM sem ORDER BY rsim DESC, message_id DESC {depth})),\n"
        "c AS (SELECT coalesce(kr.message_id, sr.message_id) AS message_id, "
        "coalesce(kr.created_at, sr.created_at) AS created_at, kr.kw, kr.r AS kr, "
        "sr.sim, sr.r AS sr FROM kr FULL OUTER JOIN sr ON kr.message_id = sr.message_id)\n"
        "SELECT c.message_id AS id, c.created_at, coalesce(c.kw, 0) AS bm25, coalesce(c.sim, 0) AS similarity, "
        "coalesce(c.kr, 0) AS kr, coalesce(c.sr, 0) AS sr, "
        f"? * coalesce({k + 1} / ({k} + c.kr), 0) AS p_kw, "
        f"? * coalesce({k + 1} / ({k} + c.sr), 0) AS p_sem, "
        "? * pow(0.5, greatest(? - c.created_at, 0) / ?) AS p_rec FROM c"
    )
    params = (
        cparams
        + pparams
        + sem_params
        + [w["keyword"], w["semantic"], w["recency"], now_ms, float(half_life_ms)]
    )
    outer_where = ""
    if thr is not None:
        outer_where = "WHERE round(p_kw + p_sem + p_rec, 9) >= ?"
        params.append(thr)
    rows = await index.execute(
        f"SELECT *, round(p_kw + p_sem + p_rec, 9) AS score FROM ({inner}) {outer_where} "
        f"ORDER BY score DESC, created_at DESC, id DESC {lim_sql}",
        params + lim_params,
    )
    return [
        hit_from_row(
            r,
            float(x["score"]),
            {
                "keyword": float(x["p_kw"]),
                "semantic": float(x["p_sem"]),
                "recency": float(x["p_rec"]),
                "bm25": float(x["bm25"]),
                "similarity": float(x["similarity"]),
                "keyword_rank": float(x["kr"]),
                "semantic_rank": float(x["sr"]),
            },
        )
        for r, x in await _fetch(index, rows)
    ]


async def _fused_here(
    index: SearchIndex,
    pq: ParsedQuery,
    terms: Mapping[str, tuple[int, int]],
    sem_query: tuple[str, str, int],
    stats: tuple[int, float],
    w: Mapping[str, float],
    now_ms: int,
    half_life_ms: int,
    thr: float | None,
    limit: int,
    filters: tuple[Filters, Filters] | None = None,
) -> list[SearchHit]:
    """``hybrid`` without phrases, for a query with few postings: the keyword list scored
    in Python (``scoring``; narrowed to the docs the filters admit), the semantic list one
    statement, fused here with the arithmetic of the SQL form (same ranks, scores and
    order). ``filters``: the filters over ``docs d`` and over ``embeddings e``."""
    depth = max(RRF_DEPTH, limit)
    weights, required = term_weights(pq, stats, terms)
    kw_flt = filters[0] if filters is not None else None
    kws = await keyword_ranking(index, weights, required, stats, depth, kw_flt) if weights is not None else []
    # the semantic list: ranked by the in-context cosine (the own one where there is none).
    # Both cosines are made in the scan: carrying the top rows' vectors through the sort to
    # compute the own cosine after it cost more (about 1 ms of 3.3 on 400 vectors)
    vec, model, dim = sem_query
    # a scan of a few thousand vectors is a small read (no thread hop on CPython)
    run = scoring.small_read(index) if stats[0] <= scoring.WHOLE_DOCS else index.execute
    # the model by its integer key written into the SQL (zone maps skip the filter, see
    # ``search``); each vector row carries its message's time. The query vector is
    # written in as text: a statement without parameters skips the duckdb package's
    # per-parameter probing (about 0.2 ms), and DuckDB parses the same text either way
    where = f"e.model_key = {model_key(model)} AND e.dim = {int(dim)}"
    sem_params: list[Any] = []
    if filters is not None:
        where += f" AND {filters[1].sql}"
        sem_params = list(filters[1].params)
    if stats[0] >= embeddings.ONE_COSINE_FROM:
        # a large index: the scan computes the ranking cosine alone (see ``semantic_ctes``)
        ctes = semantic_ctes(
            vector_sql(vec), where, one_cosine=True, top=f"ORDER BY rsim DESC, message_id DESC LIMIT {depth}"
        )
        sql = f"WITH {ctes}\nSELECT message_id, created_at, sim FROM sem ORDER BY rsim DESC, message_id DESC"
    else:
        sql = (
            f"WITH q AS (SELECT {vector_sql(vec)} AS v),\n"
            f"s AS (SELECT e.message_id, e.created_at, {cosine_sql()} AS sim, "
            f"{cosine_sql(context=True)} AS csim FROM embeddings e CROSS JOIN q WHERE {where})\n"
            "SELECT message_id, created_at, sim FROM s "
            f"ORDER BY coalesce(csim, sim) DESC, message_id DESC LIMIT {depth}"
        )
    sem = await run(sql, sem_params) if sem_params else await run(sql)
    times = {mid: created for mid, _, created in kws}
    for row in sem:
        if row["created_at"] is not None:
            times.setdefault(row["message_id"], int(row["created_at"]))
    k = float(RRF_K)
    # message_id -> [bm25, keyword rank, similarity, semantic rank, created_at]
    c: dict[str, list[Any]] = {}
    for r, (mid, kw, created) in enumerate(kws, 1):
        c[mid] = [kw, r, 0.0, 0, created]
    for r, row in enumerate(sem, 1):
        when = times.get(row["message_id"])
        if when is None:
            continue  # a vector without its message: ranked, then dropped (as the SQL's join does)
        e = c.setdefault(row["message_id"], [0.0, 0, 0.0, 0, when])
        e[2], e[3] = float(row["sim"]), r
    wk, ws, wr, hl = w["keyword"], w["semantic"], w["recency"], float(half_life_ms)
    # (unrounded score, message_id, parts): rounding is monotone, so only the candidates
    # near or above the ``limit``-th best sum are rounded and ordered
    raw = []
    for mid, e in c.items():
        kw, kr, sim, sr, created = e
        p_kw = wk * ((k + 1) / (k + kr) if kr else 0.0)
        p_sem = ws * ((k + 1) / (k + sr) if sr else 0.0)
        p_rec = wr * 0.5 ** (max(now_ms - created, 0) / hl)
        raw.append((p_kw + p_sem + p_rec, mid, p_kw, p_sem, p_rec))
    if thr is not None:
        raw = [x for x in raw if round9(x[0]) >= thr]
    if len(raw) > limit:
        low = round9(heapq.nlargest(limit, [x[0] for x in raw])[-1])
        raw = [x for x in raw if x[0] >= low - 1e-9]
    out = []
    for total, mid, p_kw, p_sem, p_rec in raw:
        kw, kr, sim, sr, created = c[mid]
        out.append(
            {
                "id": mid,
                "created_at": created,
                "score": round9(total),
                "p_kw": p_kw,
                "p_sem": p_sem,
                "p_rec": p_rec,
                "bm25": kw,
                "similarity": sim,
                "kr": kr,
                "sr": sr,
            }
        )
    out.sort(key=lambda x: (x["score"], x["created_at"], x["id"]), reverse=True)
    return [
        hit_from_row(
            r,
            x["score"],
            {
                "keyword": x["p_kw"],
                "semantic": x["p_sem"],
                "recency": x["p_rec"],
                "bm25": x["bm25"],
                "similarity": x["similarity"],
                "keyword_rank": float(x["kr"]),
                "semantic_rank": float(x["sr"]),
            },
        )
        for r, x in await _fetch(index, out[:limit])
    ]
