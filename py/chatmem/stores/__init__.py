"""Durable stores behind ``Memory``: memory, SQLite (CPython) and IndexedDB (Pyodide).

Each implements ``Store`` (see ``base``); every write method is one atomic
transaction, and records are the plain dicts of ``chatmem.records.models``.
"""

from .base import Store
from .inprocess import MemoryStore

__all__ = ["Store", "MemoryStore"]
