"""``search``: ranked keyword (BM25), semantic, hybrid and substring search over a ``QueryIndex``.

Every mode is one SQL statement with bound parameters (one round trip to the
engine, which matters in the browser), plus at most one embedding of the query.

- ``keyword``: BM25 (k1=1.2, b=0.75) over the inverted index. Bare words are
  alternatives (a message with more, and rarer, query words ranks higher);
  ``"quoted phrases"`` must occur exactly (their words are required and the
  phrase is checked against the normalised text). ``score`` is the BM25 sum.
- ``semantic``: cosine similarity between the query's vector and the stored
  vectors of the embedder's model (``list_cosine_similarity``, brute force).
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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError
from ..ids import system_clock
from ..models import ROLES, ChatMessage
from .embed import Embedder, calibration_of, context_model, vector_literal
from .schema import MESSAGE_COLUMNS, row_to_message_record
from .tokenize import ParsedQuery, parse_query, phrase_pattern

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
K1, B = 1.2, 0.75
DAY_MS = 86_400_000
DEFAULT_WEIGHTS: dict[str, float] = {"keyword": 0.5, "semantic": 0.5, "recency": 0.0}
_MAX_LIMIT = 10_000
_CJK_MAX = "\U0010ffff"
_FETCH_SIZES = (5, 10, 20, 50, 100, 200, 500, 1000)
#: what a hit's message needs (not the derived ``text``)
_RECORD_COLUMNS = ", ".join(c for c, _, key in MESSAGE_COLUMNS if key)


@dataclass(slots=True)
class SearchHit:
    """One result: the message, its session, its score and the parts of that score.

    ``breakdown`` has ``keyword``, ``semantic`` and ``recency`` (the weighted
    parts, summing to ``score``), plus the raw ``bm25`` and ``similarity``
    where the mode computed them.
    """

    message: ChatMessage
    session_id: str
    score: float
    breakdown: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- validation


def _id_list(v: Any, name: str) -> list[str] | None:
    if v is None:
        return None
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        raise ValidationError(f"{name} must be a list of strings", field=name)
    out = list(v)
    if not all(isinstance(x, str) for x in out):
        raise ValidationError(f"{name} must be a list of strings", field=name)
    return out


def _int(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValidationError(f"{name} must be an int (ms since the epoch)", field=name)
    return v


@dataclass(slots=True)
class Filters:
    """The WHERE clause (over alias ``m`` of ``messages``) and its parameters."""

    sql: str
    params: list[Any]
    empty: bool  # some filter list was empty: nothing can match


def build_filters(
    session_ids: Any = None, character_ids: Any = None, date_range: Any = None, roles: Any = None,
    *, alias: str = "m",
) -> Filters:
    """Validate the filters and turn them into SQL over ``alias`` (any relation with
    ``session_id``, ``role`` and ``created_at``). Raises ``ValidationError``."""
    conds: list[str] = []
    params: list[Any] = []
    empty = False
    sids = _id_list(session_ids, "session_ids")
    cids = _id_list(character_ids, "character_ids")
    rls = _id_list(roles, "roles")
    if rls is not None:
        bad = [r for r in rls if r not in ROLES]
        if bad:
            raise ValidationError(f"unknown role {bad[0]!r}; roles are {sorted(ROLES)}", field="roles")
    a = alias
    for ids, sql in (
        (sids, a + ".session_id IN ({})"),
        (cids, a + ".session_id IN (SELECT session_id FROM sessions WHERE character_id IN ({}))"),
        (rls, a + ".role IN ({})"),
    ):
        if ids is None:
            continue
        if not ids:
            empty = True
            continue
        uniq = list(dict.fromkeys(ids))
        conds.append(sql.format(", ".join("?" for _ in uniq)))
        params.extend(uniq)
    if date_range is not None:
        if isinstance(date_range, (str, bytes)) or not isinstance(date_range, Sequence) or len(date_range) != 2:
            raise ValidationError("date_range must be a (start_ms, end_ms) pair", field="date_range")
        start, end = date_range
        if start is not None:
            conds.append(f"{a}.created_at >= ?")
            params.append(_int(start, "date_range"))
        if end is not None:
            conds.append(f"{a}.created_at <= ?")
            params.append(_int(end, "date_range"))
        if start is not None and end is not None and start > end:
            raise ValidationError("date_range start is after its end", field="date_range")
    return Filters(" AND ".join(conds) if conds else "TRUE", params, empty)


# --------------------------------------------------------------------------- SQL pieces


def _stats_params(stats: tuple[int, float]) -> list[Any]:
    """``n`` and the two constants of BM25's length normalisation, ``k1(1-b)`` and ``k1 b / avgdl``."""
    n, avgdl = stats
    return [int(n), K1 * (1 - B), K1 * B / avgdl]


#: the BM25 weight of one posting ``p`` of a term whose ``w.df`` is known; binds n, c1, c2
_WEIGHT = ("ln(1 + (CAST(? AS BIGINT) - w.df + 0.5) / (w.df + 0.5)) * p.tf * " + str(K1 + 1)
           + " / (p.tf + CAST(? AS DOUBLE) + CAST(? AS DOUBLE) * p.doc_len)")


def bm25_sql(pq: ParsedQuery, stats: tuple[int, float], flt: Filters | None = None) -> tuple[str, list[Any], int]:
    """One ``SELECT`` of ``(message_id, kw, req, created_at)``: the BM25 score of every
    message holding a query term and passing the filters (``flt`` over alias ``d``
    of ``docs``), how many of the required terms it holds, and its time.

    The query's terms are read in one ``term IN (...)`` over the ART-indexed,
    term-sorted ``postings``, joined to their ``terms.df``; the document count
    and mean length are ``stats`` (the index's cached ``stats`` row). Never
    reads ``messages``. A one-character CJK term (a term prefix) takes
    ``bm25_ctes``. Returns (sql, params, number of required terms).
    """
    terms = pq.all_terms
    if any(t.prefix for t in terms):
        ctes, params, required = bm25_ctes(pq, flt, stats)
        return f"WITH {ctes}\nSELECT * FROM kw", params, required
    values = [t.value for t in terms]
    req_values = list(dict.fromkeys(t.value for t in pq.required))
    marks = ", ".join("?" for _ in values)
    if req_values:
        req = f"count(*) FILTER (WHERE p.term IN ({', '.join('?' for _ in req_values)}))"
    else:
        req = "0"
    flt = flt or Filters("TRUE", [], False)
    where = f" AND p.message_id IN (SELECT d.message_id FROM docs d WHERE {flt.sql})" if flt.sql != "TRUE" else ""
    sql = (f"SELECT p.message_id, sum({_WEIGHT}) AS kw, {req} AS req, max(p.created_at) AS created_at "
           f"FROM postings p JOIN terms w ON w.term = p.term "
           f"WHERE p.term IN ({marks}) AND w.term IN ({marks}){where} GROUP BY p.message_id")
    return sql, _stats_params(stats) + req_values + values + values + flt.params, len(req_values)


def bm25_ctes(pq: ParsedQuery, flt: Filters | None = None,
              stats: tuple[int, float] | None = None) -> tuple[str, list[Any], int]:
    """CTEs ending in ``kw(message_id, kw, req, created_at)``, the general form of
    ``bm25_sql`` that also answers one-character CJK terms (a term range whose
    document frequency is the number of distinct messages in it). Without
    ``stats`` the ``stats`` table is read in the query.
    Returns (sql, params, number of required terms).
    """
    terms = pq.all_terms
    required = len(dict.fromkeys(pq.required))
    hits: list[str] = []
    dfs: list[str] = []
    hparams: list[Any] = []
    dparams: list[Any] = []
    for i, t in enumerate(terms):
        if t.prefix:
            # several index terms answer one query term: add their frequencies first
            hits.append(f"SELECT {i} AS qi, message_id, sum(tf) AS tf, min(doc_len) AS doc_len, "
                        "min(created_at) AS created_at FROM postings WHERE term >= ? AND term <= ? "
                        "GROUP BY message_id")
            hparams.extend([t.value, t.value + _CJK_MAX])
            dfs.append(f"SELECT {i} AS qi, count(*) AS df FROM h WHERE qi = {i}")
        else:
            hits.append(f"SELECT {i} AS qi, message_id, tf, doc_len, created_at FROM postings WHERE term = ?")
            hparams.append(t.value)
            dfs.append(f"SELECT {i} AS qi, df FROM terms WHERE term = ?")
            dparams.append(t.value)
    flt = flt or Filters("TRUE", [], False)
    where = f"WHERE p.message_id IN (SELECT d.message_id FROM docs d WHERE {flt.sql})" if flt.sql != "TRUE" else ""
    if stats is None:
        st = ("st AS (SELECT CAST(n AS BIGINT) AS n, CAST(greatest(total::DOUBLE / greatest(n, 1), 1e-9) AS DOUBLE) "
              "AS avgdl FROM stats),\n")
        weight = (f"ln(1 + (st.n - w.df + 0.5) / (w.df + 0.5)) * p.tf * {K1 + 1} / "
                  f"(p.tf + {K1 * (1 - B)} + {K1 * B} / st.avgdl * p.doc_len)")
        join, sparams = " CROSS JOIN st", []
    else:
        st, weight, join, sparams = "", _WEIGHT, "", _stats_params(stats)
    sql = f"""
{st}h AS ({' UNION ALL '.join(hits)}),
f AS ({' UNION ALL '.join(dfs)}),
kw AS (
  SELECT p.message_id, sum({weight}) AS kw, count(*) FILTER (WHERE p.qi < {required}) AS req,
         max(p.created_at) AS created_at
  FROM h p JOIN f w ON w.qi = p.qi{join} {where}
  GROUP BY p.message_id
)"""
    return sql, hparams + dparams + sparams + flt.params, required


def _phrase_sql(pq: ParsedQuery) -> tuple[str, list[Any]]:
    if not pq.phrases:
        return "", []
    conds = " AND ".join("contains(d.norm_text, ?)" for _ in pq.phrases)
    return conds, [phrase_pattern(p) for p in pq.phrases]


def hit_from_row(row: Mapping[str, Any], score: float, breakdown: dict[str, float]) -> SearchHit:
    msg = ChatMessage.from_record(row_to_message_record(row))
    return SearchHit(msg, msg.session_id, score, breakdown)


async def _fetch(index: Any, rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Full message rows for ranked light rows (``id`` first), in rank order.

    Ranking reads only light columns; the heavy ones (content, text...) are read
    here for the few winners through the ART index on ``messages.id``.
    """
    if not rows:
        return []
    ids = [r["id"] for r in rows]
    size = next((n for n in _FETCH_SIZES if n >= len(ids)), len(ids))
    padded = ids + [ids[0]] * (size - len(ids))  # one prepared statement per size class
    full = await index.execute(
        f"SELECT {_RECORD_COLUMNS} FROM messages WHERE id IN ({', '.join('?' for _ in padded)})", padded
    )
    by_id = {r["id"]: r for r in full}
    return [(by_id[r["id"]], r) for r in rows if r["id"] in by_id]


async def _bm25_stats(index: Any) -> tuple[int, float]:
    """``(n, avgdl)``: the index's cached figures, or read from ``stats``."""
    fn = getattr(index, "bm25_stats", None)
    if fn is not None:
        return await fn()  # type: ignore[no-any-return]
    rows = await index.execute("SELECT n, total FROM stats")
    n, total = (int(rows[0]["n"]), int(rows[0]["total"])) if rows else (0, 0)
    return n, max(total / max(n, 1), 1e-9)


def default_embedder(index: Any, embedder: Embedder | None) -> Embedder:
    """The embedder given, else the index's, else the local default (the static
    model when it is available, else ``HashingEmbedder``)."""
    from ..embedding.local import default_embedder as local

    return embedder or getattr(index, "embedder", None) or local()


async def _query_vector(index: Any, embedder: Embedder, query: str) -> str:
    await index.embed_missing(embedder)
    (vec,) = await embedder.embed([query])
    return vector_literal(vec)


# --------------------------------------------------------------------------- search


async def search(
    index: Any,
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
        raise ValidationError(f"mode must be one of {MODES}, got {mode!r}", field="mode")
    if not isinstance(query, str):
        raise ValidationError("query must be a string", field="query")
    if not query.strip():
        raise ValidationError("query is empty", field="query")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= _MAX_LIMIT):
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
        return [hit_from_row(r, 1.0, {"keyword": 1.0, "semantic": 0.0, "recency": 0.0})
                for r, _ in await _fetch(index, rows)]

    if mode == "keyword":
        assert pq is not None
        stats = await _bm25_stats(index)
        kw_sql, params, required = bm25_sql(
            pq, stats, build_filters(session_ids, character_ids, date_range, roles, alias="d"))
        phrase, pparams = _phrase_sql(pq)
        join = "JOIN docs d ON d.message_id = k.message_id" if phrase else ""
        conds = [f"k.req = {required}"] + ([phrase] if phrase else [])
        params = params + pparams
        if thr is not None:
            conds.append("round(k.kw, 9) >= ?")
            params.append(thr)
        rows = await index.execute(
            f"SELECT k.message_id AS id, round(k.kw, 9) AS score FROM ({kw_sql}) k {join} "
            f"WHERE {' AND '.join(conds)} ORDER BY score DESC, k.created_at DESC, k.message_id DESC {lim_sql}",
            params + lim_params,
        )
        return [
            hit_from_row(r, float(k["score"]), {"keyword": float(k["score"]), "semantic": 0.0, "recency": 0.0,
                                        "bm25": float(k["score"])})
            for r, k in await _fetch(index, rows)
        ]

    emb = default_embedder(index, embedder)
    vec = await _query_vector(index, emb, query)
    lo, hi = calibration_of(emb)
    # hybrid ranks within the filtered messages (RRF compares ranks); semantic filters outside
    sflt = build_filters(session_ids, character_ids, date_range, roles, alias="sm")
    sem_join = mode == "hybrid" and sflt.sql != "TRUE"
    # ``sim``: the message's own vector (scores, thresholds); ``rsim``: its in-context
    # vector when the embedder stores one (ranks), else the same
    sem_cte = (
        "q AS (SELECT CAST(? AS FLOAT[]) AS v),\n"
        "sem0 AS (SELECT e.message_id, e.model, CAST(list_cosine_similarity(e.vec, q.v) AS DOUBLE) AS s "
        "FROM embeddings e CROSS JOIN q"
        + (f" JOIN messages sm ON sm.id = e.message_id AND {sflt.sql}" if sem_join else "")
        + " WHERE e.model IN (?, ?) AND e.dim = ?),\n"
        "sem AS (SELECT message_id, max(s) FILTER (WHERE model = ?) AS sim, "
        "coalesce(max(s) FILTER (WHERE model = ?), max(s) FILTER (WHERE model = ?)) AS rsim "
        "FROM sem0 GROUP BY message_id HAVING count(*) FILTER (WHERE model = ?) > 0)"
    )
    ctxm = context_model(emb)
    sem_params: list[Any] = [vec] + (sflt.params if sem_join else []) + [
        emb.model, ctxm, emb.dimensions, emb.model, ctxm, emb.model, emb.model]

    if mode == "semantic":
        calibrated = "greatest(-1.0, least(1.0, (sem.sim - CAST(? AS DOUBLE)) / CAST(? AS DOUBLE)))"
        params = sem_params + [lo, hi - lo] + flt.params
        outer = ""
        if thr is not None:
            outer = "WHERE score >= ?"
            params.append(thr)
        rows = await index.execute(
            f"WITH {sem_cte}\nSELECT * FROM (SELECT m.id, m.created_at, round({calibrated}, 9) AS score, "
            f"round(sem.sim, 9) AS sim, sem.rsim FROM sem JOIN messages m ON m.id = sem.message_id "
            f"WHERE {flt.sql}) {outer} ORDER BY rsim DESC, score DESC, created_at DESC, id DESC {lim_sql}",
            params + lim_params,
        )
        return [
            hit_from_row(r, float(k["score"]), {"keyword": 0.0, "semantic": float(k["score"]), "recency": 0.0,
                                        "similarity": float(k["sim"])})
            for r, k in await _fetch(index, rows)
        ]

    from .fusion import hybrid

    assert pq is not None
    return await hybrid(
        index, pq, build_filters(session_ids, character_ids, date_range, roles, alias="d"), flt,
        sem_cte, sem_params, await _bm25_stats(index), w,
        system_clock() if now is None else _int(now, "now"), half_life_ms, thr, lim_sql, lim_params)
