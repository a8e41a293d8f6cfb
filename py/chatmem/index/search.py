"""``search``: ranked keyword (BM25), semantic, hybrid and substring search over a
``QueryIndex``, as one pipeline: the request is validated once (``SearchQuery``), the
mode's scorer ranks light rows in the index (``_substring``, ``_keyword``,
``_semantic``, ``_hybrid``), and the winners' records are read back (``hits``).

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
- ``hybrid``: reciprocal rank fusion (RRF) of the keyword and semantic
  rankings, both taken within the filtered messages. A message ranked ``r``
  (1 = best) in a list earns ``weight * (RRF_K + 1) / (RRF_K + r)`` from it, so
  the best of a list earns its whole weight and the 10th about half of it; a
  message absent from a list earns nothing from it. ``recency`` adds
  ``weights["recency"] * 0.5 ** (age / half_life)``. With the default weights
  the top message of both lists scores 1.0. Ranks, not raw scores, are fused:
  BM25 sums and cosines live on different scales, ranks do not. The
  ``breakdown`` keeps each weighted part, the raw ``bm25`` and ``similarity``,
  and the two ranks (``keyword_rank``, ``semantic_rank``; 0 where absent).
  Each ranking is read to its top ``RRF_DEPTH`` (200, or ``limit`` if more;
  all of it for ``limit=None``): a message further down earns at most
  ``weight * 11 / 210`` (about 0.026 with the default weights) from that
  list, so the fused top 10 is that of the full rankings save for near-ties.
  ``RRF_K`` = 10 was chosen on the LoCoMo dev conversations.
- ``substring``: the original ``searchMessages``: case-insensitive substring of
  the plain text, newest first (score 1.0), for parity.

Ties are broken by recency (newer first), then by id. ``threshold`` is a
minimum ``score`` in every mode. Filters: ``session_ids``, ``character_ids``,
``roles`` (lists; an empty list matches nothing), ``date_range=(start_ms,
end_ms)`` with both ends inclusive (either may be None).
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, cast

from ..embedding.embedders import Embedder, calibration_of
from ..errors import QueryError, ValidationError, shown
from ..records.ids import system_clock
from ..text.tokenize import ParsedQuery, parse_query
from . import embeddings, scoring
from .embeddings import cosine_sql, model_key, query_literal, semantic_ctes, unit_vector
from .hits import (
    DAY_MS,
    DEFAULT_WEIGHTS,
    MAX_LIMIT,
    Filters,
    FilterValues,
    SearchHit,
    bm25_ctes,
    bm25_sql,
    check_ms,
    fetch_ranked,
    hit_from_row,
    phrase_matches,
    phrase_sql,
    rank_top,
    term_stats,
    top_sql,
)
from .nearest import nearest_cte
from .protocols import SearchIndex
from .scoring import keyword_ranking, keyword_top, postings_needed, round9, term_weights, vector_sql

__all__ = [
    "MODES",
    "RRF_DEPTH",
    "RRF_K",
    "SearchHit",
    "SearchQuery",
    "default_embedder",
    "search",
]

MODES = ("keyword", "semantic", "hybrid", "substring")
RRF_K = 10
#: how deep each ranking is read: a message past it in one list earns nothing from that list
RRF_DEPTH = 200


def default_embedder(index: SearchIndex, embedder: Embedder | None) -> Embedder:
    """The embedder given, else the index's, else the local default (the static
    model when it is available, else ``HashingEmbedder``)."""
    from ..embedding.local import default_embedder as local

    return embedder or index.embedder or local()


# --------------------------------------------------------------------------- the request


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """One search, validated before any statement runs: what every stage reads."""

    text: str
    mode: str
    limit: int | None
    threshold: float | None
    #: the parsed query of ``keyword`` and ``hybrid`` (None for the others)
    parsed: ParsedQuery | None
    filters: FilterValues
    weights: dict[str, float]
    half_life_ms: int
    #: the time recency is measured from (None: now); checked where it is read
    now: Any = None

    @classmethod
    def of(
        cls,
        query: Any,
        *,
        limit: Any = 5,
        mode: Any = "keyword",
        threshold: Any = None,
        session_ids: Any = None,
        character_ids: Any = None,
        date_range: Any = None,
        roles: Any = None,
        now: Any = None,
        weights: Any = None,
        half_life_ms: Any = 30 * DAY_MS,
    ) -> SearchQuery:
        """Validate a search; ``ValidationError`` names the first bad argument."""
        if mode not in MODES:
            raise ValidationError(f"mode must be one of {MODES}, got {shown(mode)}", field="mode")
        if not isinstance(query, str):
            raise ValidationError("query must be a string", field="query")
        if not query.strip():
            raise ValidationError("query is empty", field="query")
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT
        ):
            raise ValidationError(f"limit must be an int from 1 to {MAX_LIMIT}, or None", field="limit")
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
            raise ValidationError("threshold must be a number or None", field="threshold")
        w = dict(DEFAULT_WEIGHTS)
        if weights is not None:
            unknown = set(weights) - set(w)
            if unknown or not all(isinstance(v, (int, float)) and v >= 0 for v in weights.values()):
                raise ValidationError(
                    "weights maps keyword/semantic/recency to numbers >= 0", field="weights"
                )
            w.update(weights)
        if isinstance(half_life_ms, bool) or not isinstance(half_life_ms, int) or half_life_ms <= 0:
            raise ValidationError("half_life_ms must be a positive int", field="half_life_ms")
        filters = FilterValues.of(session_ids, character_ids, date_range, roles)
        parsed = parse_query(query) if mode in ("keyword", "hybrid") else None
        return cls(
            query,
            mode,
            limit,
            float(threshold) if threshold is not None else None,
            parsed,
            filters,
            w,
            half_life_ms,
            now,
        )

    @property
    def limit_sql(self) -> tuple[str, list[Any]]:
        """The ``LIMIT`` clause of the final ranking and its parameter."""
        return ("LIMIT ?", [self.limit]) if self.limit is not None else ("", [])

    def now_ms(self) -> int:
        """The time recency is measured from."""
        return system_clock() if self.now is None else check_ms(self.now, "now")


# --------------------------------------------------------------------------- the pipeline

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
    q = SearchQuery.of(
        query,
        limit=limit,
        mode=mode,
        threshold=threshold,
        session_ids=session_ids,
        character_ids=character_ids,
        date_range=date_range,
        roles=roles,
        now=now,
        weights=weights,
        half_life_ms=half_life_ms,
    )
    if q.filters.empty:
        return []
    await index.setup()
    if q.mode == "substring":
        return await _substring(index, q)
    if q.mode == "keyword":
        return await _keyword(index, q)
    emb = default_embedder(index, embedder)
    plan = await _semantic_plan(index, q, emb)
    rank = _semantic if q.mode == "semantic" else _hybrid
    try:
        return await rank(index, q, plan)
    except QueryError:
        if plan.table == "embeddings":
            raise
        # the copy of the filtered vectors was dropped under this search (a write to the
        # embeddings let another search drop every copy): scan the table instead
        return await rank(index, q, await _semantic_plan(index, q, emb, copies=False))


# --------------------------------------------------------------------------- substring


async def _substring(index: SearchIndex, q: SearchQuery) -> list[SearchHit]:
    if q.threshold is not None and q.threshold > 1.0:
        return []
    flt = q.filters.over("m")
    lim_sql, lim_params = q.limit_sql
    rows = await index.execute(
        f"SELECT m.id FROM messages m WHERE strpos(lower(m.text), lower(?)) > 0 AND {flt.sql} "
        f"ORDER BY m.created_at DESC, m.id DESC {lim_sql}",
        [q.text] + flt.params + lim_params,
    )
    return [
        hit_from_row(r, 1.0, {"keyword": 1.0, "semantic": 0.0, "recency": 0.0})
        for r, _ in await fetch_ranked(index, rows)
    ]


# --------------------------------------------------------------------------- keyword


def _keyword_hits(found: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[SearchHit]:
    return [
        hit_from_row(
            r,
            float(k["score"]),
            {"keyword": float(k["score"]), "semantic": 0.0, "recency": 0.0, "bm25": float(k["score"])},
        )
        for r, k in found
    ]


async def _keyword(index: SearchIndex, q: SearchQuery) -> list[SearchHit]:
    """BM25: in Python over the postings where they are few (``scoring``), else one
    statement; a filtered query scores only the docs its filters admit."""
    pq, limit, thr = q.parsed, q.limit, q.threshold
    assert pq is not None
    stats = await index.bm25_stats()
    terms = await term_stats(index, pq)
    kflt = q.filters.over("d")
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
        return _keyword_hits(await fetch_ranked(index, ranked or []))
    kw_sql, params, required = bm25_sql(pq, stats, kflt, terms)
    conds = [f"k.req = {required}"] if required else []
    if thr is not None:
        conds.append("round(k.kw, 9) >= ?")
        params = params + [thr]
    where = f"WHERE {' AND '.join(conds)} " if conds else ""
    # a phrase is checked on the records of the ranked candidates, best first
    lim_kw, lim_kw_params = ("", []) if pq.phrases else q.limit_sql
    rows = await index.execute(
        f"SELECT k.message_id AS id, round(k.kw, 9) AS score FROM ({kw_sql}) k {where}"
        f"ORDER BY score DESC, k.created_at DESC, k.message_id DESC {lim_kw}",
        params + lim_kw_params,
    )
    found = await phrase_matches(index, pq, rows, limit) if pq.phrases else await fetch_ranked(index, rows)
    return _keyword_hits(found)


# --------------------------------------------------------------------------- semantic


@dataclass(frozen=True, slots=True)
class _SemanticPlan:
    """The semantic ranking of one search: the query's vector (a literal), its model, and
    the CTE ``sem`` that ranks the filtered vectors (with its parameters)."""

    vector: str
    model: str
    dimensions: int
    calibration: tuple[float, float]
    #: the CTE ``sem`` of a scan ("" when the approximate index ranked: see ``cte``)
    scan: str
    params: list[Any]
    #: the search's filters over ``embeddings e``
    filters: Filters
    #: ``(n, avgdl)`` of the index
    stats: tuple[int, float]
    #: the relation the vectors are read from: ``embeddings``, or the copy of the rows the
    #: filters admit (``partitions``)
    table: str = "embeddings"
    #: the rows the engine's approximate index found (``nearest``: one list per column
    #: ``message_id, created_at, sim, rsim``, best first), which ``cte`` holds; None: a scan
    found: list[list[Any]] | None = None

    @property
    def approximate(self) -> bool:
        """Whether the ranking is the approximate index's (``found``)."""
        return self.found is not None

    @property
    def cte(self) -> str:
        """The CTE ``sem``: the scan's, or the approximate index's rows as ``VALUES``, made
        only when a statement reads it (the fast paths rank ``found`` in Python)."""
        return self.scan if self.found is None else nearest_cte(self.found)


async def _semantic_plan(
    index: SearchIndex, q: SearchQuery, emb: Embedder, *, copies: bool = True
) -> _SemanticPlan:
    await index.embed_missing(emb)
    (raw,) = await emb.embed([q.text])
    vec = query_literal(raw)
    # filters, ranking and ties read only ``embeddings`` (it carries session_id, role and
    # created_at): a scan of the vectors and a top-k, no join over every candidate. The
    # model is selected by its integer key written into the SQL (a constant, not a bound
    # parameter), so that zone maps prove it for a table of one model and DuckDB skips it
    eflt = q.filters.over("e")
    # ``sim``: the message's own vector (scores, thresholds); ``rsim``: its in-context
    # vector when the embedder stores one (ranks), else the same
    # where the engine is in this thread the query vector is written into the statement
    # (see ``_fused_here``), else bound as a parameter
    local = index.in_thread
    stats = await index.bm25_stats()
    model = f"e.model_key = {model_key(emb.model)} AND e.dim = {int(emb.dimensions)}"
    where, params = model, list(eflt.params)
    table = "embeddings"
    if eflt.sql != "TRUE":
        where = f"{model} AND {eflt.sql}"
    if eflt.sql != "TRUE" and copies:
        # a filter scans a copy of the rows it admits where the index keeps one (``partitions``)
        part = await index.vector_table(where, params, stats[0])
        if part is not None:
            table, where, params = part, model, []
    qv = vector_sql(vec) if local else "CAST(? AS FLOAT[])"
    one = stats[0] >= embeddings.ONE_COSINE_FROM
    # the rows a page of results can come from: the semantic ranking's top ``limit`` (with
    # room for ties of the ranking cosine, ordered by the own cosine after it), the top
    # ``RRF_DEPTH`` for a fusion; every row for ``limit=None`` or a semantic threshold
    depth: int | None = None
    if q.mode == "semantic":
        if q.threshold is None and q.limit is not None:
            depth = int(q.limit) + 16
        top = f"ORDER BY rsim DESC, created_at DESC, message_id DESC LIMIT {depth}" if depth else ""
    else:
        if q.limit is not None:
            depth = max(RRF_DEPTH, int(q.limit))
        top = f"ORDER BY rsim DESC, message_id DESC LIMIT {depth}" if depth else ""
    if depth is not None:
        # over a large index: the engine's approximate index where it keeps one, the rows a
        # filter admits only
        found = await index.nearest(
            model_key(emb.model),
            int(emb.dimensions),
            unit_vector(raw),
            depth,
            stats[0],
            None if eflt.sql == "TRUE" else q.filters.nearest(),
        )
        if found is not None:
            return _SemanticPlan(
                vec,
                emb.model,
                int(emb.dimensions),
                calibration_of(emb),
                "",
                [],
                eflt,
                stats,
                found=found,
            )
    return _SemanticPlan(
        vec,
        emb.model,
        int(emb.dimensions),
        calibration_of(emb),
        semantic_ctes(qv, where, one_cosine=one, top=top, table=table),
        ([] if local else [vec]) + params,
        eflt,
        stats,
        table,
    )


def _semantic_hits(found: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[SearchHit]:
    return [
        hit_from_row(
            r,
            float(k["score"]),
            {"keyword": 0.0, "semantic": float(k["score"]), "recency": 0.0, "similarity": float(k["sim"])},
        )
        for r, k in found
    ]


async def _semantic(index: SearchIndex, q: SearchQuery, plan: _SemanticPlan) -> list[SearchHit]:
    if plan.found is not None:
        return _semantic_hits(await fetch_ranked(index, _ranked_here(q, plan, plan.found)))
    lo, hi = plan.calibration
    lim_sql, lim_params = q.limit_sql
    calibrated = "greatest(-1.0, least(1.0, (sem.sim - CAST(? AS DOUBLE)) / CAST(? AS DOUBLE)))"
    params = plan.params + [lo, hi - lo]
    outer = ""
    if q.threshold is not None:
        outer = "WHERE score >= ?"
        params.append(q.threshold)
    # a scan of a few thousand vectors is a small read (no thread hop on CPython)
    small = index.in_thread and plan.stats[0] <= scoring.WHOLE_DOCS
    rows = await (scoring.small_read(index) if small else index.execute)(
        f"WITH {plan.cte}\nSELECT * FROM (SELECT sem.message_id AS id, sem.created_at, "
        f"round({calibrated}, 9) AS score, round(sem.sim, 9) AS sim, sem.rsim FROM sem) {outer} "
        f"ORDER BY rsim DESC, score DESC, created_at DESC, id DESC {lim_sql}",
        params + lim_params,
    )
    return _semantic_hits(await fetch_ranked(index, rows))


def _ranked_here(q: SearchQuery, plan: _SemanticPlan, found: list[list[Any]]) -> list[dict[str, Any]]:
    """``_semantic``'s statement done here over the rows the approximate index found (no
    threshold there): the same calibrated scores, rounding, order and limit."""
    lo, hi = plan.calibration
    rows = []
    for mid, created, sim, rsim in zip(*found):
        if sim is None or rsim is None:
            continue  # a cosine that is not a number ranks nowhere
        score = round9(max(-1.0, min(1.0, (float(sim) - lo) / (hi - lo))))
        rows.append(
            {"id": mid, "created_at": created, "score": score, "sim": round9(float(sim)), "rsim": float(rsim)}
        )
    # ORDER BY rsim DESC, score DESC, created_at DESC (NULLS LAST), id DESC
    rows.sort(
        key=lambda r: (r["rsim"], r["score"], r["created_at"] is not None, r["created_at"] or 0, r["id"]),
        reverse=True,
    )
    return rows if q.limit is None else rows[: q.limit]


# --------------------------------------------------------------------------- hybrid


def _fused_hits(found: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[SearchHit]:
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
        for r, x in found
    ]


async def _phrase_ids(
    index: SearchIndex, pq: ParsedQuery, kw_flt: Filters, stats: tuple[int, float]
) -> list[str] | None:
    """The ids of the keyword candidates that hold every phrase (None: no phrase)."""
    if not pq.phrases:
        return None
    sql, params, required = bm25_sql(pq, stats, kw_flt, await term_stats(index, pq))
    rows = await index.execute(f"SELECT k.message_id AS id FROM ({sql}) k WHERE k.req = {required}", params)
    return [str(r["id"]) for _, r in await phrase_matches(index, pq, rows)]


async def _hybrid(index: SearchIndex, q: SearchQuery, plan: _SemanticPlan) -> list[SearchHit]:
    """One SQL statement: the keyword CTEs (the filters over ``docs d``), the semantic
    CTE ``sem`` (already filtered; it carries ``created_at``), ranks, fusion. Both rankings
    hold only messages that pass the filters, so the fused rows need no join."""
    pq = q.parsed
    assert pq is not None
    stats, w, thr = plan.stats, q.weights, q.threshold
    kw_flt = q.filters.over("d")
    now_ms = q.now_ms()
    terms = await term_stats(index, pq)
    # fused here where statements are cheap (an engine in this thread: CPython); in the
    # page every statement is a round trip to the engine's worker, and the one statement
    # below answers sooner
    # (and wherever the approximate index found the semantic list: no statement is left to save)
    if (
        (index.in_thread or plan.approximate)
        and terms is not None
        and q.limit is not None
        and not pq.phrases
        and postings_needed(pq, terms) <= scoring.PY_POSTINGS
    ):
        return await _fused_here(index, q, plan, terms, q.limit, now_ms)
    if terms is not None:
        # the term-id form keyword search uses: postings by term id, no per-term unions
        kw_sql, cparams, required = bm25_sql(pq, stats, kw_flt, terms)
        ctes = f"kw AS ({kw_sql})"
    else:
        ctes, cparams, required = bm25_ctes(pq, kw_flt, stats)
    phrase, pparams = phrase_sql(await _phrase_ids(index, pq, kw_flt, stats))
    kwf = (
        "kwf AS (SELECT kw.message_id, kw.kw, kw.created_at FROM kw "
        + f"WHERE kw.req = {required}"
        + (f" AND {phrase}" if phrase else "")
        + ")"
    )
    k = float(RRF_K)
    # each ranking read to its top RRF_DEPTH (more when the caller wants more), all of it for limit=None
    depth = f"LIMIT {max(RRF_DEPTH, int(q.limit))}" if q.limit is not None else ""
    inner = (
        f"WITH {ctes},\n{kwf},\n{plan.cte},\n"
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
        + plan.params
        + [w["keyword"], w["semantic"], w["recency"], now_ms, float(q.half_life_ms)]
    )
    outer_where = ""
    if thr is not None:
        outer_where = "WHERE round(p_kw + p_sem + p_rec, 9) >= ?"
        params.append(thr)
    lim_sql, lim_params = q.limit_sql
    rows = await index.execute(
        f"SELECT *, round(p_kw + p_sem + p_rec, 9) AS score FROM ({inner}) {outer_where} "
        f"ORDER BY score DESC, created_at DESC, id DESC {lim_sql}",
        params + lim_params,
    )
    return _fused_hits(await fetch_ranked(index, rows))


async def _fused_here(
    index: SearchIndex,
    q: SearchQuery,
    plan: _SemanticPlan,
    terms: Mapping[str, tuple[int, int]],
    limit: int,
    now_ms: int,
) -> list[SearchHit]:
    """``_hybrid`` without phrases, for a query with few postings: the keyword list scored
    in Python (``scoring``; narrowed to the docs the filters admit), the semantic list one
    statement (``_scanned_list``) or the approximate index's rows, fused here with the arithmetic of the SQL form (same ranks, scores and
    order)."""
    pq, stats = q.parsed, plan.stats
    assert pq is not None
    kw_flt = q.filters.over("d")
    narrow = kw_flt.sql != "TRUE"
    depth = max(RRF_DEPTH, limit)
    weights, required = term_weights(pq, stats, terms)
    kws = (
        await keyword_ranking(index, weights, required, stats, depth, kw_flt if narrow else None)
        if weights is not None
        else []
    )
    sem = (
        _semantic_list(plan.found)
        if plan.found is not None
        else await _scanned_list(index, plan, narrow, depth)
    )
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
    w = q.weights
    wk, ws, wr, hl = w["keyword"], w["semantic"], w["recency"], float(q.half_life_ms)
    # (unrounded score, message_id, parts): rounding is monotone, so only the candidates
    # near or above the ``limit``-th best sum are rounded and ordered
    raw = []
    for mid, e in c.items():
        kw, kr, sim, sr, created = e
        p_kw = wk * ((k + 1) / (k + kr) if kr else 0.0)
        p_sem = ws * ((k + 1) / (k + sr) if sr else 0.0)
        p_rec = wr * 0.5 ** (max(now_ms - created, 0) / hl)
        raw.append((p_kw + p_sem + p_rec, mid, p_kw, p_sem, p_rec))
    if q.threshold is not None:
        thr = q.threshold
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
    return _fused_hits(await fetch_ranked(index, out[:limit]))


def _semantic_list(found: list[list[Any]]) -> list[dict[str, Any]]:
    """The approximate index's rows as ``_scanned_list`` gives a scan's."""
    return [{"message_id": m, "created_at": c, "sim": s} for m, c, s, r in zip(*found) if s is not None]


async def _scanned_list(
    index: SearchIndex, plan: _SemanticPlan, narrow: bool, depth: int
) -> list[dict[str, Any]]:
    """The semantic list of ``_fused_here``: the top ``depth`` rows by the in-context cosine
    (the own one where there is none), with the own cosine (``sim``). Both cosines are made
    in the scan: carrying the top rows' vectors through the sort to compute the own cosine
    after it cost more."""
    stats = plan.stats
    # a scan of a few thousand vectors is a small read (no thread hop on CPython)
    run = scoring.small_read(index) if stats[0] <= scoring.WHOLE_DOCS else index.execute
    # the model by its integer key written into the SQL (zone maps skip the filter, see
    # ``_semantic_plan``); each vector row carries its message's time. The query vector is
    # written in as text: a statement without parameters skips the duckdb package's
    # per-parameter probing, and DuckDB parses the same text either way
    where = f"e.model_key = {model_key(plan.model)} AND e.dim = {plan.dimensions}"
    sem_params: list[Any] = []
    if narrow and plan.table == "embeddings":
        where += f" AND {plan.filters.sql}"
        sem_params = list(plan.filters.params)
    if stats[0] >= embeddings.ONE_COSINE_FROM:
        # a large index: the scan computes the ranking cosine alone (see ``semantic_ctes``)
        ctes = semantic_ctes(
            vector_sql(plan.vector),
            where,
            one_cosine=True,
            top=f"ORDER BY rsim DESC, message_id DESC LIMIT {depth}",
            table=plan.table,
        )
        sql = f"WITH {ctes}\nSELECT message_id, created_at, sim FROM sem ORDER BY rsim DESC, message_id DESC"
    else:
        sql = (
            f"WITH q AS (SELECT {vector_sql(plan.vector)} AS v),\n"
            f"s AS (SELECT e.message_id, e.created_at, {cosine_sql()} AS sim, "
            f"{cosine_sql(context=True)} AS csim FROM {plan.table} e CROSS JOIN q WHERE {where})\n"
            "SELECT message_id, created_at, sim FROM s "
            f"ORDER BY coalesce(csim, sim) DESC, message_id DESC LIMIT {depth}"
        )
    return await run(sql, sem_params) if sem_params else await run(sql)
