"""``retrieve``: which messages of a session to put in the model's context.

The original ``RetrievalConfig``:

- ``recent``: the last ``recent_count`` messages;
- ``relevant``: the ``recent_count`` messages most similar to the query
  (semantic, through the embedder) whose similarity is at least
  ``relevance_threshold``;
- ``hybrid``: the ``recent_count`` messages with the best
  ``recency * w.recency + similarity * w.relevance``, where recency is
  ``0.5 ** (r / recent_count)`` with ``r`` = 0 for the newest message (so 1.0
  for the newest, 0.5 for the first message past the last ``recent_count``)
  and a similarity below 0 counts as 0.

Results come back in conversation order (by ``seq``), each a ``SearchHit``
whose ``breakdown`` shows its recency and semantic parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import SessionNotFound, ValidationError
from .embed import Embedder
from .search import SearchHit, default_embedder, hit_from_row

__all__ = ["STRATEGIES", "HybridWeights", "RetrievalConfig", "retrieve"]

STRATEGIES = ("recent", "relevant", "hybrid")


@dataclass(slots=True)
class HybridWeights:
    recency: float = 0.6
    relevance: float = 0.4


@dataclass(slots=True)
class RetrievalConfig:
    strategy: str = "hybrid"
    recent_count: int = 10
    relevance_threshold: float = 0.7
    hybrid_weights: HybridWeights = field(default_factory=HybridWeights)

    def validate(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValidationError(f"strategy must be one of {STRATEGIES}", field="strategy")
        n = self.recent_count
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValidationError("recent_count must be an int >= 1", field="recent_count")
        t = self.relevance_threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not -1.0 <= t <= 1.0:
            raise ValidationError("relevance_threshold must be a number in [-1, 1]",
                                  field="relevance_threshold")
        w = self.hybrid_weights
        if not isinstance(w, HybridWeights) or any(
            isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0 for x in (w.recency, w.relevance)
        ):
            raise ValidationError("hybrid_weights must be HybridWeights of numbers >= 0",
                                  field="hybrid_weights")


async def retrieve(
    index: Any,
    session_id: str,
    query: str | None,
    config: RetrievalConfig | None = None,
    embedder: Embedder | None = None,
) -> list[SearchHit]:
    """The messages of ``session_id`` to put in context, in conversation order, with scores.

    ``query`` may be None or empty for ``recent``; the other strategies need it.
    ``SessionNotFound`` if the index holds no such session.
    """
    config = config or RetrievalConfig()
    config.validate()
    if not isinstance(session_id, str) or not session_id:
        raise ValidationError("session_id must be a non-empty string", field="session_id")
    if config.strategy != "recent" and (not isinstance(query, str) or not query.strip()):
        raise ValidationError(f"the {config.strategy!r} strategy needs a non-empty query", field="query")
    await index.setup()
    if not await index.execute("SELECT 1 AS x FROM sessions WHERE session_id = ?", [session_id]):
        raise SessionNotFound(session_id)
    n = config.recent_count
    rec = "pow(0.5, (row_number() OVER (ORDER BY m.seq DESC) - 1) / ?)"
    if config.strategy == "recent":
        rows = await index.execute(
            f"SELECT * FROM (SELECT m.*, {rec} AS recency FROM messages m WHERE m.session_id = ?) "
            "ORDER BY seq DESC LIMIT ?",
            [float(n), session_id, n],
        )
        hits = [hit_from_row(r, float(r["recency"]), {"keyword": 0.0, "semantic": 0.0,
                                              "recency": float(r["recency"])}) for r in rows]
        return sorted(hits, key=lambda h: h.message.seq)

    emb = default_embedder(index, embedder)
    await index.embed_missing(emb, session_id=session_id)
    (vec,) = await emb.embed([query or ""])
    from .embed import vector_literal

    wr, wl = (0.0, 1.0) if config.strategy == "relevant" else (config.hybrid_weights.recency,
                                                               config.hybrid_weights.relevance)
    where = "WHERE sim >= ?" if config.strategy == "relevant" else ""
    params: list[Any] = [vector_literal(vec), float(n), emb.model, emb.dimensions, session_id, wr, wl]
    if where:
        params.append(float(config.relevance_threshold))
    rows = await index.execute(
        "WITH q AS (SELECT CAST(? AS FLOAT[]) AS v),\n"
        f"s AS (SELECT m.*, {rec} AS recency, "
        "coalesce(round(CAST(list_cosine_similarity(e.vec, q.v) AS DOUBLE), 9), 0) AS sim "
        "FROM messages m CROSS JOIN q LEFT JOIN embeddings e "
        "ON e.message_id = m.id AND e.model = ? AND e.dim = ? WHERE m.session_id = ?)\n"
        "SELECT *, ? * recency AS p_rec, ? * greatest(sim, 0) AS p_sem FROM s "
        f"{where} ORDER BY round(p_rec + p_sem, 9) DESC, seq DESC LIMIT ?",
        params + [n],
    )
    hits = [
        hit_from_row(r, round(float(r["p_rec"]) + float(r["p_sem"]), 9), {
            "keyword": 0.0, "semantic": float(r["p_sem"]), "recency": float(r["p_rec"]),
            "similarity": float(r["sim"]),
        })
        for r in rows
    ]
    return sorted(hits, key=lambda h: h.message.seq)
