"""Embedders: text to vectors, for semantic search.

``Embedder`` is the protocol (``async embed(texts)``, ``dimensions``, ``model``).
Two ship here:

- ``HashingEmbedder``: local, offline, no model download. Hashed character
  3-5-grams of the normalised text (signed feature hashing, l2-normalised).
  Deterministic across runs and platforms (``zlib.crc32``). It finds
  near-duplicates, rewordings that share word stems, typos and CJK overlap;
  it does **not** know that "car" and "automobile" mean the same.
- ``OpenAIEmbedder``: any OpenAI-compatible ``/embeddings`` endpoint (OpenAI,
  Ollama, LM Studio, vLLM, llama.cpp server...), batched, retried on 429/5xx
  and transport errors with exponential backoff. Real semantics; needs the
  endpoint (and usually the network).

``store_embeddings`` writes vectors into the index's ``embeddings`` table, compactly:
each vector l2-normalised and quantised to int8 with one scale per vector
(``quantize``), so that the cosine with a unit query vector is one int8 dot
product times the scale (``cosine_sql``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import operator
import random
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import EmbeddingError, TransportError, ValidationError
from ..runtime.http import Transport
from ..scheduling.timeslice import TimeSlicer
from .sql_engine import marks
from .tokenize import norm_text

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "EMBEDDING_COLUMNS",
    "calibration_of",
    "contextualize",
    "ONE_COSINE_FROM",
    "cosine_sql",
    "rank_cosine_sql",
    "semantic_ctes",
    "model_key",
    "embed_messages",
    "embedding_rows",
    "quantize",
    "query_literal",
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


@runtime_checkable
class Embedder(Protocol):
    #: identifies the vectors in the index: changing it re-embeds
    model: str
    dimensions: int

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector of ``dimensions`` floats per text, in order."""
        ...


class HashingEmbedder:
    """Signed feature hashing of character n-grams (``ngrams``, default 3 to 5).

    ``model`` is ``"hashing-v1-<dimensions>"``: the vectors never change for a
    given text, on any machine.
    """

    def __init__(self, dimensions: int = 384, ngrams: tuple[int, int] = (3, 5)):
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 8:
            raise ValidationError("dimensions must be an int >= 8", field="dimensions")
        lo, hi = ngrams
        if not (1 <= lo <= hi):
            raise ValidationError("ngrams must be (low, high) with 1 <= low <= high", field="ngrams")
        self.dimensions = dimensions
        self.ngrams = (lo, hi)
        self.model = f"hashing-v1-{dimensions}" + ("" if (lo, hi) == (3, 5) else f"-{lo}{hi}")

    def embed_one(self, text: str) -> list[float]:
        s = norm_text(text)
        grams: Counter[str] = Counter()
        lo, hi = self.ngrams
        for n in range(lo, hi + 1):
            grams.update(s[i : i + n] for i in range(len(s) - n + 1))
        vec = [0.0] * self.dimensions
        dim = self.dimensions
        crc = zlib.crc32
        for g, c in grams.items():
            if g.isspace():
                continue
            h = crc(g.encode("utf-8"))
            w = 1.0 + math.log(c)  # sublinear: a repeated gram counts, but not linearly
            if h & 1:
                vec[(h >> 1) % dim] += w
            else:
                vec[(h >> 1) % dim] -= w
        norm = math.sqrt(sum(x * x for x in vec))
        if norm > 0:
            vec = [x / norm for x in vec]
        return vec

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]


_KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
_RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class OpenAIEmbedder:
    """An OpenAI-compatible ``POST {base_url}/embeddings`` client.

    ``dimensions`` is sent to the server when given (models that support
    shortening honour it) and every vector is checked against it; when None it
    is the model's known size, or learned from the first answer. ``batch_size``
    texts go in one request; 429, 5xx and transport errors are retried up to
    ``max_retries`` times with exponential backoff (``Retry-After`` honoured,
    capped at 30 s); anything else raises ``EmbeddingError`` at once.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str = "text-embedding-3-small",
        dimensions: int | None = None,
        batch_size: int = 64,
        max_retries: int = 3,
        transport: Transport | None = None,
        *,
        backoff: float = 0.5,
        timeout: float = 60.0,
    ):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValidationError("base_url must be an http(s) URL", field="base_url")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValidationError("batch_size must be an int >= 1", field="batch_size")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValidationError("max_retries must be an int >= 0", field="max_retries")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self._send_dimensions = dimensions
        self.dimensions: int = dimensions or _KNOWN_DIMENSIONS.get(model, 0)
        self.batch_size = batch_size
        self.max_retries = max_retries
        if transport is None:
            from ..runtime import default_transport

            transport = default_transport()
        self.transport = transport
        self.backoff = backoff
        self.timeout = timeout

    async def embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for i in range(0, len(texts), self.batch_size):
            out.extend(await self._batch(list(texts[i : i + self.batch_size])))
        return out

    async def _post(self, body: bytes) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = f"{self.base_url}/embeddings"
        last = "no attempt"
        status: int | None = None
        for attempt in range(self.max_retries + 1):
            delay = self.backoff * (2**attempt) * (0.5 + random.random() / 2)
            try:
                resp = await self.transport.request(
                    "POST", url, headers=headers, body=body, timeout=self.timeout
                )
            except TransportError as e:
                last, status = f"transport error: {e}", None
            else:
                if resp.status == 200:
                    try:
                        return resp.json()
                    except ValueError as e:
                        raise EmbeddingError(f"{url}: answer is not JSON", status=200) from e
                status = resp.status
                last = f"HTTP {resp.status}: {resp.text[:300]}"
                if resp.status not in _RETRY_STATUSES:
                    raise EmbeddingError(f"{url}: {last}", status=status)
                after = resp.header("Retry-After")
                if after and after.strip().isdigit():
                    delay = min(float(after), 30.0)
            if attempt < self.max_retries:
                await asyncio.sleep(delay)
        raise EmbeddingError(
            f"{url}: gave up after {self.max_retries + 1} attempts; last: {last}", status=status
        )

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        payload: dict[str, Any] = {"model": self.model, "input": texts}
        if self._send_dimensions:
            payload["dimensions"] = self._send_dimensions
        data = await self._post(json.dumps(payload).encode("utf-8"))
        try:
            items = sorted(data["data"], key=lambda d: d.get("index", 0))
            vecs = [[float(x) for x in d["embedding"]] for d in items]
        except (KeyError, TypeError, ValueError) as e:
            raise EmbeddingError(f"malformed embeddings answer: {str(data)[:200]}") from e
        if len(vecs) != len(texts):
            raise EmbeddingError(f"asked for {len(texts)} embeddings, got {len(vecs)}")
        if not self.dimensions and vecs:
            self.dimensions = len(vecs[0])
        for v in vecs:
            if len(v) != self.dimensions:
                raise EmbeddingError(
                    f"model {self.model!r} returned vectors of {len(v)} dimensions, "
                    f"expected {self.dimensions}"
                )
        return vecs


def vector_literal(vec: Sequence[float]) -> str:
    """A vector as DuckDB list text (``[0.1,0.2]``), to bind as one string and ``CAST(? AS FLOAT[])``."""
    return "[" + ",".join(map(repr, map(float, vec))) + "]"


def query_literal(vec: Sequence[float]) -> str:
    """A query vector l2-normalised, as ``vector_literal`` text (bind it to ``q.v`` of ``cosine_sql``)."""
    norm = math.sqrt(math.fsum(float(x) * float(x) for x in vec))
    return vector_literal([float(x) / norm for x in vec] if norm > 0 else vec)


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


def semantic_ctes(qv: str, where: str, *, one_cosine: bool, top: str = "") -> str:
    """The CTEs ``q`` (the query vector ``qv``) and ``sem``: ``message_id``, ``created_at``,
    ``sim`` (the own vector's cosine) and ``rsim`` (the ranking cosine, ``embed.rank_cosine_sql``)
    of the ``embeddings e`` rows that pass ``where``. With ``one_cosine`` the scan computes
    ``rsim`` alone and ``sim`` is computed for the rows ``top`` (an ORDER BY and LIMIT over
    ``rsim``) keeps, every row for ``top=""``: the caller's ranking must sort within them.
    ``embed.ONE_COSINE_FROM`` says when that pays."""
    if not one_cosine:
        return (
            f"q AS (SELECT {qv} AS v),\n"
            f"sem0 AS (SELECT e.message_id, e.created_at, {cosine_sql()} AS sim, "
            f"{cosine_sql(context=True)} AS csim FROM embeddings e CROSS JOIN q WHERE {where}),\n"
            "sem AS (SELECT message_id, created_at, sim, coalesce(csim, sim) AS rsim FROM sem0)"
        )
    return (
        f"q AS (SELECT {qv} AS v),\n"
        f"sem0 AS (SELECT e.message_id, e.created_at, e.vec, e.scale, {rank_cosine_sql()} AS rsim "
        f"FROM embeddings e CROSS JOIN q WHERE {where}),\n"
        f"sem AS (SELECT t.message_id, t.created_at, {cosine_sql('t')} AS sim, t.rsim "
        f"FROM (SELECT * FROM sem0 {top}) t CROSS JOIN q)"
    )


def calibration_of(embedder: Any) -> tuple[float, float]:
    """``(lo, hi)``: the raw cosine an embedder's calibrated 0 and 1 stand for
    (``(0, 1)``, the identity, for an embedder without ``calibration``)."""
    try:
        cal = getattr(embedder, "calibration", None)
    except EmbeddingError:
        return 0.0, 1.0
    if not cal:
        return 0.0, 1.0
    lo, hi = cal
    return float(lo), float(hi)


def contextualize(vec: Sequence[float], prev: Sequence[float] | None, weight: float) -> list[float]:
    """``vec`` plus ``weight`` times the previous message's vector, l2-normalised:
    a stored message carries a little of the turn it answers. Deterministic."""
    if prev is None or weight <= 0:
        return list(vec)
    out = [a + weight * b for a, b in zip(vec, prev)]
    norm = math.sqrt(math.fsum(map(operator.mul, out, out)))
    return [x / norm for x in out] if norm > 0 else out


async def _vectors(embedder: Embedder, texts: list[str]) -> dict[str, list[float]]:
    """One vector per distinct text (each text embedded once), dimensions checked."""
    uniq = list(dict.fromkeys(texts))
    vecs = await embedder.embed(uniq)
    if len(vecs) != len(uniq):
        raise EmbeddingError(f"asked for {len(uniq)} embeddings, got {len(vecs)}")
    for v in vecs:
        if len(v) != embedder.dimensions:
            raise EmbeddingError(
                f"embedder {embedder.model!r} returned {len(v)} dimensions, expected {embedder.dimensions}"
            )
    return dict(zip(uniq, vecs))


async def embed_messages(
    embedder: Embedder, items: Sequence[tuple[str, str, str | None]]
) -> list[list[float]]:
    """The in-context vectors of ``(message_id, text, previous_text)`` items: each text's
    vector, mixed with the previous message's when the embedder has a
    ``context_weight`` (see ``contextualize``). Checks the dimensions."""
    weight = float(getattr(embedder, "context_weight", 0.0) or 0.0)
    by_text = await _vectors(
        embedder, [t for _, t, _ in items] + ([p for _, _, p in items if p is not None] if weight > 0 else [])
    )
    return [
        contextualize(by_text[t], by_text[p] if (weight > 0 and p is not None) else None, weight)
        for _, t, p in items
    ]


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
    by_text = await _vectors(
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
