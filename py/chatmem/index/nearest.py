"""Approximate nearest neighbours: semantic search over a large history without a full scan.

An exact semantic search casts and multiplies every stored vector. From
``NEAREST_FROM`` indexed messages on, where the engine keeps an approximate index
(the page's: ``web/js/nearest.js`` beside DuckDB-Wasm), an unfiltered semantic or
hybrid search with a limit asks it instead: every row's sign bits (one per
dimension of its ranking vector) are compared with the query's, the ``candidates``
rows of the smallest Hamming distance are ranked by their exact int8 cosine, and
the best ``k`` come back with the cosines an exact scan gives them. A filtered
search (``NearestFilter``) counts the distances of the rows its filter admits
only, so its candidates are the admitted rows nearest the query (every admitted
row when they are fewer: then the answer is exact). What it can
miss is a row whose signs differ from the query's more than those of
``candidates`` other rows: the candidate count grows with the index
(``candidates``), so the share of rows reranked stays the same.

The approximate index is derived from the ``embeddings`` table, like the keyword
index: the engine reads it on the first search, adds the rows appended since on
each later one, reads it again after any other write, and never stores or syncs it.
A threshold or ``limit=None`` keeps the search exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CANDIDATE_SHARE", "MIN_CANDIDATES", "NEAREST_FROM", "NearestFilter", "candidates", "nearest_cte"]

#: from this many indexed messages on, a semantic search asks the engine's
#: approximate index (below it an exact scan is fast enough)
NEAREST_FROM = 20_000
#: rows reranked by their exact cosine: at least this many ...
MIN_CANDIDATES = 200
#: ... and at least one in this many of the index's rows
CANDIDATE_SHARE = 25


@dataclass(frozen=True, slots=True)
class NearestFilter:
    """The rows a filtered search may answer (``hits.FilterValues.nearest``): of these
    sessions, of these characters' sessions and of these roles (None: any), created from
    ``start`` to ``end`` milliseconds inclusive (None: no bound; a row without a time passes
    no bound). The engine reads sessions only: the index resolves the characters first
    (``QueryIndex.nearest``)."""

    sessions: list[str] | None = None
    roles: list[str] | None = None
    start: int | None = None
    end: int | None = None
    characters: list[str] | None = None

    def wire(self) -> dict[str, Any]:
        """The filter as the engine's ``nearest`` takes it (nearest.js ``admission``), its
        characters resolved already."""
        if self.characters is not None:
            raise ValueError("a filter's characters are resolved to sessions before the engine reads it")
        return {"sessions": self.sessions, "roles": self.roles, "start": self.start, "end": self.end}


def candidates(rows: int, k: int) -> int:
    """How many rows a search for the best ``k`` of ``rows`` reranks exactly."""
    return max(MIN_CANDIDATES, 4 * k, -(-rows // CANDIDATE_SHARE))


def _text(value: Any) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def _number(value: Any) -> str:
    x = None if value is None else float(value)
    return repr(x) if x is not None and math.isfinite(x) else "NULL"


def nearest_cte(cols: Sequence[Sequence[Any]]) -> str:
    """The CTE ``sem`` (``message_id, created_at, sim, rsim``) of the rows an approximate
    search found: ``cols`` as the engine's ``nearest`` answers them, one list per column."""
    ids, created, sim, rsim = cols
    if not ids:
        return (
            "sem AS (SELECT CAST(NULL AS VARCHAR) AS message_id, CAST(NULL AS BIGINT) AS created_at, "
            "CAST(NULL AS DOUBLE) AS sim, CAST(NULL AS DOUBLE) AS rsim WHERE FALSE)"
        )
    rows = ",".join(
        f"({_text(i)},{'NULL' if c is None else int(c)},{_number(s)},{_number(r)})"
        for i, c, s, r in zip(ids, created, sim, rsim)
    )
    return (
        "sem AS (SELECT CAST(message_id AS VARCHAR) AS message_id, CAST(created_at AS BIGINT) AS created_at, "
        "CAST(sim AS DOUBLE) AS sim, CAST(rsim AS DOUBLE) AS rsim "
        f"FROM (VALUES {rows}) v(message_id, created_at, sim, rsim))"
    )
