"""``search``: ranked keyword (BM25), semantic, hybrid and substring search over a ``QueryIndex``.

Every mode is one SQL statement with bound parameters (one round trip to the
engine, which matters in the browser; where the engine runs in this thread,
CPython's ``duckdb``, the query vector is written into the statement as a
constant instead, which saves the package's parameter handling), plus at most
one embedding of the query;
the winners' records are then read from the store in one call (the index holds
no copy of them). Keyword search reads the query terms' ids and document
frequencies from the index's Python-side figures (one more statement only for
a term it has not seen since the last delete).

- ``keyword``: BM25 (k1=1.2, b=0.75) over the inverted index. Bare words are
  alternatives (a message with more, and rarer, query words ranks higher);
  ``"quoted phrases"`` must occur exactly (their words are required, and the
  candidates' records are checked, best first, against the phrase in their
  normalised text until ``limit`` pass). ``score`` is the BM25 sum.
- ``semantic``: cosine similarity between the query's vector and the stored
  vectors of the embedder's model: the stored vectors are unit int8 vectors
  with a scale (see ``embeddings.quantize``), so a cosine is one int8 dot product
  (exact, over every compact vector; within 1e-3 of the float cosine; a large
  index computes per row only the cosine it ranks by, see ``embeddings.semantic_ctes``).
  ``score`` is the similarity *calibrated* for the embedder (its
  ``calibration = (lo, hi)`` maps raw cosine ``lo`` to 0 and ``hi`` to 1,
  clipped to [-1, 1]; the static model is calibrated so that a paraphrase
  scores at least 0.75 and an unrelated message below 0.7, the original's
  defaults); ``threshold`` is a minimum calibrated score. The breakdown keeps
  the raw ``similarity``. Results are *ranked* by the in-context vector when
  the embedder stores one (a message with a little of the turn it answers:
  better recall), while ``score`` and ``threshold`` read the message's own
  vector (a message is never let through by its neighbour).
- ``hybrid``: reciprocal rank fusion of the keyword and semantic rankings
  (see ``fusion``): a message ranked ``r`` (1 = best) in a list earns
  ``weight * (K + 1) / (K + r)`` from it (``K`` = ``RRF_K``), plus ``weights
  ["recency"] * 0.5 ** (age / half_life)``. With the default weights the top
  message of both lists scores 1.0.
- ``substring``: the original ``searchMessages``: case-insensitive substring of
  the plain text, newest first (score 1.0), for parity.

Ties are broken by recency (newer first), then by id. ``threshold`` is a
minimum ``score`` in every mode. Filters: ``session_ids``, ``character_ids``,
``roles`` (lists; an empty list matches nothing), ``date_range=(start_ms,
end_ms)`` with both ends inclusive (either may be None).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec, cast

from ..embedding.embedders import Embedder, calibration_of
from ..errors import ValidationError, shown
from ..records.ids import system_clock
from ..text.tokenize import parse_query
from . import embeddings, scoring
from .embeddings import model_key, query_literal, semantic_ctes
from .hits import (
    _MAX_LIMIT,
    DAY_MS,
    DEFAULT_WEIGHTS,
    Filters,
    SearchHit,
    _bm25_stats,
    _fetch,
    _int,
    _term_stats,
    bm25_ctes,
    bm25_sql,
    build_filters,
    hit_from_row,
    phrase_matches,
    rank_top,
    top_sql,
)
from .protocols import SearchIndex
from .scoring import keyword_top, postings_needed, term_weights

if TYPE_CHECKING:
    from .fusion import hybrid as hybrid

__all__ = [
    "DAY_MS",
    "DEFAULT_WEIGHTS",
    "MODES",
    "Filters",
    "SearchHit",
    "bm25_ctes",
    "bm25_sql",
    "build_filters",
    "default_embedder",
    "hit_from_row",
    "search",
]

MODES = ("keyword", "semantic", "hybrid", "substring")


def default_embedder(index: SearchIndex, embedder: Embedder | None) -> Embedder:
    """The embedder given, else the index's, else the local default (the static
    model when it is available, else ``HashingEmbedder``)."""
    from ..embedding.local import default_embedder as local

    return embedder or index.embedder or local()


async def _query_vector(index: SearchIndex, embedder: Embedder, query: str) -> str:
    await index.embed_missing(embedder)
    (vec,) = await embedder.embed([query])
    return query_literal(vec)


# --------------------------------------------------------------------------- search

_P = ParamSpec("_P")


def _answering(fn: Callable[_P, Awaitable[list[SearchHit]]]) -> Callable[_P, Awaitable[list[SearchHit]]]:
    """Run ``fn(index, ...)`` marked as an answer under way on the index (its
    ``answering()``): background reads wait for the answer."""

    @functools.wraps(fn)
    async def run(*args: _P.args, **kwargs: _P.kwargs) -> list[SearchHit]:
        index = cast(SearchIndex, args[0] if args else kwargs["index"])
        async with index.answering():
            return await fn(*args, **kwargs)

    return run


@_answering
async def search(
    index: SearchIndex,
    query: str,
    *,
    limit: int | None = 5,
    mode: str = "keyword",
    threshold: float | None = None,
    session_ids: Iterable[str] | None = None,
    character_ids: Iterable[str] | None = None,
    date_range: tuple[int | None, int | None] | None = None,
    roles: Iterable[str] | None = None,
    embedder: Embedder | None = None,
    now: int | None = None,
    weights: Mapping[str, float] | None = None,
    half_life_ms: int = 30 * DAY_MS,
) -> list[SearchHit]:
    """Search the index (see the module docstring). ``ValidationError`` on bad input,
    before any query runs. ``limit=None`` returns every match."""
    if mode not in MODES:
        raise ValidationError(f"mode must be one of {MODES}, got {shown(mode)}", field="mode")
    if not isinstance(query, str):
        raise ValidationError("query must be a string", field="query")
    if not query.strip():
        raise ValidationError("query is empty", field="query")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= _MAX_LIMIT
    ):
        raise ValidationError(f"limit must be an int from 1 to {_MAX_LIMIT}, or None", field="limit")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
        raise ValidationError("threshold must be a number or None", field="threshold")
    w = dict(DEFAULT_WEIGHTS)
    if weights is not None:
        unknown = set(weights) - set(w)
        if unknown or not all(isinstance(v, (int, float)) and v >= 0 for v in weights.values()):
            raise ValidationError("weights maps keyword/semantic/recency to numbers >= 0", field="weights")
        w.update(weights)
    if isinstance(half_life_ms, bool) or not isinstance(half_life_ms, int) or half_life_ms <= 0:
        raise ValidationError("half_life_ms must be a positive int", field="half_life_ms")
    flt = build_filters(session_ids, character_ids, date_range, roles)
    pq = parse_query(query) if mode in ("keyword", "hybrid") else None
    if flt.empty:
        return []
    lim_sql, lim_params = ("LIMIT ?", [limit]) if limit is not None else ("", [])
    thr = float(threshold) if threshold is not None else None
    await index.setup()

    if mode == "substring":
        if thr is not None and thr > 1.0:
            return []
        rows = await index.execute(
            f"SELECT m.id FROM messages m WHERE strpos(lower(m.text), lower(?)) > 0 AND {flt.sql} "
            f"ORDER BY m.created_at DESC, m.id DESC {lim_sql}",
            [query] + flt.params + lim_params,
        )
        return [
            hit_from_row(r, 1.0, {"keyword": 1.0, "semantic": 0.0, "recency": 0.0})
            for r, _ in await _fetch(index, rows)
        ]

    if mode == "keyword":
        assert pq is not None
        stats = await _bm25_stats(index)
        terms = await _term_stats(index, pq)
        kflt = build_filters(session_ids, character_ids, date_range, roles, alias="d")
        # a filtered query whose postings are few is scored in Python too, over the docs its
        # filters admit (``scoring.admitted``); else by the filtered statement below
        narrow = kflt.sql != "TRUE"
        fast = terms is not None and limit is not None and not pq.phrases
        if fast:
            assert terms is not None and limit is not None
            tw, required = term_weights(pq, stats, terms)
            here = tw is not None and (
                postings_needed(pq, terms) <= scoring.py_postings(index, stats[0]) or scoring.kept(index, tw)
            )
            if narrow and tw is not None and not here:
                # only the docs the filters admit are scored: the budget grows with how few they are
                here = postings_needed(pq, terms) <= scoring.filtered_postings(
                    index, stats[0], len(await scoring.admitted(index, kflt, stats[0]))
                )
            fast = not narrow or tw is None or here
        if fast:
            assert terms is not None and limit is not None
            ranked: list[dict[str, Any]] | None = None
            if tw is None:
                ranked = []
            elif here:
                ranked = await keyword_top(index, tw, required, stats, limit, thr, kflt if narrow else None)
            for exact in (False, True):
                if ranked is not None:
                    break
                top = top_sql(pq, stats, terms, limit, thr, exact=exact)
                ranked = rank_top(await index.execute(*top) if top is not None else [], limit, exact)
            return [
                hit_from_row(
                    r,
                    float(k["score"]),
                    {
                        "keyword": float(k["score"]),
                        "semantic": 0.0,
                        "recency": 0.0,
                        "bm25": float(k["score"]),
                    },
                )
                for r, k in await _fetch(index, ranked or [])
            ]
        kw_sql, params, required = bm25_sql(pq, stats, kflt, terms)
        conds = [f"k.req = {required}"] if required else []
        if thr is not None:
            conds.append("round(k.kw, 9) >= ?")
            params = params + [thr]
        where = f"WHERE {' AND '.join(conds)} " if conds else ""
        # a phrase is checked on the records of the ranked candidates, best first
        lim_kw, lim_kw_params = ("", []) if pq.phrases else (lim_sql, lim_params)
        rows = await index.execute(
            f"SELECT k.message_id AS id, round(k.kw, 9) AS score FROM ({kw_sql}) k {where}"
            f"ORDER BY score DESC, k.created_at DESC, k.message_id DESC {lim_kw}",
            params + lim_kw_params,
        )
        found = await phrase_matches(index, pq, rows, limit) if pq.phrases else await _fetch(index, rows)
        return [
            hit_from_row(
                r,
                float(k["score"]),
                {"keyword": float(k["score"]), "semantic": 0.0, "recency": 0.0, "bm25": float(k["score"])},
            )
            for r, k in found
        ]

    emb = default_embedder(index, embedder)
    vec = await _query_vector(index, emb, query)
    lo, hi = calibration_of(emb)
    # filters, ranking and ties read only ``embeddings`` (it carries session_id, role and
    # created_at): a scan of the vectors and a top-k, no join over every candidate. The
    # model is selected by its integer key written into the SQL (a constant, not a bound
    # parameter), so that zone maps prove it for a table of one model and DuckDB skips it
    eflt = build_filters(session_ids, character_ids, date_range, roles, alias="e")
    # ``sim``: the message's own vector (scores, thresholds); ``rsim``: its in-context
    # vector when the embedder stores one (ranks), else the same
    # where the engine is in this thread the query vector is written into the statement
    # (see ``fusion._fused_here``), else bound as a parameter
    local = index.in_thread
    stats = await _bm25_stats(index)
    where = f"e.model_key = {model_key(emb.model)} AND e.dim = {int(emb.dimensions)}" + (
        f" AND {eflt.sql}" if eflt.sql != "TRUE" else ""
    )
    qv = scoring.vector_sql(vec) if local else "CAST(? AS FLOAT[])"
    one = stats[0] >= embeddings.ONE_COSINE_FROM
    if mode == "semantic":
        # the rows a page of results can come from: the ranking's top ``limit``, with room
        # for ties of the ranking cosine (ordered by the own cosine after it)
        sem_top = (
            f"ORDER BY rsim DESC, created_at DESC, message_id DESC LIMIT {int(limit) + 16}"
            if thr is None and limit is not None
            else ""
        )
    else:
        from .fusion import RRF_DEPTH

        sem_top = (
            f"ORDER BY rsim DESC, message_id DESC LIMIT {max(RRF_DEPTH, int(limit))}"
            if limit is not None
            else ""
        )
    sem_cte = semantic_ctes(qv, where, one_cosine=one, top=sem_top)
    sem_params: list[Any] = ([] if local else [vec]) + eflt.params

    if mode == "semantic":
        calibrated = "greatest(-1.0, least(1.0, (sem.sim - CAST(? AS DOUBLE)) / CAST(? AS DOUBLE)))"
        params = sem_params + [lo, hi - lo]
        outer = ""
        if thr is not None:
            outer = "WHERE score >= ?"
            params.append(thr)
        # a scan of a few thousand vectors is a small read (no thread hop on CPython)
        small = local and stats[0] <= scoring.WHOLE_DOCS
        rows = await (scoring.small_read(index) if small else index.execute)(
            f"WITH {sem_cte}\nSELECT * FROM (SELECT sem.message_id AS id, sem.created_at, "
            f"round({calibrated}, 9) AS score, round(sem.sim, 9) AS sim, sem.rsim FROM sem) {outer} "
            f"ORDER BY rsim DESC, score DESC, created_at DESC, id DESC {lim_sql}",
            params + lim_params,
        )
        return [
            hit_from_row(
                r,
                float(k["score"]),
                {
                    "keyword": 0.0,
                    "semantic": float(k["score"]),
                    "recency": 0.0,
                    "similarity": float(k["sim"]),
                },
            )
            for r, k in await _fetch(index, rows)
        ]

    from .fusion import hybrid

    assert pq is not None
    return await hybrid(
        index,
        pq,
        build_filters(session_ids, character_ids, date_range, roles, alias="d"),
        flt,
        sem_cte,
        sem_params,
        stats,
        w,
        system_clock() if now is None else _int(now, "now"),
        half_life_ms,
        thr,
        lim_sql,
        lim_params,
        (vec, emb.model, emb.dimensions),
        eflt,
    )
