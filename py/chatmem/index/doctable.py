"""``DocTable``: every doc's length (index terms), and while the index is small enough its
message id and time too, kept in Python by the query index (``figures.KeywordFigures.read_docs``
fills it, so does a derivation from scratch, appends extend it, a delete forgets it), so that a
keyword search reads its postings without joining ``docs`` for their lengths, and names its
winners without a statement. Nothing here is durable."""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Any

__all__ = ["DOC_CACHE", "DOC_PAGE", "LENGTHS_CACHE", "LENGTHS_PAGE", "DocTable", "extended"]

#: indexes of at most this many docs keep every doc's message id and time (``DocTable``)
DOC_CACHE = 1_500_000
#: docs read per statement when they are read whole (a search waits for at most one page)
DOC_PAGE = 2_000
#: indexes of at most this many docs keep at least every doc's length (4-8 bytes a doc)
LENGTHS_CACHE = 4_000_000
#: docs read per statement when only their lengths are read
LENGTHS_PAGE = 25_000


class DocTable:
    """Every doc's length (BM25's ``dl``) by doc number (docs are numbered densely from
    0; a number not in use has length -1), and with ``names`` its ``(message_id,
    created_at)``: the ids' UTF-8 in one buffer with an end offset per doc (a number
    set again after it was passed, which only a reused number is, in a small dict),
    about 45 bytes a doc for a 26-character id; without ``names``, one array."""

    def __init__(self, names: bool = True) -> None:
        self.names = names
        self.lens = array("l")
        self.times = array("q")
        self._blob = bytearray()
        self._ends = array("l")
        self._moved: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.lens)

    def add(self, doc: int, message_id: str, created_at: int, doc_len: int) -> None:
        n = len(self.lens)
        if doc < n:
            self.lens[doc] = doc_len
            if self.names:
                self._moved[doc] = message_id
                self.times[doc] = created_at
            return
        if doc > n:  # numbers not in use
            self.lens.extend([-1] * (doc - n))
            if self.names:
                self._ends.extend([len(self._blob)] * (doc - n))
                self.times.extend([0] * (doc - n))
        self.lens.append(doc_len)
        if self.names:
            self._blob += message_id.encode()
            self._ends.append(len(self._blob))
            self.times.append(created_at)

    def lengths_only(self) -> None:
        """Keep only the lengths from now on (the index grew past ``DOC_CACHE``)."""
        self.names = False
        self.times, self._blob, self._ends, self._moved = array("q"), bytearray(), array("l"), {}

    def get(self, doc: int) -> tuple[str, int] | None:
        if not self.names or not 0 <= doc < len(self.lens) or self.lens[doc] < 0:
            return None
        mid = self._moved.get(doc)
        if mid is None:
            mid = self._blob[self._ends[doc - 1] if doc else 0 : self._ends[doc]].decode()
        return mid, self.times[doc]

    def length(self, doc: int) -> int | None:
        """The doc's length in index terms (None for a number not in use)."""
        n = self.lens[doc] if 0 <= doc < len(self.lens) else -1
        return None if n < 0 else n


def extended(table: DocTable | None, docs: Iterable[tuple[int, str, Any, int]]) -> DocTable | None:
    """``table`` with ``docs`` (doc, message id, time, length) added: past ``DOC_CACHE`` (or
    for a doc without a time) only the lengths are kept, past ``LENGTHS_CACHE`` nothing (None)."""
    if table is None:
        return None
    for doc, mid, created, dl in docs:
        if doc >= LENGTHS_CACHE:
            return None
        if table.names and (created is None or doc >= DOC_CACHE):
            table.lengths_only()
        table.add(doc, mid, int(created or 0), int(dl))
    return table
