"""What every search mode shares: ``SearchHit``, the filters, the BM25 SQL and
reading hits back from the index (``search`` and ``fusion`` both build on it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ValidationError
from ..models import ROLES, ChatMessage
from .schema import MESSAGE_COLUMNS, row_to_message_record
from .tokenize import ParsedQuery, phrase_pattern

__all__ = ["K1", "B", "DAY_MS", "DEFAULT_WEIGHTS", "SearchHit", "Filters", "build_filters", "bm25_sql",
           "bm25_ctes", "hit_from_row"]

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
