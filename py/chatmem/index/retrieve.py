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

Similarities are *calibrated* for the embedder (see ``search``): with the
static model ``relevance_threshold=0.7`` keeps a paraphrase of the query and
drops an unrelated message, as the original's default meant. A hit's
``breakdown`` means what ``search``'s does: ``similarity`` is the raw cosine,
``relevance`` the calibrated similarity (what ``relevance_threshold`` is
compared with), ``semantic`` and ``recency`` the weighted parts that sum to
``score``.

``scope`` reaches past the session: ``"character"`` also searches the other
sessions of the same character (and user), ``"user"`` every other session of
the same user (with any strategy: ``recent`` then adds them after the session's
last messages when a query is given). From those, up to ``recent_count`` messages whose calibrated
similarity to the query is at least ``relevance_threshold`` come after the
session's own, most relevant first; their ``SearchHit.session_id`` names the
session they came from (``build_context`` marks them with it, see
``mark_provenance``). ``"session"`` (the default) is the original behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..embedding.embedders import Embedder, calibration_of
from ..errors import SessionNotFound, ValidationError, shown
from ..records.models import ChatMessage
from .embeddings import cosine_sql, query_literal
from .hits import SearchHit, fetch_ranked, hit_from_row
from .protocols import SearchIndex
from .search import default_embedder

__all__ = ["SCOPES", "STRATEGIES", "HybridWeights", "RetrievalConfig", "mark_provenance", "retrieve"]

STRATEGIES = ("recent", "relevant", "hybrid")
SCOPES = ("session", "character", "user")


@dataclass(slots=True)
class HybridWeights:
    """How ``RetrievalConfig(strategy="hybrid")`` weighs recency against relevance."""

    recency: float = 0.6
    relevance: float = 0.4


@dataclass(slots=True)
class RetrievalConfig:
    """The original's retrieval strategies for a window: ``recent``, ``relevant`` or
    ``hybrid``, over this session, the character's sessions or the user's."""

    strategy: str = "hybrid"
    recent_count: int = 10
    relevance_threshold: float = 0.7
    hybrid_weights: HybridWeights = field(default_factory=HybridWeights)
    #: where relevant messages may come from: this session, the character's sessions, the user's
    scope: str = "session"

    def validate(self) -> None:
        if self.scope not in SCOPES:
            raise ValidationError(f"scope must be one of {SCOPES}, got {shown(self.scope)}", field="scope")
        if self.strategy not in STRATEGIES:
            raise ValidationError(f"strategy must be one of {STRATEGIES}", field="strategy")
        n = self.recent_count
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValidationError("recent_count must be an int >= 1", field="recent_count")
        t = self.relevance_threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not -1.0 <= t <= 1.0:
            raise ValidationError(
                "relevance_threshold must be a number in [-1, 1]", field="relevance_threshold"
            )
        w = self.hybrid_weights
        if not isinstance(w, HybridWeights) or any(
            isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0 for x in (w.recency, w.relevance)
        ):
            raise ValidationError(
                "hybrid_weights must be HybridWeights of numbers >= 0", field="hybrid_weights"
            )


async def retrieve(
    index: SearchIndex,
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
        raise ValidationError(f"the {shown(config.strategy)} strategy needs a non-empty query", field="query")
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
        hits = [
            hit_from_row(
                m, float(r["recency"]), {"keyword": 0.0, "semantic": 0.0, "recency": float(r["recency"])}
            )
            for m, r in await fetch_ranked(index, rows)
        ]
        hits.sort(key=lambda h: h.message.seq)
        if config.scope == "session" or not isinstance(query, str) or not query.strip():
            return hits
        # the vectors the other sessions have now (what the index embeds in the background):
        # a turn never waits for a whole history to be embedded
        emb = default_embedder(index, embedder)
        (vec,) = await emb.embed([query])
        return hits + await _other_sessions(index, session_id, config, vec, emb, calibration_of(emb))

    emb = default_embedder(index, embedder)
    await index.embed_missing(emb, session_id=None if config.scope != "session" else session_id)
    (vec,) = await emb.embed([query or ""])
    lo, hi = calibration_of(emb)
    cal = "greatest(-1.0, least(1.0, (raw - ?) / ?))"

    wr, wl = (
        (0.0, 1.0)
        if config.strategy == "relevant"
        else (config.hybrid_weights.recency, config.hybrid_weights.relevance)
    )
    where = "WHERE sim >= ?" if config.strategy == "relevant" else ""
    qv = query_literal(vec)
    params: list[Any] = [qv, float(n), emb.model, emb.dimensions, session_id, lo, hi - lo, wr, wl]
    if where:
        params.append(float(config.relevance_threshold))
    rows = await index.execute(
        "WITH q AS (SELECT CAST(? AS FLOAT[]) AS v),\n"
        f"s0 AS (SELECT m.*, {rec} AS recency, {cosine_sql()} AS raw "
        "FROM messages m CROSS JOIN q LEFT JOIN embeddings e "
        "ON e.message_id = m.id AND e.model = ? AND e.dim = ? WHERE m.session_id = ?),\n"
        f"s AS (SELECT *, coalesce(round({cal}, 9), 0) AS sim FROM s0)\n"
        "SELECT *, ? * recency AS p_rec, ? * greatest(sim, 0) AS p_sem FROM s "
        f"{where} ORDER BY round(p_rec + p_sem, 9) DESC, seq DESC LIMIT ?",
        params + [n],
    )
    hits = [
        hit_from_row(
            m,
            round(float(r["p_rec"]) + float(r["p_sem"]), 9),
            {
                "keyword": 0.0,
                "semantic": float(r["p_sem"]),
                "recency": float(r["p_rec"]),
                "relevance": float(r["sim"]),
                "similarity": _raw(r["raw"]),
            },
        )
        for m, r in await fetch_ranked(index, rows)
    ]
    own = sorted(hits, key=lambda h: h.message.seq)
    if config.scope == "session":
        return own
    return own + await _other_sessions(index, session_id, config, vec, emb, (lo, hi))


async def _other_sessions(
    index: SearchIndex,
    session_id: str,
    config: RetrievalConfig,
    vec: list[float],
    emb: Embedder,
    cal: tuple[float, float],
) -> list[SearchHit]:
    """The most relevant messages of the scope's other sessions, above the threshold."""
    lo, hi = cal
    if config.scope == "character":
        same = "s.character_id = me.character_id AND s.user_id = me.user_id"
    else:
        same = "s.user_id = me.user_id"
    rows = await index.execute(
        "WITH q AS (SELECT CAST(? AS FLOAT[]) AS v),\n"
        "me AS (SELECT character_id, user_id FROM sessions WHERE session_id = ?),\n"
        f"other AS (SELECT s.session_id FROM sessions s, me WHERE {same} AND s.session_id <> ?),\n"
        f"r0 AS (SELECT m.*, {cosine_sql()} AS raw FROM messages m JOIN embeddings e ON e.message_id = m.id "
        "AND e.model = ? AND e.dim = ? CROSS JOIN q WHERE m.session_id IN (SELECT session_id FROM other)),\n"
        "r AS (SELECT *, round(greatest(-1.0, least(1.0, (raw - ?) / ?)), 9) AS sim FROM r0)\n"
        "SELECT * FROM r WHERE sim >= ? ORDER BY sim DESC, created_at DESC, id DESC LIMIT ?",
        [
            query_literal(vec),
            session_id,
            session_id,
            emb.model,
            emb.dimensions,
            lo,
            hi - lo,
            float(config.relevance_threshold),
            config.recent_count,
        ],
    )
    return [
        hit_from_row(
            m,
            float(r["sim"]),
            {
                "keyword": 0.0,
                "semantic": float(r["sim"]),
                "recency": 0.0,
                "relevance": float(r["sim"]),
                "similarity": _raw(r["raw"]),
            },
        )
        for m, r in await fetch_ranked(index, rows)
    ]


def _raw(v: Any) -> float:
    """A raw cosine as stored in a breakdown (0.0 for a message without a vector)."""
    return round(float(v), 9) if v is not None else 0.0


def mark_provenance(hit: SearchHit, title: str | None, created_at: int | None) -> ChatMessage:
    """A copy of a hit's message from another session, marked with where it came from:
    its text starts with ``[From an earlier conversation "<title>" (<date>)]`` and its
    ``metadata["retrievedFrom"]`` holds ``sessionId``, ``title`` and ``createdAt``."""
    import dataclasses
    import time

    m = hit.message
    day = time.strftime(
        "%Y-%m-%d", time.gmtime((created_at if created_at is not None else m.created_at) / 1000)
    )
    label = f'[From an earlier conversation "{title or "untitled"}" ({day})] '
    content: Any
    if isinstance(m.content, str):
        content = label + m.content
    else:
        content = [{"type": "text", "text": label.strip()}, *m.content]
    meta = dict(m.metadata or {})
    meta["retrievedFrom"] = {"sessionId": hit.session_id, "title": title, "createdAt": created_at}
    return dataclasses.replace(m, content=content, metadata=meta)
