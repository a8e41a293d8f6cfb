"""The static embedding model's sums in JS (``web/js/token-sums.js``): the same exact
integers as ``StaticEmbedder.sums``, so the same vectors, without Python's arithmetic."""

from __future__ import annotations

import array
from collections.abc import Sequence

from pyodide.ffi import to_js  # type: ignore[import-not-found]

from ...embedding.static import StaticEmbedder, TokenSums
from .bridge import bridge

__all__ = ["js_token_sums"]


def js_token_sums(model: StaticEmbedder) -> TokenSums:
    """A ``TokenSums`` over ``model``'s table, copied into JS once."""
    dim = model.dimensions
    summer = bridge().tokenSums(to_js(model.table_bytes()), dim, to_js(array.array("i", model.weights)))

    def sums(texts: list[list[int]]) -> list[Sequence[float]]:
        flat = array.array("i")
        offsets = array.array("i", [0])
        for ids in texts:
            flat.extend(ids)
            offsets.append(len(flat))
        res = summer(to_js(flat), to_js(offsets))
        out = array.array("d")
        out.frombytes(res.to_bytes())
        width = dim + 1
        return [out[i * width : (i + 1) * width] for i in range(len(texts))]

    return sums
