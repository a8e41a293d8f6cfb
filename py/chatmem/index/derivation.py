"""A derivation from scratch done where the records and the engine are, with Python
supplying only the terms: the page's (``web/js/derive.js``), where the records go from
IndexedDB to DuckDB-Wasm without crossing into Python.

An ``EngineDerivation`` reads the store chunk by chunk and splits the plain ASCII texts
into words itself (the same words as ``tokenize.words``), and may stem them itself (the
page does, with Snowball's generated JavaScript of the same release as the Python
package); for each chunk it asks for the terms of the words it has no terms for
(``tokenize.terms_of_word``, one call per distinct word) and for the words of the other
texts (``tokenize.words``), then numbers the terms, counts the postings and loads ``messages``,
``docs``, ``postings`` and finally ``terms`` in bulk. ``derive`` drives it and answers
the docs as numbered (``DocTable``), as ``keywords.stream_messages`` does for the records
it is given: a rebuild then sorts and counts the same way either way.

Nothing here is durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from ..scheduling.settle import settle
from ..text.tokenize import terms_of_word, words
from .doctable import DocTable, extended
from .keywords import stage_statement
from .sql_engine import EngineDerivation, SQLEngine

__all__ = ["Started", "derive", "run_derivation"]


class Started:
    """A derivation whose ``derive`` runs from now on: one begun while its engine opens
    (reading, splitting and counting meanwhile; its loads wait for ``run``), or one made
    with its engine. ``run`` gives it the engine once its tables are made and answers
    what ``derive`` does; ``cancel`` stops it (its loads are dropped)."""

    def __init__(self, d: EngineDerivation):
        self.d = d
        self.ms: dict[str, float] = {}
        self.task = asyncio.ensure_future(derive(d, self.ms))

    async def run(self, engine: Any, ms: dict[str, float] | None = None) -> tuple[DocTable | None, bool]:
        try:
            await self.d.attach(engine)
        except BaseException:
            await self.cancel()
            raise
        out = await self.task
        if ms is not None:
            for k, v in self.ms.items():
                ms[k] = ms.get(k, 0.0) + v
        return out

    async def cancel(self) -> None:
        self.task.cancel()
        await settle(self.task)


async def derive(d: EngineDerivation, ms: dict[str, float] | None = None) -> tuple[DocTable | None, bool]:
    """Run ``d`` to its end; the docs as numbered (None past ``doctable.LENGTHS_CACHE``), and
    whether ``postings`` went in sorted by (tid, doc), in one run or in several that follow
    each other in doc order (then the caller need not sort them: see derive.js ``hold``).
    ``ms`` gains the derivation's phases; its ``stems`` adds the time spent here on terms."""
    known: set[str] = set()
    table: DocTable | None = DocTable()
    spent = 0.0
    try:
        while (chunk := await d.next()) is not None:
            t = time.perf_counter()
            hard = [words(text) for text in chunk["hard"]]
            new = [w for w in chunk["words"] if w not in known]
            new += [w for ws in hard for w in ws if w not in known]
            terms = {w: terms_of_word(w) for w in new}
            known.update(terms)
            spent += time.perf_counter() - t
            docs = await d.feed(terms, hard)
            table = extended(table, zip(docs["doc"], docs["id"], docs["created"], docs["len"]))
        got = await d.finish()
    except BaseException:
        await settle(asyncio.ensure_future(d.abort()))
        raise
    if ms is not None:
        for k, v in got.items():
            if k not in ("terms", "docs", "sorted", "runs"):
                ms[k] = ms.get(k, 0.0) + float(v)
        ms["stems"] = ms.get("stems", 0.0) + spent * 1000
    return table, bool(got.get("sorted"))


async def run_derivation(
    engine: SQLEngine,
    d: EngineDerivation | Started,
    ms: dict[str, float] | None = None,
    *,
    compress: bool = True,
) -> tuple[DocTable | None, bool]:
    """Derive into ``engine``'s (empty) keyword tables with ``d``, begun already or not:
    the messages go through ``keywords.STAGE``, made here (``finish_derivation`` makes
    ``docs`` and ``messages`` of it; ``compress`` as for the engine's tables), or, when
    ``d.texts_later``, straight into ``docs``. Answers what ``derive`` does.

    Into an in-memory database in one transaction (the page's engine, whose
    ``checkpoint_threshold`` is 1 MB, checkpointed it at each load: the loads of
    100,000 messages 0.8-1.2 s -> 1.4-1.7 s); into a file as it goes (one transaction
    held the whole load in memory: at 1,000,000 messages the renderer's peak rose
    from 2.0 to 2.8 GB)."""
    rows = await engine.execute(
        "SELECT path IS NULL AS mem FROM duckdb_databases() WHERE database_name = current_database()"
    )
    async with _one_transaction(engine, bool(rows and rows[0]["mem"])):
        if not (d.d if isinstance(d, Started) else d).texts_later:
            await engine.execute(stage_statement(compress=compress))
        return await (d if isinstance(d, Started) else Started(d)).run(engine, ms)


@contextlib.asynccontextmanager
async def _one_transaction(engine: SQLEngine, on: bool) -> AsyncIterator[None]:
    """The block's statements in one transaction when ``on``, else each on its own."""
    if not on:
        yield
        return
    await engine.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):  # a failed statement: end what is left
            await engine.execute("ROLLBACK")
        raise
    await engine.execute("COMMIT")
