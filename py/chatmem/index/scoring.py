"""BM25 of a small keyword query scored in Python from its postings.

The index knows each query term's id and document frequency before any
statement runs (``KeywordFigures``), so it knows how many postings a query
touches. When that is at most ``py_postings(index)``, one light statement reads those
postings (``tid, doc, tf``; each doc's length ``dl`` from the docs the index keeps,
``doctable.DocTable``, else joined from ``docs``) and the BM25 sums are made here: a DuckDB
statement that scores and ranks costs several times more to plan than to run
over a few thousand rows. Larger queries are scored in SQL (``hits.top_sql``,
``hits.bm25_sql``), unless every term's postings are kept in Python (``kept``: the
rarest terms', ``figures.RarePostings``, or those a search read): then no statement
runs at all.

Both scorers use the same weights (``term_weights``: one idf per term, the
same constants) and the same arithmetic in the same order, and round as
DuckDB's ``round(x, 9)`` does (``round9``), so they rank and score alike
(``tests/unit/test_scoring.py`` holds them to identical results).

A filtered search is scored the same way, over the docs its filters admit only
(``admitted``: every doc the filter admits, judged by one statement and kept per
filter until a session changes; after an append, the new docs alone are judged).
So a filter costs what its query's postings cost, not a scan of the index.

The doc numbers of the winners are turned into message ids and times through
``KeywordFigures.docs`` (read from ``docs`` once, then kept until the figures
are forgotten). Nothing here is durable.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from typing import Any, Awaitable, Callable, Protocol

from ..text.tokenize import ParsedQuery
from .protocols import SearchIndex

__all__ = [
    "B",
    "K1",
    "admitted",
    "filtered_postings",
    "PY_POSTINGS",
    "PY_POSTINGS_WORKER",
    "WHOLE_DOCS",
    "doc_meta",
    "idf",
    "kept",
    "postings_needed",
    "py_postings",
    "py_scores",
    "round9",
    "small_read",
    "term_weights",
    "top_docs",
    "vector_sql",
]

K1, B = 1.2, 0.75

#: queries touching at most this many postings are scored in Python (engine in this thread)
PY_POSTINGS = 4096
#: the same where the engine is in a worker (the page): the postings cross as JSON and
#: Pyodide scores them several times slower than CPython; measured in Chromium at 20,000
#: messages, the two scorers cost the same at 1,000-2,000 postings and Python 1.7-1.9x
#: the SQL at 2,000-4,096
PY_POSTINGS_WORKER = 1024
#: indexes of at most this many docs have them all read at the first search that needs one
WHOLE_DOCS = 20_000
#: postings (about: the total of document lengths) up to which one ``tid IN (...)`` scan
#: is cheapest; past it each term is read by its own ``tid = ?`` scan (zone maps skip to it)
_ONE_SCAN = 250_000


def small_read(index: SearchIndex) -> Callable[..., Awaitable[list[dict[str, Any]]]]:
    """The index's ``execute`` for a small read (no thread hop on CPython)."""
    return index.execute_small


async def small_rows(index: SearchIndex, sql: str) -> Iterable[tuple[Any, ...]]:
    """A small read's rows as tuples in select order: from the column lists where the
    engine answers column by column (the page's: no dict per row, which cost 3-15 ms of
    the main thread for 2,000 rows), else from ``small_read``'s dicts."""
    if index.columnar:
        return zip(*await index.execute_columns(sql))
    return (tuple(r.values()) for r in await small_read(index)(sql))


def py_postings(index: SearchIndex, docs: int = 0) -> int:
    """Up to how many postings a keyword query on ``index`` (of ``docs`` docs) is scored
    in Python. In the page the statement that scores joins ``docs`` for the lengths, a
    scan that grows with the index, while Python reads the lengths from the ``DocTable``
    it keeps: one posting per 25 docs, from ``PY_POSTINGS_WORKER`` up to ``PY_POSTINGS``.
    Measured in the page at 1,024-4,096 postings: Python 16-17 ms, SQL 24 ms at 100,000
    docs; 23 against 47 ms at 1,000,000 (and 59 against 48 ms at 4,096-16,384)."""
    if index.in_thread:
        return PY_POSTINGS
    cut = PY_POSTINGS_WORKER
    if index.doc_lengths is not None:
        cut = max(cut, docs // 25)
    return min(PY_POSTINGS, cut)


#: how many times ``py_postings`` a filtered query may read, at most
FILTERED_POSTINGS_GROWTH = 8


def filtered_postings(index: SearchIndex, docs: int, admitted: int) -> int:
    """``py_postings`` for a filtered query whose filters admit ``admitted`` of the index's
    ``docs`` docs: the postings are read whole (and kept), but only the admitted docs are
    scored, so the budget grows by ``docs / admitted``, up to ``FILTERED_POSTINGS_GROWTH`` times."""
    growth = min(FILTERED_POSTINGS_GROWTH, docs / max(admitted, 1))
    return int(py_postings(index, docs) * max(growth, 1.0))


def kept(index: SearchIndex, weights: list[tuple[int, float, bool]]) -> bool:
    """Whether every term of ``weights`` has its postings kept in Python (the rare
    terms', with the doc lengths, or those a search read): scored with no statement."""
    have = index.postings_cache
    rare = index.rare_postings if index.doc_lengths is not None else None
    return all(t in have or (rare is not None and t in rare) for t, _, _ in weights)


def vector_sql(literal: str) -> str:
    """SQL for a query vector given as ``embeddings.query_literal`` text (digits, signs, dots,
    commas, brackets): a ``FLOAT[]`` constant, the text quoted as a SQL string."""
    return "CAST('" + literal.replace("'", "''") + "' AS FLOAT[])"


def round9(x: float) -> float:
    """``round(x, 9)`` as DuckDB computes it for a DOUBLE (``std::round(x * 1e9) / 1e9``,
    halves away from zero), not Python's correctly rounded ``round``."""
    v = x * 1e9
    r = math.floor(abs(v))
    if abs(v) - r >= 0.5:
        r += 1
    return math.copysign(r, v) / 1e9


def idf(n: int, df: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def term_weights(
    pq: ParsedQuery, stats: tuple[int, float], terms: Mapping[str, tuple[int, int]]
) -> tuple[list[tuple[int, float, bool]] | None, int]:
    """``([(tid, idf, required)], number of required terms)`` of the query's indexed
    terms, in query order; None when nothing can match (a required term is not indexed,
    or no term is)."""
    req_values = list(dict.fromkeys(t.value for t in pq.required))
    if any(v not in terms for v in req_values):
        return None, len(req_values)
    req = set(req_values)
    n, _ = stats
    out = []
    for v in dict.fromkeys(t.value for t in pq.all_terms):
        if v in terms:
            tid, df = terms[v]
            out.append((int(tid), idf(n, df), v in req))
    return (out or None), len(req_values)


def postings_needed(pq: ParsedQuery, terms: Mapping[str, tuple[int, int]]) -> int:
    """How many postings the query's terms have (the sum of their df)."""
    return sum(terms[v][1] for v in dict.fromkeys(t.value for t in pq.all_terms) if v in terms)


async def py_scores(
    index: SearchIndex,
    weights: list[tuple[int, float, bool]],
    stats: tuple[int, float],
    total: int,
    allowed: set[int] | None = None,
) -> dict[int, tuple[float, int]]:
    """``{doc: (BM25 sum, required terms held)}`` of every doc holding a query term (of
    ``allowed``, when given), from the postings the index keeps and one read of the
    others. ``total``: the postings table's size (about)."""
    tids = [t for t, _, _ in weights]
    have = index.postings_cache
    table = index.doc_lengths
    rare = index.rare_postings if table is not None else None
    by_tid: dict[int, list[tuple[int, int, int]]] = {t: have[t] for t in tids if t in have}
    if rare and table is not None:  # kept as docs and term frequencies: lengths from the table
        lens = table.lens
        for t in tids:
            pair = rare.get(t) if t not in by_tid else None
            if pair is not None:
                try:
                    got = [(d, tf, lens[d]) for d, tf in zip(*pair)]
                except IndexError:  # a doc the table does not have (not expected): read them
                    continue
                if got and min(dl for _, _, dl in got) >= 0:
                    by_tid[t] = got
    missing = [t for t in tids if t not in by_tid]
    if missing:
        read = await _read_postings(index, missing, total)
        by_tid.update(read)
        index.remember_postings(read)
    _, avgdl = stats
    k, c1, c2 = K1 + 1, K1 * (1 - B), K1 * B / avgdl
    out: dict[int, tuple[float, int]] = {}
    for tid, w, required in weights:  # summed in query order, as the SQL's UNION ALL
        inc = 1 if required else 0
        for d, tf, dl in by_tid[tid]:
            if allowed is not None and d not in allowed:
                continue
            s = w * tf * k / (tf + c1 + c2 * dl)
            prev = out.get(d)
            out[d] = (s, inc) if prev is None else (prev[0] + s, prev[1] + inc)
    return out


async def _read_postings(
    index: SearchIndex, tids: list[int], total: int
) -> dict[int, list[tuple[int, int, int]]]:
    """``{tid: [(doc, tf, dl)]}`` of the terms ``tids``: the lengths from the index's
    ``DocTable`` when it keeps every doc, else joined from ``docs`` in the statement."""
    table = index.doc_lengths
    read: dict[int, list[tuple[int, int, int]]] = {t: [] for t in tids}
    if table is not None:
        rows = await small_rows(index, _postings_sql(tids, total, lengths=False))
        # a posting's doc is in the table (a delete, which removes postings, forgets the table)
        lens = table.lens
        try:
            for tid, d, tf in rows:
                dl = lens[d]
                if dl < 0:
                    raise IndexError(d)
                read[tid].append((d, tf, dl))
            return read
        except IndexError:  # a doc the table does not have (not expected): join instead
            read = {t: [] for t in tids}
    for tid, d, tf, dl in await small_rows(index, _postings_sql(tids, total, lengths=True)):
        read[tid].append((d, tf, dl))
    return read


def _postings_sql(tids: list[int], total: int, *, lengths: bool) -> str:
    """The postings of ``tids`` (``tid, doc, tf``, with ``lengths`` each doc's ``dl``
    joined from ``docs``): one scan of the table while it is small, else one
    zone-map-skipping scan per term."""
    cols, src = "p.tid, p.doc, p.tf", "postings p"
    if lengths:
        cols, src = cols + ", d.doc_len AS dl", src + " JOIN docs d ON d.doc = p.doc"
    if total <= _ONE_SCAN:
        return f"SELECT {cols} FROM {src} WHERE p.tid IN ({', '.join(str(t) for t in tids)})"
    return " UNION ALL ".join(f"SELECT {cols} FROM {src} WHERE p.tid = {t}" for t in tids)


async def doc_meta(index: SearchIndex, docs: list[int]) -> dict[int, tuple[str, int]]:
    """``{doc: (message_id, created_at)}``: from the index's kept figures (every doc,
    once read in the background, see ``doctable.DocTable``), reading ``docs`` only for
    those it has not seen (all of them at once, the first time, while the index holds
    at most ``WHOLE_DOCS`` docs)."""
    known = index.doc_cache
    out: dict[int, tuple[str, int]] = {}
    missing = []
    for d in docs:
        v = known.get(d)
        if v is None:
            missing.append(d)
        else:
            out[d] = (v[0], v[1])
    if not missing:
        return out
    whole = not known and index.keeps_docs and (await index.bm25_stats())[0] <= WHOLE_DOCS
    sql = "SELECT doc, message_id, created_at, doc_len FROM docs"
    if not whole:
        sql += f" WHERE doc IN ({', '.join(str(int(d)) for d in missing)})"
    got = {int(d): (str(m), int(c), int(n)) for d, m, c, n in await small_rows(index, sql)}
    index.remember_docs(got)
    out.update((d, (got[d][0], got[d][1])) for d in missing if d in got)
    return {d: out[d] for d in docs if d in out}


class Filters(Protocol):
    """Search filters as SQL over ``docs d`` (``hits.Filters``): ``"TRUE"`` for none."""

    @property
    def sql(self) -> str: ...

    @property
    def params(self) -> list[Any]: ...


async def admitted(index: SearchIndex, flt: Filters, n_docs: int) -> set[int]:
    """Every doc of the index the filters ``flt`` admit (``n_docs``: how many docs it
    holds): kept per filter until a session changes; after an append, one statement
    judges the new docs only."""
    store = index.verdicts
    key = (flt.sql, tuple(flt.params))
    epoch = store.verdict_epoch
    n, upto, docs = store.verdicts.get(key, (-1, 0, set()))
    if n == n_docs:
        return docs
    rows = await small_read(index)(
        "SELECT max(d.doc) AS top, list(d.doc) FILTER (WHERE " + flt.sql + ") AS ok "
        f"FROM docs d WHERE d.doc >= {int(upto)}",
        list(flt.params),
    )
    top, ok = (rows[0]["top"], rows[0]["ok"]) if rows else (None, None)
    docs = docs | {int(d) for d in ok or ()}
    store.remember_verdicts(key, epoch, (n_docs, upto if top is None else int(top) + 1, docs))
    return docs


async def _filtered_scores(
    index: SearchIndex,
    weights: list[tuple[int, float, bool]],
    stats: tuple[int, float],
    flt: Filters | None,
) -> dict[int, tuple[float, int]]:
    """``py_scores`` of the docs ``flt`` admits (of every doc without filters)."""
    n, avgdl = stats
    allowed = await admitted(index, flt, int(n)) if flt is not None and flt.sql != "TRUE" else None
    return await py_scores(index, weights, stats, int(n * avgdl), allowed)


def top_docs(
    scored: Mapping[int, tuple[float, int]],
    required: int,
    limit: int,
    threshold: float | None,
    *,
    rounded: bool,
) -> list[tuple[float, int]]:
    """``(score, doc)`` of the docs holding every required term (and scoring at least
    ``threshold``) whose score is at least the ``limit``-th best: the top ``limit`` and
    everything tied with its last (ties are ordered by the caller). ``rounded``:
    scores are ``round9`` of the sums (else the raw sums)."""
    cand = [(kw, d) for d, (kw, req) in scored.items() if req == required]
    if threshold is not None:
        cand = [c for c in cand if round9(c[0]) >= threshold]
    if len(cand) > limit:
        # round9 is monotone: the limit-th best rounded score is the rounded limit-th best sum
        cut = heapq.nlargest(limit, (kw for kw, _ in cand))[-1]
        if rounded:
            low = round9(cut)
            cand = [c for c in cand if c[0] >= low - 1e-9 and round9(c[0]) >= low]
        else:
            cand = [c for c in cand if c[0] >= cut]
    return [(round9(kw), d) for kw, d in cand] if rounded else cand


async def keyword_top(
    index: SearchIndex,
    weights: list[tuple[int, float, bool]],
    required: int,
    stats: tuple[int, float],
    limit: int,
    threshold: float | None,
    flt: Filters | None = None,
) -> list[dict[str, Any]]:
    """What ``hits.top_sql`` + ``hits.rank_top`` answer, scored here: ``{id, score,
    created_at}`` of the best ``limit`` docs (of those ``flt`` admits), by score, then
    newest, then id."""
    scored = await _filtered_scores(index, weights, stats, flt)
    top = top_docs(scored, required, limit, threshold, rounded=True)
    meta = await doc_meta(index, [d for _, d in top])
    rows = [{"id": meta[d][0], "score": s, "created_at": meta[d][1]} for s, d in top if d in meta]
    rows.sort(key=lambda r: (r["score"], r["created_at"], r["id"]), reverse=True)
    return rows[:limit]


async def keyword_ranking(
    index: SearchIndex,
    weights: list[tuple[int, float, bool]],
    required: int,
    stats: tuple[int, float],
    depth: int,
    flt: Filters | None = None,
) -> list[tuple[str, float, int]]:
    """``(message_id, BM25 sum, created_at)`` of the best ``depth`` docs holding every
    required term (of those ``flt`` admits), by the raw sum, then id (both descending):
    the keyword list of RRF."""
    scored = await _filtered_scores(index, weights, stats, flt)
    top = top_docs(scored, required, depth, None, rounded=False)
    meta = await doc_meta(index, [d for _, d in top])
    rows = [(meta[d][0], s, meta[d][1]) for s, d in top if d in meta]
    rows.sort(key=lambda r: (r[1], r[0]), reverse=True)
    return rows[:depth]
