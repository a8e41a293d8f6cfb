"""The query index: a derived DuckDB copy of the store for SQL, search and retrieval.

``QueryIndex`` over an ``SQLEngine`` (``DuckDBEngine`` on CPython, DuckDB-Wasm
in the browser); ``search`` and ``retrieve`` read it; ``check_read_only``
guards user SQL. The embedders that make its vectors are ``chatmem.embedding``'s.
"""

from __future__ import annotations

from .query_index import EVENT_KINDS, QueryIndex
from .retrieve import HybridWeights, RetrievalConfig, retrieve
from .search import MODES, SearchHit, search
from .sql_engine import DuckDBEngine, SQLEngine
from .sqlguard import check_read_only

__all__ = [
    "EVENT_KINDS",
    "MODES",
    "DuckDBEngine",
    "HybridWeights",
    "QueryIndex",
    "RetrievalConfig",
    "SQLEngine",
    "SearchHit",
    "check_read_only",
    "retrieve",
    "search",
]
