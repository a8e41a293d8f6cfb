"""What every search mode shares: ``SearchHit``, the filters, the BM25 SQL and
reading the ranked hits back from the store (the ``search`` pipeline builds on it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ValidationError, shown
from ..records.models import ROLES, ChatMessage, extract_text
from ..text.tokenize import ParsedQuery, norm_text, phrase_pattern
from .nearest import NearestFilter
from .protocols import SearchIndex
from .schema import row_to_message_record
from .scoring import K1, B, term_weights

__all__ = [
    "K1",
    "B",
    "DAY_MS",
    "DEFAULT_WEIGHTS",
    "MAX_LIMIT",
    "SearchHit",
    "Filters",
    "FilterValues",
    "build_filters",
    "check_ms",
    "fetch_ranked",
    "phrase_sql",
    "term_stats",
    "bm25_sql",
    "bm25_ctes",
    "hit_from_row",
    "phrase_matches",
    "rank_top",
    "top_sql",
]

DAY_MS = 86_400_000
DEFAULT_WEIGHTS: dict[str, float] = {"keyword": 0.5, "semantic": 0.5, "recency": 0.0}
MAX_LIMIT = 10_000
_CJK_MAX = "\U0010ffff"


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


def check_ms(v: Any, name: str) -> int:
    """A time in ms since the epoch (an int, not a bool), else a ``ValidationError``."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValidationError(f"{name} must be an int (ms since the epoch)", field=name)
    return v


@dataclass(slots=True)
class Filters:
    """The WHERE clause (over alias ``m`` of ``messages``) and its parameters."""

    sql: str
    params: list[Any]
    empty: bool  # some filter list was empty: nothing can match


@dataclass(frozen=True, slots=True)
class FilterValues:
    """The filters of one search, validated once (``of``); ``over(alias)`` is their SQL
    over any relation with ``session_id``, ``role`` and ``created_at``."""

    session_ids: list[str] | None = None
    character_ids: list[str] | None = None
    roles: list[str] | None = None
    start: int | None = None
    end: int | None = None

    @classmethod
    def of(
        cls, session_ids: Any = None, character_ids: Any = None, date_range: Any = None, roles: Any = None
    ) -> FilterValues:
        """Validate the filters. Raises ``ValidationError``."""
        sids = _id_list(session_ids, "session_ids")
        cids = _id_list(character_ids, "character_ids")
        rls = _id_list(roles, "roles")
        if rls is not None:
            bad = [r for r in rls if r not in ROLES]
            if bad:
                raise ValidationError(
                    f"unknown role {shown(bad[0])}; roles are {sorted(ROLES)}", field="roles"
                )
        start = end = None
        if date_range is not None:
            if (
                isinstance(date_range, (str, bytes))
                or not isinstance(date_range, Sequence)
                or len(date_range) != 2
            ):
                raise ValidationError("date_range must be a (start_ms, end_ms) pair", field="date_range")
            start, end = date_range
            if start is not None:
                start = check_ms(start, "date_range")
            if end is not None:
                end = check_ms(end, "date_range")
            if start is not None and end is not None and start > end:
                raise ValidationError("date_range start is after its end", field="date_range")
        return cls(sids, cids, rls, start, end)

    @property
    def empty(self) -> bool:
        """Some filter list is empty: nothing can match."""
        return any(ids is not None and not ids for ids in (self.session_ids, self.character_ids, self.roles))

    def nearest(self) -> NearestFilter:
        """The filters as the approximate index takes them (its characters unresolved)."""
        return NearestFilter(
            _unique(self.session_ids), _unique(self.roles), self.start, self.end, _unique(self.character_ids)
        )

    def over(self, alias: str = "m") -> Filters:
        """The filters as SQL over ``alias``."""
        conds: list[str] = []
        params: list[Any] = []
        a = alias
        for ids, sql in (
            (self.session_ids, a + ".session_id IN ({})"),
            (
                self.character_ids,
                a + ".session_id IN (SELECT session_id FROM sessions WHERE character_id IN ({}))",
            ),
            (self.roles, a + ".role IN ({})"),
        ):
            if not ids:
                continue
            uniq = list(dict.fromkeys(ids))
            conds.append(sql.format(", ".join("?" for _ in uniq)))
            params.extend(uniq)
        if self.start is not None:
            conds.append(f"{a}.created_at >= ?")
            params.append(self.start)
        if self.end is not None:
            conds.append(f"{a}.created_at <= ?")
            params.append(self.end)
        return Filters(" AND ".join(conds) if conds else "TRUE", params, self.empty)


def _unique(ids: list[str] | None) -> list[str] | None:
    return None if ids is None else list(dict.fromkeys(ids))


def build_filters(
    session_ids: Any = None,
    character_ids: Any = None,
    date_range: Any = None,
    roles: Any = None,
    *,
    alias: str = "m",
) -> Filters:
    """Validate the filters and turn them into SQL over ``alias`` (any relation with
    ``session_id``, ``role`` and ``created_at``). Raises ``ValidationError``."""
    return FilterValues.of(session_ids, character_ids, date_range, roles).over(alias)


# --------------------------------------------------------------------------- SQL pieces


def _stats_params(stats: tuple[int, float]) -> list[Any]:
    """``n`` and the two constants of BM25's length normalisation, ``k1(1-b)`` and ``k1 b / avgdl``."""
    n, avgdl = stats
    return [int(n), K1 * (1 - B), K1 * B / avgdl]


def _f(x: float) -> str:
    """A DOUBLE literal (with an exponent: a plain decimal literal would be a DECIMAL)."""
    return f"{x:.17e}"


#: the BM25 weight of one posting ``p`` of doc ``d`` of a term whose ``w.df`` is known; binds n, c1, c2
_WEIGHT = (
    "ln(1 + (CAST(? AS BIGINT) - w.df + 0.5) / (w.df + 0.5)) * p.tf * "
    + str(K1 + 1)
    + " / (p.tf + CAST(? AS DOUBLE) + CAST(? AS DOUBLE) * d.doc_len)"
)
_NOTHING = (
    "SELECT NULL::VARCHAR AS message_id, NULL::DOUBLE AS kw, NULL::BIGINT AS req, "
    "NULL::BIGINT AS created_at WHERE FALSE"
)


def _scored(
    pq: ParsedQuery,
    stats: tuple[int, float],
    terms: Mapping[str, tuple[int, int]],
    cols: str = "",
    where: str = "",
) -> tuple[str | None, int]:
    """``SELECT doc, kw, req`` (then ``cols``, over alias ``d`` of ``docs``, e.g.
    ``", d.message_id"``; rows passing ``where``, a condition over ``d``): the BM25
    score of every doc holding a query term and how many required terms it holds,
    from one scan of each term's postings (``tid = constant``: the zone maps of the
    tid-sorted postings skip to it), grouped by doc (term ``i``'s tf as ``t<i>``),
    then joined with ``docs`` once for the doc's length; weighted by an idf computed
    here and summed in query order, as ``scoring.py_scores`` does (a term the doc
    lacks adds an exact 0). None when nothing can match."""
    weights, required = term_weights(pq, stats, terms)
    if weights is None:
        return None, required
    _, avgdl = stats
    if len(weights) == 1:
        grouped = f"SELECT doc, tf AS t0 FROM postings WHERE tid = {int(weights[0][0])}"
    else:
        parts = " UNION ALL ".join(
            f"SELECT {i} AS qi, doc, tf FROM postings WHERE tid = {int(tid)}"
            for i, (tid, _, _) in enumerate(weights)
        )
        tfs = ", ".join(f"any_value(tf) FILTER (WHERE qi = {i}) AS t{i}" for i in range(len(weights)))
        grouped = f"SELECT doc, {tfs} FROM ({parts}) GROUP BY doc"
    k, c1, c2 = _f(K1 + 1), _f(K1 * (1 - B)), _f(K1 * B / avgdl)
    kw = " + ".join(
        f"coalesce({_f(w)} * s.t{i} * {k} / (s.t{i} + {c1} + {c2} * d.doc_len), 0)"
        for i, (_, w, _) in enumerate(weights)
    )
    req = " + ".join(f"(s.t{i} IS NOT NULL)::INTEGER" for i, (_, _, r) in enumerate(weights) if r) or "0"
    return (
        f"SELECT s.doc, {kw} AS kw, {req} AS req{cols} FROM ({grouped}) s JOIN docs d ON d.doc = s.doc"
        + (f" WHERE {where}" if where else ""),
        required,
    )


def bm25_sql(
    pq: ParsedQuery,
    stats: tuple[int, float],
    flt: Filters | None = None,
    terms: Mapping[str, tuple[int, int]] | None = None,
) -> tuple[str, list[Any], int]:
    """One ``SELECT`` of ``(message_id, kw, req, created_at)``: the BM25 score of every
    message holding a query term and passing the filters (``flt`` over alias ``d``
    of ``docs``), how many of the required terms it holds, and its time.

    ``terms`` maps the query's terms to their ``(tid, df)`` (``QueryIndex.term_stats``):
    then the statement reads only the postings of those term ids, grouped by
    doc, and ``docs`` for the message id, time and filters; ``stats`` is
    ``(n, avgdl)``. Without ``terms``, or for a one-character CJK term (a term
    prefix), it is ``bm25_ctes``. Returns (sql, params, number of required terms).
    """
    if terms is None or any(t.prefix for t in pq.all_terms):
        ctes, params, required = bm25_ctes(pq, flt, stats)
        return f"WITH {ctes}\nSELECT * FROM kw", params, required
    flt = flt or Filters("TRUE", [], False)
    scored, required = _scored(
        pq, stats, terms, ", d.message_id, d.created_at", flt.sql if flt.sql != "TRUE" else ""
    )
    if scored is None:
        return _NOTHING, [], required
    return f"SELECT message_id, kw, req, created_at FROM ({scored})", list(flt.params), required


def top_sql(
    pq: ParsedQuery,
    stats: tuple[int, float],
    terms: Mapping[str, tuple[int, int]],
    limit: int,
    threshold: float | None = None,
    *,
    exact: bool = False,
) -> tuple[str, list[Any]] | None:
    """The best messages of an unfiltered keyword query without phrases or prefix
    terms, as ``(id, score, created_at)`` (score = BM25 rounded to 1e-9). The docs
    are scored and cut before ``docs`` is read, so the join reads a few rows
    through its ART index. By default the ``limit + 1`` best by score alone (the
    caller orders ties, see ``rank_top``); ``exact``: every doc scoring at least
    the ``limit``-th best, ties included. None when nothing can match."""
    scored, required = _scored(pq, stats, terms)
    if scored is None:
        return None
    conds = [f"req = {required}"] if required else []
    params: list[Any] = []
    if threshold is not None:
        conds.append("round(kw, 9) >= ?")
        params.append(threshold)
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    if exact:
        sql = (
            f"WITH c AS (SELECT doc, round(kw, 9) AS score FROM ({scored}){where}), "
            "t AS (SELECT doc, score FROM c WHERE score >= (SELECT min(score) FROM "
            f"(SELECT score FROM c ORDER BY score DESC LIMIT {int(limit)}))) "
            "SELECT d.message_id AS id, t.score, d.created_at FROM t JOIN docs d ON d.doc = t.doc"
        )
    else:
        sql = (
            f"SELECT d.message_id AS id, t.score, d.created_at FROM (SELECT doc, round(kw, 9) AS score "
            f"FROM ({scored}){where} ORDER BY score DESC LIMIT {int(limit) + 1}) t JOIN docs d ON d.doc = t.doc"
        )
    return sql, params


def rank_top(rows: list[dict[str, Any]], limit: int, exact: bool) -> list[dict[str, Any]] | None:
    """``top_sql``'s rows in rank order (score, then newest, then id, all descending),
    at most ``limit``; None when a tie crosses the cut of a non-``exact`` answer
    (then ask again with ``exact``)."""
    rows = sorted(rows, key=lambda r: (r["score"], r["created_at"], r["id"]), reverse=True)
    if not exact and len(rows) > limit and rows[limit]["score"] == rows[limit - 1]["score"]:
        return None
    return rows[:limit]


def bm25_ctes(
    pq: ParsedQuery, flt: Filters | None = None, stats: tuple[int, float] | None = None
) -> tuple[str, list[Any], int]:
    """CTEs ending in ``kw(message_id, kw, req, created_at)``, the general form of
    ``bm25_sql`` that also answers one-character CJK terms (a term range whose
    document frequency is the number of distinct messages in it). ``flt`` is
    over alias ``d`` of ``docs``. Without ``stats`` the ``stats`` table is read
    in the query. Returns (sql, params, number of required terms).
    """
    qterms = pq.all_terms
    required = len(dict.fromkeys(pq.required))
    hits: list[str] = []
    dfs: list[str] = []
    hparams: list[Any] = []
    dparams: list[Any] = []
    for i, t in enumerate(qterms):
        if t.prefix:
            # several index terms answer one query term: add their frequencies first
            hits.append(
                f"SELECT {i} AS qi, doc, sum(tf) AS tf FROM postings WHERE tid IN "
                "(SELECT tid FROM terms WHERE term >= ? AND term <= ?) GROUP BY doc"
            )
            hparams.extend([t.value, t.value + _CJK_MAX])
            dfs.append(f"SELECT {i} AS qi, count(*) AS df FROM h WHERE qi = {i}")
        else:
            hits.append(
                f"SELECT {i} AS qi, doc, tf FROM postings WHERE tid = (SELECT tid FROM terms WHERE term = ?)"
            )
            hparams.append(t.value)
            dfs.append(f"SELECT {i} AS qi, df FROM terms WHERE term = ?")
            dparams.append(t.value)
    flt = flt or Filters("TRUE", [], False)
    where = f"WHERE {flt.sql}" if flt.sql != "TRUE" else ""
    if stats is None:
        st = (
            "st AS (SELECT CAST(n AS BIGINT) AS n, CAST(greatest(total::DOUBLE / greatest(n, 1), 1e-9) AS DOUBLE) "
            "AS avgdl FROM stats),\n"
        )
        weight = (
            f"ln(1 + (st.n - w.df + 0.5) / (w.df + 0.5)) * p.tf * {K1 + 1} / "
            f"(p.tf + {K1 * (1 - B)} + {K1 * B} / st.avgdl * d.doc_len)"
        )
        join, sparams = " CROSS JOIN st", []
    else:
        st, weight, join, sparams = "", _WEIGHT, "", _stats_params(stats)
    sql = f"""
{st}h AS ({" UNION ALL ".join(hits)}),
f AS ({" UNION ALL ".join(dfs)}),
kw AS (
  SELECT d.message_id, sum({weight}) AS kw, count(*) FILTER (WHERE p.qi < {required}) AS req,
         max(d.created_at) AS created_at
  FROM h p JOIN f w ON w.qi = p.qi{join} JOIN docs d ON d.doc = p.doc {where}
  GROUP BY d.message_id
)"""
    return sql, hparams + dparams + sparams + flt.params, required


def phrase_sql(matches: list[str] | None, column: str = "kw.message_id") -> tuple[str, list[Any]]:
    """The condition that keeps only ``matches`` (the message ids ``phrase_matches``
    found; ``None``: the query has no phrase, no condition)."""
    if matches is None:
        return "", []
    if not matches:
        return "FALSE", []
    return f"{column} IN ({', '.join('?' for _ in matches)})", list(matches)


def _phrase_ok(pq: ParsedQuery, rec: Mapping[str, Any]) -> bool:
    text = norm_text(extract_text(rec.get("content")))
    return all(phrase_pattern(p) in text for p in pq.phrases)


async def phrase_matches(
    index: SearchIndex, pq: ParsedQuery, rows: Sequence[Mapping[str, Any]], limit: int | None = None
) -> list[tuple[dict[str, Any], Mapping[str, Any]]]:
    """``(record, row)`` of the ``rows`` (ranked, ``id`` first) whose message holds every
    phrase of ``pq`` word for word (its normalised text), in rank order, at most
    ``limit``. The records are read in growing pages, so a query stops reading
    once it has ``limit`` matches."""
    out: list[tuple[dict[str, Any], Mapping[str, Any]]] = []
    i, page = 0, max(20, 2 * (limit or 0))
    while i < len(rows):
        part = rows[i : i + page]
        recs = await index.records([str(r["id"]) for r in part])
        for rec, r in zip(recs, part):
            if rec is not None and _phrase_ok(pq, rec):
                out.append((rec, r))
                if limit is not None and len(out) >= limit:
                    return out
        i += len(part)
        page = min(page * 4, 4000)
    return out


def hit_from_row(row: Mapping[str, Any], score: float, breakdown: dict[str, float]) -> SearchHit:
    """A hit from a message record (camelCase, e.g. from ``records``), or from a
    ``messages`` row of the index (its content is then the plain text)."""
    rec = row if "sessionId" in row else row_to_message_record(row)
    msg = ChatMessage.from_record(dict(rec))
    return SearchHit(msg, msg.session_id, score, breakdown)


async def fetch_ranked(
    index: SearchIndex, rows: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The message records of ranked light rows (``id`` first), in rank order.

    Ranking reads only the index; the records of the few winners are read from
    the store (``index.records``), which holds them.
    """
    if not rows:
        return []
    recs = await index.records([r["id"] for r in rows])
    return [(rec, r) for rec, r in zip(recs, rows) if rec is not None]


async def term_stats(index: SearchIndex, pq: ParsedQuery) -> dict[str, tuple[int, int]] | None:
    """The query terms' ``(tid, df)`` (None for a prefix query: ``bm25_ctes``)."""
    if any(t.prefix for t in pq.all_terms):
        return None
    return await index.term_stats([t.value for t in pq.all_terms])
