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

``embed_messages`` gives the in-context vectors of messages (``contextualize``).
The local model (``StaticEmbedder``) is in ``embedding.static``.
"""

from __future__ import annotations

import asyncio
import json
import math
import operator
import random
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import EmbeddingError, TransportError, ValidationError
from ..http import Transport
from ..text.tokenize import norm_text

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "calibration_of",
    "contextualize",
    "embed_messages",
    "vectors_of",
]


@runtime_checkable
class Embedder(Protocol):
    """Text to vectors: ``embed(texts)`` gives one vector of ``dimensions`` floats per text."""

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


async def vectors_of(embedder: Embedder, texts: list[str]) -> dict[str, list[float]]:
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
    by_text = await vectors_of(
        embedder, [t for _, t, _ in items] + ([p for _, _, p in items if p is not None] if weight > 0 else [])
    )
    return [
        contextualize(by_text[t], by_text[p] if (weight > 0 and p is not None) else None, weight)
        for _, t, p in items
    ]
