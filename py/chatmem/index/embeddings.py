"""The ``embeddings`` table of the query index: its rows, written compactly.

``store_embeddings`` writes vectors into the index's ``embeddings`` table:
each vector l2-normalised and quantised to int8 with one scale per vector
(``quantize``), so that the cosine with a unit query vector is one int8 dot
product times the scale (``cosine_sql``). The embedders themselves are in
``chatmem.embedding``.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

from ..embedding.embedders import Embedder, contextualize, vectors_of
from ..scheduling.timeslice import TimeSlicer
from .sql_engine import marks

__all__ = [
    "EMBEDDING_COLUMNS",
    "ONE_COSINE_FROM",
    "cosine_sql",
    "rank_cosine_sql",
    "semantic_ctes",
    "model_key",
    "embedding_rows",
    "quantize",
    "query_literal",
    "unit_vector",
    "store_embeddings",
    "vector_literal",
    "with_previous",
]

#: the columns of an ``embeddings`` row, in ``embedding_rows`` order: the vectors, then
#: the message's ``session_id``, ``role`` and ``created_at`` (what search filters and ranks by)
EMBEDDING_COLUMNS = [
    "message_id",
    "model",
    "dim",
    "vec",
    "scale",
    "cvec",
    "cscale",
    "session_id",
    "role",
    "created_at",
    "model_key",
]

#: ``(session_id, role, created_at)`` of a message, by message id
MessageMeta = Mapping[str, tuple[str | None, str | None, int | None]]


def vector_literal(vec: Sequence[float]) -> str:
    """A vector as DuckDB list text (``[0.1,0.2]``), to bind as one string and ``CAST(? AS FLOAT[])``."""
    return "[" + ",".join(map(repr, map(float, vec))) + "]"


def unit_vector(vec: Sequence[float]) -> list[float]:
    """``vec`` l2-normalised (a zero vector as it is)."""
    norm = math.sqrt(math.fsum(float(x) * float(x) for x in vec))
    return [float(x) / norm for x in vec] if norm > 0 else [float(x) for x in vec]


def query_literal(vec: Sequence[float]) -> str:
    """A query vector l2-normalised, as ``vector_literal`` text (bind it to ``q.v`` of ``cosine_sql``)."""
    return vector_literal(unit_vector(vec))


def quantize(vec: Sequence[float]) -> tuple[list[int], float]:
    """``(q, scale)``: ``vec`` as int8 values (its largest magnitude at ±127) and the scale
    that makes ``scale * q`` a unit vector, so that ``scale * (q · u)`` is the cosine of
    ``vec`` and a unit vector ``u`` to about 1e-3. A zero vector is ``(zeros, 0.0)``."""
    vals = list(map(float, vec))
    top = max(map(abs, vals), default=0.0)
    if not top > 0 or not math.isfinite(top):
        return [0] * len(vals), 0.0
    q = [round(x * 127.0 / top) for x in vals]
    norm = math.sqrt(sum(map(operator.mul, q, q)))
    return q, (1.0 / norm if norm > 0 else 0.0)


def model_key(model: str) -> int:
    """A 53-bit hash of an embedder's model name (exact as a JavaScript number): what
    search selects a model's vectors by. An integer constant compared with a column that
    holds one value in a whole row group is proven true by DuckDB's zone maps and not
    evaluated (a text filter cannot be proven: it then selects every row, and the vector
    arithmetic on selected rows cost about 3x in DuckDB-Wasm)."""
    return int.from_bytes(hashlib.blake2b(model.encode("utf-8"), digest_size=8).digest(), "big") >> 11


def cosine_sql(e: str = "e", q: str = "q.v", *, context: bool = False) -> str:
    """SQL for the cosine of the stored vector of ``embeddings`` row ``e`` and the unit query
    vector ``q`` (a ``FLOAT[]``, see ``query_literal``), as DOUBLE. ``context``: the
    in-context vector (``cvec``), NULL where the row has none."""
    vec, scale = ("cvec", "cscale") if context else ("vec", "scale")
    return f"CAST(list_inner_product(CAST({e}.{vec} AS FLOAT[]), {q}) * {e}.{scale} AS DOUBLE)"


#: from this many indexed messages on, a semantic scan computes only the ranking cosine
#: (``rank_cosine_sql``) and the message's own cosine for the top rows alone: the int8 to
#: float cast of every vector is most of a scan's time (100,000 vectors: two casts per row
#: cost twice one). Below it both are computed in the scan, which is cheaper than carrying
#: the vectors of the top rows through the sort
ONE_COSINE_FROM = 20_000


def rank_cosine_sql(e: str = "e", q: str = "q.v") -> str:
    """SQL for the cosine a semantic ranking sorts by: the in-context vector's where the
    row has one, else the own vector's. The same value as ``coalesce`` of the two
    ``cosine_sql`` (``cvec`` and ``cscale`` are NULL together), with one cast."""
    return (
        f"CAST(list_inner_product(CAST(coalesce({e}.cvec, {e}.vec) AS FLOAT[]), {q}) "
        f"* coalesce({e}.cscale, {e}.scale) AS DOUBLE)"
    )


def semantic_ctes(qv: str, where: str, *, one_cosine: bool, top: str = "", table: str = "embeddings") -> str:
    """The CTEs ``q`` (the query vector ``qv``) and ``sem``: ``message_id``, ``created_at``,
    ``sim`` (the own vector's cosine) and ``rsim`` (the ranking cosine, ``embeddings.rank_cosine_sql``)
    of the ``embeddings e`` rows that pass ``where``. With ``one_cosine`` the scan computes
    ``rsim`` alone and ``sim`` is computed for the rows ``top`` (an ORDER BY and LIMIT over
    ``rsim``) keeps, every row for ``top=""``: the caller's ranking must sort within them.
    ``embeddings.ONE_COSINE_FROM`` says when that pays. ``table``: where the rows are read
    (a ``partitions`` copy holds only the rows a filter admits)."""
    if not one_cosine:
        return (
            f"q AS (SELECT {qv} AS v),\n"
            f"sem0 AS (SELECT e.message_id, e.created_at, {cosine_sql()} AS sim, "
            f"{cosine_sql(context=True)} AS csim FROM {table} e CROSS JOIN q WHERE {where}),\n"
            "sem AS (SELECT message_id, created_at, sim, coalesce(csim, sim) AS rsim FROM sem0)"
        )
    return (
        f"q AS (SELECT {qv} AS v),\n"
        f"sem0 AS (SELECT e.message_id, e.created_at, e.vec, e.scale, {rank_cosine_sql()} AS rsim "
        f"FROM {table} e CROSS JOIN q WHERE {where}),\n"
        f"sem AS (SELECT t.message_id, t.created_at, {cosine_sql('t')} AS sim, t.rsim "
        f"FROM (SELECT * FROM sem0 {top}) t CROSS JOIN q)"
    )


async def with_previous(
    engine: Any, embedder: Embedder, items: list[tuple[str, str]]
) -> list[tuple[str, str, str | None]]:
    """``(id, text, previous message's text)`` of ``(id, text)`` items whose rows are in
    the index: what a contextual embedder (one with a ``context_weight``) needs."""
    if not getattr(embedder, "context_weight", 0):
        return [(i, t, None) for i, t in items]
    rows = await engine.execute(
        "SELECT m.id, p.text AS prev FROM messages m LEFT JOIN messages p ON p.session_id = m.session_id "
        f"AND p.seq = m.seq - 1 WHERE m.id IN ({marks(len(items))})",
        [i for i, _ in items],
    )
    prev = {r["id"]: r["prev"] for r in rows}
    return [(i, t, prev.get(i)) for i, t in items]


async def store_embeddings(
    engine: Any,
    embedder: Embedder,
    items: Sequence[tuple[str, str] | tuple[str, str, str | None]],
    meta: MessageMeta | None = None,
) -> None:
    """Embed ``(message_id, text[, previous_text])`` items and append them to ``embeddings``,
    with each message's ``(session_id, role, created_at)`` from ``meta`` (see ``embedding_rows``).

    Every message gets one row under ``embedder.model``: its own vector
    (``vec``: what similarity scores and thresholds read) and, for an embedder
    with a ``context_weight``, its in-context vector (``cvec``, see
    ``contextualize``: what ranks; NULL where it would equal ``vec``: no
    context weight, or no previous message), both quantised (``quantize``).
    """
    if items:
        await engine.load_rows("embeddings", EMBEDDING_COLUMNS, await embedding_rows(embedder, items, meta))


async def embedding_rows(
    embedder: Embedder,
    items: Sequence[tuple[str, str] | tuple[str, str, str | None]],
    meta: MessageMeta | None = None,
) -> list[tuple[Any, ...]]:
    """The ``embeddings`` rows (``EMBEDDING_COLUMNS``) ``store_embeddings`` writes (computed, not written).

    ``meta`` maps a message id to its ``(session_id, role, created_at)``; an item without
    it gets NULLs there, and search, which filters and ranks on them, cannot find it:
    the index always passes it."""
    full = [(it[0], it[1], it[2] if len(it) > 2 else None) for it in items]
    weight = float(getattr(embedder, "context_weight", 0.0) or 0.0)
    # every distinct text (a message, or the turn before it) is embedded once
    by_text = await vectors_of(
        embedder, [t for _, t, _ in full] + ([p for _, _, p in full if p is not None] if weight > 0 else [])
    )
    rows: list[tuple[Any, ...]] = []
    key = model_key(embedder.model)
    await asyncio.sleep(0)  # the embedder's last slice ran up to here: a fresh one for these
    slicer = TimeSlicer()  # a page's interface never waits long for a batch
    for mid, t, p in full:
        await slicer.tick()
        q, scale = quantize(by_text[t])
        cq: list[int] | None = None
        cscale: float | None = None
        if weight > 0 and p is not None:  # a first message's in-context vector is its own
            cq, cscale = quantize(contextualize(by_text[t], by_text[p], weight))
        rows.append(
            (mid, embedder.model, embedder.dimensions, q, scale, cq, cscale)
            + tuple((meta or {}).get(mid, (None, None, None)))
            + (key,)
        )
    return rows
