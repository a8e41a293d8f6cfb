"""What searching reads of an index, as a typed protocol.

Search, scoring, fusion, retrieval and the embedding of missing vectors take an index
as ``SearchIndex``: a tab's own ``QueryIndex``, or a guest's ``RemoteQueryIndex`` (the
owner's index, asked over the tab share). The figures a search keeps in Python (terms'
postings, the doc table, the rarest terms' postings, filter verdicts) are the index's,
kept exact by its writes; a guest forgets them at every query, since the owner writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from ..embedding.embedders import Embedder
from .doctable import DocTable
from .figures import KeywordFigures
from .nearest import NearestFilter
from .rare import RarePostings
from .sql_engine import SQLEngine

__all__ = ["SearchIndex"]


class SearchIndex(Protocol):
    """An index a search can be run on (``QueryIndex`` and its guest view)."""

    engine: SQLEngine
    embedder: Embedder | None
    #: ``(messages with a vector, messages)`` as of the last embedding batch
    embed_progress: tuple[int, int]

    @property
    def keeps_docs(self) -> bool:
        """Whether docs read by a search are kept across searches (not in a guest's view)."""
        ...

    @property
    def in_thread(self) -> bool:
        """Whether the engine runs in this thread (CPython's ``duckdb``), where a statement
        is cheap; in the page each is a round trip to the engine's worker."""
        ...

    @property
    def columnar(self) -> bool:
        """Whether the engine answers a read column by column (the page's)."""
        ...

    @property
    def embedded(self) -> set[tuple[str, int]]:
        """The ``(model, dimensions)`` whose every message has a vector (until a write)."""
        ...

    @property
    def write_lock(self) -> asyncio.Lock:
        """Held by every write to the index's tables."""
        ...

    @property
    def doc_cache(self) -> Any:
        """``{doc: (message_id, created_at, ...)}`` (``.get``) of every doc, or of those read."""
        ...

    @property
    def postings_cache(self) -> dict[int, list[tuple[int, int, int]]]:
        """``{tid: [(doc, tf, dl)]}`` of the terms a search read."""
        ...

    @property
    def doc_lengths(self) -> DocTable | None:
        """Every doc's length, once read whole; else None."""
        ...

    @property
    def rare_postings(self) -> RarePostings:
        """``{tid: (docs, tfs)}`` of the rarest terms, once read (else empty)."""
        ...

    @property
    def verdicts(self) -> KeywordFigures:
        """Which docs each search filter admits, as far as judged."""
        ...

    def answering(self) -> AbstractAsyncContextManager[Any, Any]:
        """Entered by every search: the index's background reads wait until none is under way."""
        ...

    async def setup(self) -> None: ...

    async def execute(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]: ...

    async def execute_small(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]: ...

    async def execute_columns(self, sql: str, params: list[Any] | None = None) -> list[list[Any]]: ...

    async def vector_table(self, where: str, params: list[Any], vectors: int) -> str | None: ...

    async def nearest(
        self,
        model_key: int,
        dim: int,
        vector: Sequence[float],
        k: int,
        rows: int,
        filters: NearestFilter | None = None,
    ) -> list[list[Any]] | None: ...

    async def bm25_stats(self) -> tuple[int, float]: ...

    async def term_stats(self, terms: Iterable[str]) -> dict[str, tuple[int, int]]: ...

    async def records(self, ids: list[str]) -> list[dict[str, Any] | None]: ...

    async def embed_missing(
        self,
        embedder: Embedder,
        *,
        session_id: str | None = None,
        batch_size: int = 256,
        limit: int | None = None,
    ) -> int: ...

    def remember_postings(self, postings: dict[int, list[tuple[int, int, int]]]) -> None: ...

    def remember_docs(self, docs: dict[int, tuple[str, int, int]]) -> None: ...
