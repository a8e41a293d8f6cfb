"""``RarePostings``: the postings of the rarest terms, kept in Python for keyword search
(``figures.KeywordFigures.rare``; read in pages by ``read_rare_page``, kept exact by
appends). Nothing here is durable."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = ["RarePostings"]


class RarePostings(Mapping[int, tuple["array[int]", "array[int]"]]):
    """``tid -> (docs, tfs)`` of the rarest terms, held in two arrays for all of them
    (``add_page``) and a ``(start, count)`` pair of ints a term: no Python container per
    term or posting for the cyclic collector to scan (two arrays and a tuple a term,
    2,000,000 postings of 27,000 terms, made each of its collections 80-90 ms in the
    page). Postings appended after the read (``append``) are kept apart, per term.
    ``get`` gives a term's postings as two new arrays."""

    __slots__ = ("_docs", "_tfs", "_at", "_more")

    def __init__(self) -> None:
        self._docs: array[int] = array("i")
        self._tfs: array[int] = array("i")
        self._at: dict[int, tuple[int, int]] = {}
        self._more: dict[int, tuple[array[int], array[int]]] = {}

    def add_page(self, tids: Iterable[int], counts: Iterable[int], docs: array[int], tfs: array[int]) -> None:
        """Keep a page read from the index: each term's ``count`` postings, in order, in
        ``docs`` and ``tfs``."""
        at = len(self._docs)
        self._docs.extend(docs)
        self._tfs.extend(tfs)
        for t, n in zip(tids, counts):
            self._at[int(t)] = (at, int(n))
            self._more.pop(int(t), None)
            at += int(n)

    def append(self, tid: int, doc: int, tf: int) -> None:
        """A posting an append added to a kept term."""
        more = self._more.get(tid)
        if more is None:
            more = self._more[tid] = (array("i"), array("i"))
        more[0].append(doc)
        more[1].append(tf)

    def get(self, tid: int, default: Any = None) -> Any:
        place = self._at.get(tid)
        if place is None:
            return default
        at, n = place
        docs, tfs = self._docs[at : at + n], self._tfs[at : at + n]
        more = self._more.get(tid)
        if more is not None:
            docs.extend(more[0])
            tfs.extend(more[1])
        return docs, tfs

    def __getitem__(self, tid: int) -> tuple[array[int], array[int]]:
        got = self.get(tid)
        if got is None:
            raise KeyError(tid)
        return got  # type: ignore[no-any-return]

    def __contains__(self, tid: object) -> bool:
        return tid in self._at

    def __iter__(self) -> Iterator[int]:
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._at)
