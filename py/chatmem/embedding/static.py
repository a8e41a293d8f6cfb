"""``StaticEmbedder``: a learned static (lookup-table) embedding model, in pure Python.

Every WordPiece token has one stored vector (int8 with a per-token scale); a
text's vector is the sum of its tokens' vectors, l2-normalised. The table is
distilled at build time from all-MiniLM-L6-v2 (each vocabulary token run
through the whole transformer), so it knows that "automobile" is near "car".
The arithmetic is plain Python floats in a fixed order: the same text gives
bit-for-bit the same vector on CPython and in Pyodide.

The model file (``chatmem-static-v1``): 8 magic bytes, a little-endian u32
header length, a JSON header (``model``, ``dimensions``, ``vocab``,
``calibration``), then ``len(vocab) * dimensions`` int8 values and
``len(vocab)`` float32 scales. Reading it is pure Python (``array``).

``calibrate(similarity)`` maps this model's raw cosine onto the scale the
original's thresholds were written for (0.75 for search, 0.7 for
retrieval: a paraphrase passes them, an unrelated message does not).
"""

from __future__ import annotations

import array
import json
import math
import operator
import struct
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable, Sequence

from ..errors import EmbeddingError
from .wordpiece import WordPiece

__all__ = ["MAGIC", "MODEL_FILE", "StaticEmbedder", "TokenSums", "find_model_file"]

MAGIC = b"CMSTAT01"
#: the file name of the default model, in ``chatmem/embedding/data/`` and the site's ``models/``
MODEL_FILE = "minilm-l6-static-v1.bin"
_MAX_TOKENS = 512
_WEIGHT_ONE = 1 << 20
_ROW_CACHE = 8192  # packed rows kept (3 KB each at 384 dimensions)
_STEP = 8192  # tokens read between two pauses of ``parse``


#: a faster way to the same integer sums (the page's, in a JS worker): for each text's token
#: ids (``StaticEmbedder.token_ids``), its ``dimensions`` sums of ``weight * value`` then the
#: sum of the weights, each an exact integer (held in a float below 2**53)
TokenSums = Callable[[list[list[int]]], Awaitable[list[Sequence[float]]]]


def find_model_file() -> Path | None:
    """The default model shipped beside this module (``data/``), if it was built."""
    p = Path(__file__).with_name("data") / MODEL_FILE
    return p if p.is_file() else None


class StaticEmbedder:
    """Text to vector by summing distilled token vectors (see the module docstring)."""

    def __init__(
        self,
        header: dict[str, Any],
        table: array.array[int],
        scales: array.array[float],
        *,
        weights: list[int] | None = None,
        tokenizer: WordPiece | None = None,
    ):
        self.model: str = str(header["model"])
        self.dimensions: int = int(header["dimensions"])
        vocab = header["vocab"]
        if len(table) != len(vocab) * self.dimensions or len(scales) != len(vocab):
            raise EmbeddingError(f"model file {self.model!r}: table size does not match its vocabulary")
        self.tokenizer = tokenizer or WordPiece(vocab)
        self._table = table
        self._weights = weights if weights is not None else self.weights_of(scales, 0, len(scales))
        self._rows: dict[int, int] = {}
        lo, hi = header.get("calibration", (0.0, 1.0))
        self.calibration: tuple[float, float] = (float(lo), float(hi))
        #: how much of the previous message's vector a stored message carries (see ``contextualize``)
        self.context_weight: float = float(header.get("context_weight", 0.0))
        for t in ("[CLS]", "[SEP]", "[PAD]"):
            if t in self.tokenizer.ids:
                self._weights[self.tokenizer.ids[t]] = 0

    # ------------------------------------------------------------------ loading
    @staticmethod
    def weights_of(scales: array.array[float], start: int, stop: int) -> list[int]:
        """The integer weights (20 bits) of tokens ``start:stop``: each per-token scale
        relative to the largest."""
        top = max(scales) if len(scales) else 1.0
        return [round(float(x) / top * _WEIGHT_ONE) if top > 0 else 0 for x in scales[start:stop]]

    @classmethod
    async def parse(cls, data: bytes, pause: Callable[[], Awaitable[None]]) -> StaticEmbedder:
        """``from_bytes`` in steps of a few milliseconds, awaiting ``pause()`` between them
        (in a page, the interface keeps answering while the model is read)."""
        await pause()
        header, start = cls._header(data)
        await pause()
        table, scales = cls._arrays(data, header, start)
        await pause()
        weights: list[int] = []
        for i in range(0, len(scales), _STEP):
            weights += cls.weights_of(scales, i, i + _STEP)
            await pause()
        vocab = header["vocab"]
        ids: dict[str, int] = {}
        for i in range(0, len(vocab), _STEP):
            ids.update(zip(vocab[i : i + _STEP], range(i, i + _STEP)))
            await pause()
        return cls(header, table, scales, weights=weights, tokenizer=WordPiece(vocab, ids=ids))

    @classmethod
    def from_bytes(cls, data: bytes) -> StaticEmbedder:
        """Parse a model file's bytes. ``EmbeddingError`` if it is not one."""
        header, start = cls._header(data)
        return cls(header, *cls._arrays(data, header, start))

    @staticmethod
    def _header(data: bytes) -> tuple[dict[str, Any], int]:
        """The JSON header and where the table starts."""
        if data[:8] != MAGIC or len(data) < 12:
            raise EmbeddingError("not a chatmem static embedding model (bad magic)")
        (n,) = struct.unpack("<I", data[8:12])
        try:
            header = json.loads(data[12 : 12 + n].decode("utf-8"))
        except ValueError as e:
            raise EmbeddingError("static embedding model: unreadable header") from e
        return header, 12 + n

    @staticmethod
    def _arrays(
        data: bytes, header: dict[str, Any], start: int
    ) -> tuple[array.array[int], array.array[float]]:
        """The int8 table and the float32 scales that follow the header."""
        v, d = len(header["vocab"]), int(header["dimensions"])
        view = memoryview(data)
        table = array.array("b")
        table.frombytes(view[start : start + v * d])
        scales = array.array("f")
        scales.frombytes(view[start + v * d : start + v * d + 4 * v])
        if sys.byteorder != "little":
            scales.byteswap()
        return table, scales

    @classmethod
    def load(cls, path: str | Path | None = None) -> StaticEmbedder:
        """Read a model file (default: the one shipped with chatmem). ``EmbeddingError`` if missing."""
        p = Path(path) if path is not None else find_model_file()
        if p is None or not p.is_file():
            raise EmbeddingError("the static embedding model is not built (run `python build.py build`)")
        return cls.from_bytes(p.read_bytes())

    # ------------------------------------------------------------------ embedding
    def _packed(self, i: int) -> int:
        """Token ``i``'s int8 row as one big integer of 64-bit lanes, each ``value + 128``."""
        hit = self._rows.get(i)
        if hit is not None:
            return hit
        dim = self.dimensions
        buf = bytearray(dim * 8)
        buf[0::8] = bytes((x + 128) & 0xFF for x in self._table[i * dim : (i + 1) * dim])
        packed = int.from_bytes(buf, "little")
        if len(self._rows) >= _ROW_CACHE:
            self._rows.clear()
        self._rows[i] = packed
        return packed

    def token_ids(self, text: str) -> list[int]:
        """The token ids of ``text`` that count: its first ``_MAX_TOKENS`` WordPiece tokens."""
        return self.tokenizer.encode(text)[:_MAX_TOKENS]

    @property
    def weights(self) -> list[int]:
        """Each token's integer weight (20 bits; 0 for the special tokens)."""
        return self._weights

    def table_bytes(self) -> memoryview:
        """The int8 rows, ``len(vocab) * dimensions`` bytes, row after row."""
        return memoryview(self._table).cast("B")

    def sums(self, ids: list[int]) -> list[int]:
        """``weight * value`` summed over the tokens, per dimension, then the sum of the weights.

        Exact integer arithmetic: every row is packed into one big integer (one
        64-bit lane per dimension, each ``value + 128``) and added with its
        integer weight, so a text costs one big-integer multiply-add per token
        and the result is the same on every machine (and in ``TokenSums``).
        """
        dim = self.dimensions
        acc = 0
        wsum = 0
        weights = self._weights
        for i in ids[:_MAX_TOKENS]:
            w = weights[i]
            if w:
                acc += w * self._packed(i)
                wsum += w
        if not wsum:
            return [0] * (dim + 1)
        lanes = array.array("Q")
        lanes.frombytes(acc.to_bytes(dim * 8, "little"))
        if sys.byteorder != "little":
            lanes.byteswap()
        off = 128 * wsum
        return [x - off for x in lanes] + [wsum]

    def vector(self, sums: Sequence[float]) -> list[float]:
        """The l2-normalised vector of ``sums`` (as ``sums`` or ``TokenSums`` give them)."""
        dim = self.dimensions
        if not sums[dim]:
            return [0.0] * dim
        vec = list(map(float, sums[:dim]))
        norm = math.sqrt(math.fsum(map(operator.mul, vec, vec)))
        return [x / norm for x in vec] if norm > 0 else vec

    def embed_ids(self, ids: list[int]) -> list[float]:
        """The l2-normalised weighted sum of the tokens' vectors (zeros for no token)."""
        return self.vector(self.sums(ids))

    def embed_one(self, text: str) -> list[float]:
        """One text's vector."""
        return self.embed_ids(self.token_ids(text))

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]

    def calibrate(self, similarity: float) -> float:
        """This model's cosine on the original's scale: ``lo`` maps to 0, ``hi`` to 1, linear, clipped to [-1, 1]."""
        lo, hi = self.calibration
        return max(-1.0, min(1.0, (similarity - lo) / (hi - lo)))
