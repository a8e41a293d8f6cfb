"""``VectorPartitions``: the ``embeddings`` rows one search filter admits, copied once.

A filtered semantic search (``character_ids=[...]``, ``session_ids``, ``roles``, a time
range) reads the vectors of every row, though it keeps few: DuckDB reads a list column
whole, whatever the filter. Where the engine runs in this process (CPython's ``duckdb``),
the rows a filter admits are copied into a temporary table the first time that filter is
asked, and later searches with it scan the copy alone.

A copy stays exact:

- rows appended to ``embeddings`` since it was brought up to date are added before it is
  read (by ``rowid``, which only grows as rows are appended);
- any other write to ``embeddings`` (a delete, a rebuild, a rolled-back transaction:
  ``DuckDBEngine.embeddings_rewritten``) or to the sessions' fields a filter reads
  (``KeywordFigures.verdict_epoch``) drops every copy.

Below ``PARTITION_FROM`` vectors a scan is cheap and nothing is copied; a filter that
admits more than half the rows is not copied either (scanning the table costs as much).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .figures import KeywordFigures
from .sql_engine import DuckDBEngine

__all__ = ["MAX_PARTITIONS", "PARTITION_FROM", "VectorPartitions"]

#: from this many vectors on, a filtered scan reads a copy of the rows its filter admits
PARTITION_FROM = 2_000
#: copies kept at once; together they hold at most as many rows as ``embeddings`` (the
#: least recently used goes first)
MAX_PARTITIONS = 16
#: a filter admitting more than this share of the rows is scanned in the table
_WORTH = 0.5


@dataclass(slots=True)
class _Partition:
    #: the temporary table, None when the filter admits too much to be worth a copy
    table: str | None
    #: the largest ``embeddings`` rowid the copy has seen
    rowid: int
    #: ``DuckDBEngine.embeddings_appended`` when it was brought up to date
    appended: int
    #: rows in the copy
    rows: int = 0


class VectorPartitions:
    """The copies of one index's ``embeddings`` rows, one per filter (see the module)."""

    def __init__(self, engine: DuckDBEngine, figures: KeywordFigures, lock: asyncio.Lock):
        self._engine = engine
        self._figures = figures
        self._lock = lock
        self._parts: OrderedDict[tuple[str, tuple[Any, ...]], _Partition] = OrderedDict()
        self._epoch = self._current_epoch()
        self._made = 0
        #: rows in ``embeddings`` when last counted
        self._total = 0

    def _current_epoch(self) -> tuple[int, int]:
        return (self._engine.embeddings_rewritten, self._figures.verdict_epoch)

    async def table_for(self, where: str, params: list[Any], vectors: int) -> str | None:
        """The temporary table holding exactly the ``embeddings e`` rows that pass ``where``
        (a condition over ``e``, bound by ``params``), or None: scan ``embeddings``."""
        if vectors < PARTITION_FROM:
            return None
        key = (where, tuple(params))
        async with self._lock:
            if self._current_epoch() != self._epoch:
                await self._drop_all()
            part = self._parts.get(key)
            if part is None:
                part = await self._make(where, params)
                self._parts[key] = part
                while len(self._parts) > 1 and (
                    len(self._parts) > MAX_PARTITIONS
                    or sum(p.rows for p in self._parts.values()) > self._total
                ):
                    _, old = self._parts.popitem(last=False)
                    await self._drop(old)
            else:
                self._parts.move_to_end(key)
                if part.table is not None and part.appended != self._engine.embeddings_appended:
                    await self._top_up(part, where, params)
            # the statements above are this class's own: what they count is not a change
            self._epoch = self._current_epoch()
            return part.table

    async def _make(self, where: str, params: list[Any]) -> _Partition:
        ex = self._engine.execute
        appended = self._engine.embeddings_appended
        rows = await ex("SELECT coalesce(max(rowid), -1) AS last, count(*) AS n FROM embeddings")
        last, self._total = int(rows[0]["last"]), int(rows[0]["n"])
        self._made += 1
        table = f"vector_partition_{self._made}"
        made = await ex(
            f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT * FROM embeddings e "
            f"WHERE e.rowid <= {last} AND ({where})",
            params,
        )
        kept = _count(made)
        if kept > self._total * _WORTH:
            await ex(f"DROP TABLE IF EXISTS {table}")
            return _Partition(None, last, appended)
        return _Partition(table, last, appended, kept)

    async def _top_up(self, part: _Partition, where: str, params: list[Any]) -> None:
        ex = self._engine.execute
        appended = self._engine.embeddings_appended
        rows = await ex("SELECT coalesce(max(rowid), -1) AS last, count(*) AS n FROM embeddings")
        last, self._total = int(rows[0]["last"]), int(rows[0]["n"])
        if last > part.rowid:
            added = await ex(
                f"INSERT INTO {part.table} SELECT * FROM embeddings e "
                f"WHERE e.rowid > {part.rowid} AND e.rowid <= {last} AND ({where})",
                params,
            )
            part.rows += _count(added)
        part.rowid, part.appended = last, appended

    async def _drop(self, part: _Partition) -> None:
        if part.table is not None:
            await self._engine.execute(f"DROP TABLE IF EXISTS {part.table}")

    async def _drop_all(self) -> None:
        for part in self._parts.values():
            await self._drop(part)
        self._parts.clear()


def _count(result: list[dict[str, Any]]) -> int:
    """The rows a ``CREATE TABLE … AS`` or ``INSERT`` wrote (DuckDB answers ``Count``)."""
    return int(next(iter(result[0].values()))) if result else 0
