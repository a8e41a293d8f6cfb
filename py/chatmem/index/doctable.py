"""``DocTable``: every doc's message id, time and length (index terms), kept in Python by the query index
(``figures.KeywordFigures.read_docs`` fills it, appends extend it, a delete forgets it),
so that a keyword search names its winners without a statement. Nothing here is durable."""

from __future__ import annotations

from array import array

__all__ = ["DOC_CACHE", "DOC_PAGE", "DocTable"]

#: indexes of at most this many docs keep every doc's message id and time (``DocTable``)
DOC_CACHE = 250_000
#: docs read per statement when they are read whole (a search waits for at most one page)
DOC_PAGE = 2_000


class DocTable:
    """Every doc's ``(message_id, created_at)`` by doc number (docs are numbered
    densely from 0; a number not in use is None) and its length (BM25's ``dl``):
    a list and two arrays, about 95 bytes a doc."""

    def __init__(self) -> None:
        self.ids: list[str | None] = []
        self.times = array("q")
        self.lens = array("l")

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, doc: int, message_id: str, created_at: int, doc_len: int) -> None:
        if doc >= len(self.ids):
            grow = doc + 1 - len(self.ids)
            self.ids.extend([None] * grow)
            self.times.extend([0] * grow)
            self.lens.extend([0] * grow)
        self.ids[doc] = message_id
        self.times[doc] = created_at
        self.lens[doc] = doc_len

    def get(self, doc: int) -> tuple[str, int] | None:
        mid = self.ids[doc] if 0 <= doc < len(self.ids) else None
        return None if mid is None else (mid, self.times[doc])

    def length(self, doc: int) -> int | None:
        """The doc's length in index terms (None for a number not in use)."""
        return self.lens[doc] if 0 <= doc < len(self.ids) and self.ids[doc] is not None else None
