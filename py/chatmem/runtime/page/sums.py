"""The static embedding model's sums in JS (``web/js/token-sums.js``), in a worker of their
own: the same exact integers as ``StaticEmbedder.sums``, so the same vectors, without
Python's arithmetic and off the page's main thread (which only tokenises)."""

from __future__ import annotations

import array
import asyncio
from collections.abc import Sequence
from typing import Any

from pyodide.ffi import to_js  # type: ignore[import-not-found]

from ...embedding.static import StaticEmbedder, TokenSums
from ...errors import EmbeddingError
from .bridge import bridge

__all__ = ["js_token_sums"]

#: bytes of the table sent to the worker between two yields to the event loop (a copy out
#: of Python's memory: about 2 ms each)
_PART = 1 << 20


def js_token_sums(model: StaticEmbedder) -> TokenSums:
    """A ``TokenSums`` over ``model``'s table, moved to a worker on the first call (in
    pieces, yielding between them; an empty call only does that)."""
    dim = model.dimensions
    started: list[asyncio.Future[Any]] = []

    async def start() -> Any:
        worker = bridge().tokenSumsWorker()
        table = model.table_bytes()
        for i in range(0, len(table), _PART):
            worker.part(to_js(table[i : i + _PART]))
            await asyncio.sleep(0)
        worker.init(dim, to_js(array.array("i", model.weights)))
        return worker

    async def sums(texts: list[list[int]]) -> list[Sequence[float]]:
        if not started:
            started.append(asyncio.ensure_future(start()))
        worker = await started[0]
        if not texts:
            return []
        flat = array.array("i")
        offsets = array.array("i", [0])
        for ids in texts:
            flat.extend(ids)
            offsets.append(len(flat))
        try:
            res = await worker.sums(to_js(flat), to_js(offsets))
        except Exception as e:  # the worker could not start or failed: a JS error, translated here
            raise EmbeddingError(f"the embedding model's sums failed: {e}") from e
        out = array.array("d")
        out.frombytes(res.to_bytes())
        width = dim + 1
        return [out[i * width : (i + 1) * width] for i in range(len(texts))]

    return sums
