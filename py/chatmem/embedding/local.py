"""``LocalEmbedder``: the default embedder, the static model loaded on first use.

Its ``model`` and ``dimensions`` are known without loading anything, so an
index can be set up with it at once; the model file (about 12 MB) is read on
the first ``embed``: from ``chatmem/embedding/data/`` on CPython, fetched from
the site in the browser (the service worker caches it then, never before the
page asked for semantic or hybrid search). ``default_embedder()`` gives it
when the model is available, else ``HashingEmbedder``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..errors import EmbeddingError
from ..scheduling.timeslice import SLICE_S, TimeSlicer
from .static import StaticEmbedder, TokenSums, find_model_file

__all__ = ["LOCAL_MODEL", "LocalEmbedder", "default_embedder"]

#: the name of the vectors the shipped static model makes (the index stores vectors per model)
LOCAL_MODEL = "minilm-l6-tokens-zipf-int8-v1"


def _runtime_loader() -> Callable[[], Awaitable[bytes]] | None:
    """The runtime's way to the model (the page fetches it), None to read the file."""
    from ..runtime import default_runtime

    return default_runtime().model_loader()


async def _pause() -> None:
    await asyncio.sleep(0)


def _runtime_sums(model: StaticEmbedder) -> TokenSums | None:
    """The runtime's faster sums for ``model`` (the page's, in JS), None for Python's."""
    from ..runtime import default_runtime

    return default_runtime().token_sums(model)


async def _load_bytes() -> bytes:
    loader = _runtime_loader()
    if loader is not None:
        return await loader()
    path = find_model_file()
    if path is None:
        raise EmbeddingError("the static embedding model is not built (run `python build.py build`)")
    return path.read_bytes()


class LocalEmbedder:
    """The shipped static model behind a lazy load (see the module docstring)."""

    model = LOCAL_MODEL
    dimensions = 384

    def __init__(self, loader: Callable[[], Awaitable[bytes]] | None = None):
        self._loader = loader or _load_bytes
        self._model: StaticEmbedder | None = None
        self._sums: TokenSums | None = None
        self._lock = asyncio.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    async def load(self) -> StaticEmbedder:
        """The model, read (or downloaded) once. ``EmbeddingError`` if it cannot be."""
        if self._model is None:
            async with self._lock:
                if self._model is None:
                    try:
                        data = await self._loader()
                    except EmbeddingError:
                        raise
                    except Exception as e:  # a fetch or file error, translated once here
                        raise EmbeddingError(f"could not load the embedding model: {e}") from e
                    m = await StaticEmbedder.parse(data, _pause)
                    if m.model != self.model or m.dimensions != self.dimensions:
                        raise EmbeddingError(f"model file holds {m.model!r}, expected {self.model!r}")
                    sums = _runtime_sums(m)
                    if sums is not None:
                        await sums([])  # an empty call sets the runtime's summer up (in steps)
                    self._sums = sums
                    self._model = m
        return self._model

    @property
    def context_weight(self) -> float:
        return self._model.context_weight if self._model is not None else 0.3

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """The vectors of ``texts``, yielding to the event loop every ``SLICE_S`` seconds
        (in the page: the interface never waits more than one slice for a batch)."""
        m = await self.load()
        out: list[list[float]] = []
        slicer = TimeSlicer()
        if self._sums is None:
            for t in texts:
                out.append(m.embed_one(t))
                await slicer.tick()
            return out
        # the runtime's sums (the page's, in a worker): tokenise for a slice and send that
        # part to be summed; while the worker sums it, make the previous part's vectors
        sums = self._sums
        chunk: list[list[int]] = []
        summing: asyncio.Future[list[Sequence[float]]] | None = None
        for i, t in enumerate(texts):
            chunk.append(m.token_ids(t))
            if slicer.spent() > SLICE_S or i == len(texts) - 1:
                sent = asyncio.ensure_future(sums(chunk))
                chunk = []
                await asyncio.sleep(0)  # the part goes to the worker now
                slicer.restart()
                if summing is not None:
                    await self._vectors(m, await summing, out, slicer)
                summing = sent
        if summing is not None:
            await self._vectors(m, await summing, out, slicer)
        return out

    @staticmethod
    async def _vectors(
        m: StaticEmbedder, sums: list[Sequence[float]], out: list[list[float]], slicer: TimeSlicer
    ) -> None:
        """The vectors of a summed part appended to ``out``, then a fresh slice."""
        slicer.restart()
        for s in sums:
            out.append(m.vector(s))
            await slicer.tick()
        await asyncio.sleep(0)
        slicer.restart()

    def embed_one(self, text: str) -> list[float]:
        """One vector, synchronously (the model must be loaded: ``await load()`` first)."""
        if self._model is None:
            raise EmbeddingError("the embedding model is not loaded yet: await load() first")
        return self._model.embed_one(text)

    def calibrate(self, similarity: float) -> float:
        if self._model is None:
            raise EmbeddingError("the embedding model is not loaded yet: await load() first")
        return self._model.calibrate(similarity)

    @property
    def calibration(self) -> tuple[float, float]:
        if self._model is None:
            raise EmbeddingError("the embedding model is not loaded yet: await load() first")
        return self._model.calibration


def default_embedder() -> Any:
    """``LocalEmbedder()`` when the static model is available (always in the page,
    on CPython once built), else ``HashingEmbedder()``."""
    if _runtime_loader() is not None or find_model_file() is not None:
        return LocalEmbedder()
    from .embedders import HashingEmbedder

    return HashingEmbedder()
