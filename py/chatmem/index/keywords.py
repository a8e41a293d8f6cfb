"""The keyword tables of the query index: how a batch of messages enters and
leaves ``docs``, ``terms``, ``postings`` and ``stats``, keeping the figures a
search reads in Python (``figures.KeywordFigures``) exact.

A batch is tokenised once in Python (``schema.message_rows``); the engine gets
one bulk load of ``messages`` and one of a staging table (a row per message:
its doc id, its ``docs`` columns and its terms as one string). SQL derives the
rest, so no posting row crosses the boundary: ``docs``; the batch's new terms,
numbered after the highest ``tid``; the integer postings ``(tid, doc, tf)``,
sorted within the batch; the ``terms.df`` and ``stats`` counts.

A derivation from scratch (``stream_messages``, what a rebuild does) numbers the
term ids in Python instead (``TermIds``: a word's ids are memoised, one look-up a
word), so each chunk's staging rows carry term ids and SQL only counts integers
per doc; it tokenises a chunk while the engine loads the chunk before (in the
page DuckDB runs in its worker, beside the main thread), and yields to the event
loop every ``slices.SLICE_S`` while it tokenises.

Nothing here is durable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping
from enum import Enum
from typing import Any

from ..scheduling.settle import settle
from ..scheduling.timeslice import TimeSlicer
from ..text.tokenize import terms_of_word, words
from .doctable import DocTable, extended
from .figures import KeywordFigures
from .schema import INDEX_STATEMENTS, STAGE_COLUMNS, TABLES, message_row, message_rows, table_statement
from .sql_engine import SQLEngine, marks

__all__ = [
    "DerivedRows",
    "SORT_MESSAGES_MAX",
    "SORT_PART",
    "STAGE",
    "Prepared",
    "TermIds",
    "drop_sessions",
    "finish_derivation",
    "stage_statement",
    "lap",
    "load_messages",
    "prepare_messages",
    "store_messages",
    "stream_messages",
]

#: a derivation from scratch sorts the postings by term in parts of about this many rows:
#: DuckDB-Wasm has no temporary directory, so a sort must fit in memory at once
SORT_PART = 12_000_000
#: a derivation of more messages than this leaves ``messages`` in the store's order
#: (sorting them by time holds every message's text in memory at once)
SORT_MESSAGES_MAX = 250_000

_COLS = {name: [c for c, _ in cols] for name, cols in TABLES.items()}
_STAGE = [c for c, _ in STAGE_COLUMNS]
_MID, _CREATED, _LEN = _STAGE.index("message_id"), _STAGE.index("created_at"), _STAGE.index("doc_len")
_STAGE_DDL = "CREATE OR REPLACE TEMP TABLE stage (" + ", ".join(f"{c} {t}" for c, t in STAGE_COLUMNS) + ")"
_DOCS = ", ".join(_COLS["docs"])
#: one row per (term, doc) of the staged batch, with its tf
_STAGE_TERMS = (
    "CREATE OR REPLACE TEMP TABLE st AS SELECT term, doc, count(*)::INTEGER AS tf "
    "FROM (SELECT doc, unnest(string_split(toks, ' ')) AS term "
    "FROM stage WHERE toks <> '') GROUP BY term, doc"
)


def lap(ms: dict[str, float] | None, phase: str, since: float) -> float:
    """Add the milliseconds since ``since`` to ``ms[phase]`` (when ``ms``); the time now."""
    now = time.perf_counter()
    if ms is not None:
        ms[phase] = ms.get(phase, 0.0) + (now - since) * 1000
    return now


#: a batch tokenised in Python, ready for the engine: ``messages`` rows, staging rows, terms
Prepared = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[list[str]]]


class TermIds:
    """Term ids numbered in Python while an index is derived from scratch: each word maps
    to the ids of its terms as text (``tokenize.terms_of_word``: a stem, or a CJK run's
    bigrams), so a message's staging row carries its term ids and SQL counts integers
    (no string grouping, no join with ``terms``); one dictionary look-up per word, as
    the stems' memo costs. ``rows()`` are the ``terms`` rows, df left to the rebuild."""

    def __init__(self) -> None:
        self.tids: dict[str, int] = {}
        self.codes: dict[str, str] = {}

    def code(self, ws: list[str]) -> str:
        """The term ids of the words ``ws``, in order, joined by spaces."""
        codes = self.codes
        try:
            return " ".join(map(codes.__getitem__, ws))
        except KeyError:
            pass
        tids = self.tids
        for w in ws:
            if w not in codes:
                ids = []
                for t in terms_of_word(w):
                    tid = tids.get(t)
                    if tid is None:
                        tid = tids[t] = len(tids)
                    ids.append(str(tid))
                codes[w] = " ".join(ids)
        return " ".join(map(codes.__getitem__, ws))

    def rows(self) -> list[tuple[str, int, int]]:
        return [(t, i, 0) for t, i in self.tids.items()]


async def prepare_messages(
    records: list[dict[str, Any]], doc: int, ms: dict[str, float] | None = None, ids: TermIds | None = None
) -> Prepared:
    """Tokenise ``records`` (doc ids from ``doc`` on) into the rows ``store_messages`` loads
    (with ``ids``: staging rows of term ids, and no terms list); yields to the event loop
    every ``slices.SLICE_S`` (in the page this runs on the main thread, while the engine
    works in its worker). ``ms`` gains the time as ``tokenise``."""
    mrows: list[tuple[Any, ...]] = []
    srows: list[tuple[Any, ...]] = []
    toks: list[list[str]] = []
    slicer = TimeSlicer()
    t = time.perf_counter()
    spent = 0.0
    for rec in records:
        if ids is None:
            m, st, tk = message_rows(rec)
            toks.append(tk)
        else:
            m = message_row(rec)
            code = ids.code(words(m[-1]))
            st = (
                rec["id"],
                rec.get("sessionId"),
                rec.get("role"),
                rec.get("createdAt"),
                code.count(" ") + 1 if code else 0,
                code,
            )
        mrows.append(m)
        srows.append((doc,) + st)
        doc += 1
        if not doc & 63 and slicer.spent() > slicer.budget:
            spent += time.perf_counter() - t
            await slicer.tick()
            t = time.perf_counter()
    if ms is not None:
        ms["tokenise"] = ms.get("tokenise", 0.0) + (spent + time.perf_counter() - t) * 1000
    return mrows, srows, toks


async def store_messages(
    engine: SQLEngine,
    batch: Prepared,
    figures: KeywordFigures,
    *,
    counts: bool = True,
    first_tid: int = 0,
    ms: dict[str, float] | None = None,
    ids: bool = False,
) -> int:
    """Load a prepared batch: ``messages`` and the staging table in bulk, then ``docs``,
    new ``terms`` and ``postings`` (and, with ``counts``, the ``terms.df`` / ``stats``
    counts and ``figures``, ``first_tid`` being the first id new terms get) derived in
    SQL. Returns the number of postings added (0 without ``counts``: nobody needs it
    then). With ``ids`` the batch was prepared with ``TermIds``: only ``docs`` and the
    (unsorted) ``postings`` are made; the caller loads the terms and sorts. ``ms`` gains
    the milliseconds of loading (``load``) and deriving (``derive``)."""
    mrows, srows, toks = batch
    ex = engine.execute
    t = time.perf_counter()
    await ex(_STAGE_DDL)
    await engine.load_rows("messages", _COLS["messages"], mrows)
    await engine.load_rows("stage", _STAGE, srows)
    t = lap(ms, "load", t)
    await ex(f"INSERT INTO docs SELECT {_DOCS} FROM stage")
    if ids:
        # the staging rows hold term ids: count them; the terms, the order and df come after
        await ex(
            "INSERT INTO postings SELECT tid, doc, count(*)::INTEGER FROM (SELECT doc, "
            "CAST(w AS INTEGER) AS tid FROM (SELECT doc, unnest(string_split(toks, ' ')) AS w "
            "FROM stage WHERE toks <> '')) GROUP BY tid, doc"
        )
        await ex("DROP TABLE IF EXISTS stage")
        lap(ms, "derive", t)
        return 0
    await ex(_STAGE_TERMS)
    await ex(
        "INSERT INTO terms SELECT term, (SELECT coalesce(max(tid) + 1, 0) FROM terms) "
        "+ (row_number() OVER (ORDER BY term))::INTEGER - 1, 0 FROM (SELECT DISTINCT term FROM st) n "
        "WHERE NOT EXISTS (SELECT 1 FROM terms t WHERE t.term = n.term)"
    )
    await ex(
        "INSERT INTO postings SELECT t.tid, st.doc, st.tf FROM st JOIN terms t ON t.term = st.term "
        "ORDER BY t.tid, st.doc"
    )
    if counts:
        await ex(
            "UPDATE terms SET df = terms.df + d.c FROM (SELECT term, count(*)::INTEGER AS c FROM st "
            "GROUP BY term) d WHERE terms.term = d.term"
        )
        await ex(
            "UPDATE stats SET n = stats.n + g.n, total = stats.total + g.t FROM "
            "(SELECT count(*) AS n, coalesce(sum(doc_len), 0) AS t FROM stage) g"
        )
        figures.count(toks, [int(r[0]) for r in srows])
        figures.add_docs((r[0], str(r[_MID]), r[_CREATED], r[_LEN]) for r in srows)
        await figures.add_new(engine, first_tid)
    await ex("DROP TABLE IF EXISTS stage")
    await ex("DROP TABLE IF EXISTS st")
    lap(ms, "derive", t)
    return sum(len(set(tk)) for tk in toks) if counts else 0


async def load_messages(
    engine: SQLEngine,
    records: list[dict[str, Any]],
    figures: KeywordFigures,
    *,
    counts: bool = True,
    ms: dict[str, float] | None = None,
) -> int:
    """Tokenise ``records`` once and load them after the index's last doc
    (``prepare_messages`` then ``store_messages``). Returns the number of postings added."""
    base = await engine.execute(
        "SELECT (SELECT coalesce(max(doc) + 1, 0) FROM docs) AS b, "
        "(SELECT coalesce(max(tid) + 1, 0) FROM terms) AS t"
    )
    doc, first_tid = int(base[0]["b"]), int(base[0]["t"])
    batch = await prepare_messages(records, doc, ms)
    return await store_messages(engine, batch, figures, counts=counts, first_tid=first_tid, ms=ms)


async def _each(
    items: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
) -> AsyncIterator[Mapping[str, Any]]:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


async def stream_messages(
    engine: SQLEngine,
    messages: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
    figures: KeywordFigures,
    *,
    chunk: int = 20_000,
    ms: dict[str, float] | None = None,
) -> DocTable | None:
    """Load ``messages`` (records, read ``chunk`` at a time) into an empty index, without
    the counts and unsorted (a rebuild sorts and counts after), term ids numbered in
    Python (``TermIds``): each chunk is read and tokenised while the
    engine (in the page: DuckDB's worker, beside the main thread) loads and derives the
    chunk before. The engine is free when this returns or raises. Returns the docs as
    numbered here (``DocTable``; None past ``doctable.LENGTHS_CACHE``)."""
    doc = 0
    loading: asyncio.Future[int] | None = None
    ids = TermIds()
    table: DocTable | None = DocTable()

    async def add(records: list[dict[str, Any]]) -> None:
        nonlocal doc, loading, table
        batch = await prepare_messages(records, doc, ms, ids)
        table = extended(table, ((r[0], str(r[_MID]), r[_CREATED], r[_LEN]) for r in batch[1]))
        doc += len(records)
        if loading is not None:
            await loading
        loading = asyncio.ensure_future(store_messages(engine, batch, figures, counts=False, ms=ms, ids=True))

    try:
        part: list[dict[str, Any]] = []
        async for rec in _each(messages):
            part.append(dict(rec))
            if len(part) >= chunk:
                await add(part)
                part = []
        if part:
            await add(part)
        if loading is not None:
            await loading
        await engine.load_rows("terms", _COLS["terms"], ids.rows())
        return table
    finally:
        if loading is not None and not loading.done():
            await settle(loading)


#: where an engine's own derivation (``derivation.EngineDerivation``) loads the messages:
#: their ``messages`` columns plus ``doc`` and ``doc_len``, from which ``finish_derivation``
#: fills ``docs`` and ``messages`` in SQL (the ids, sessions and roles cross into the engine
#: once, not twice)
STAGE = "messages_stage"
STAGE_EXTRA: list[tuple[str, str]] = [("doc", "INTEGER"), ("doc_len", "INTEGER")]


class DerivedRows(Enum):
    """Where a derivation from scratch put its messages, for ``finish_derivation``."""

    #: into ``messages`` and ``docs`` as they came (``stream_messages``)
    LOADED = "loaded"
    #: into ``STAGE``, of which ``docs`` and ``messages`` are made
    STAGED = "staged"
    #: into ``docs`` only: ``messages`` is filled afterwards (``sql_engine.TextFill``)
    DOCS = "docs"


def stage_statement(*, compress: bool) -> str:
    """``CREATE OR REPLACE TABLE`` of ``STAGE``, declared as ``messages`` is (with its
    columns' ``COMPRESSION`` when ``compress``: a large stage becomes ``messages``) plus
    ``STAGE_EXTRA``."""
    return table_statement("messages", replace=True, compress=compress, named=STAGE, extra=STAGE_EXTRA)


async def finish_derivation(
    engine: SQLEngine,
    *,
    compress: bool,
    postings_sorted: bool = False,
    rows: DerivedRows = DerivedRows.LOADED,
    ms: dict[str, float] | None = None,
) -> None:
    """What a derivation from scratch does once every chunk is loaded (``rows``: where
    its messages went): ``docs`` and ``messages`` filled from ``STAGE``, when staged;
    ``messages`` sorted by time (up to ``SORT_MESSAGES_MAX`` of them, when loaded), ``postings`` by
    (tid, doc) in parts of about ``SORT_PART`` rows (a term's postings stay in one part;
    not when ``postings_sorted``: they went in in that order), ``terms.df`` and ``stats``
    counted, and the ART indexes built. ``ms`` gains the milliseconds of each step
    (``finish: <step>``)."""
    ex = engine.execute
    t = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal t
        now = time.perf_counter()
        if ms is not None:
            ms[f"finish: {step}"] = round((now - t) * 1000, 1)
        t = now

    staged = rows is DerivedRows.STAGED
    if staged:
        cols = ", ".join(c for c, _ in TABLES["messages"])
        await ex(
            f"INSERT INTO docs SELECT {', '.join(c for c, _ in TABLES['docs'])} FROM "
            f"(SELECT doc, id AS message_id, session_id, role, created_at, doc_len FROM {STAGE}) ORDER BY doc"
        )
        lap("docs")
        n = int((await ex(f"SELECT count(*) AS n FROM {STAGE}"))[0]["n"])
        if n <= SORT_MESSAGES_MAX:
            await ex(f"INSERT INTO messages SELECT {cols} FROM {STAGE} ORDER BY created_at, id")
            await ex(f"DROP TABLE {STAGE}")
        else:
            # unsorted anyway: the stage becomes ``messages`` without its two extra columns, its
            # texts not copied (a copy compressed and wrote them all again: into a file, about a
            # sixth of a derivation, and the file grew by their size)
            await ex("DROP TABLE messages")
            for col, _ in STAGE_EXTRA:
                await ex(f"ALTER TABLE {STAGE} DROP COLUMN {col}")
            await ex(f"ALTER TABLE {STAGE} RENAME TO messages")
        lap("messages")
    else:
        counted = "docs" if rows is DerivedRows.DOCS else "messages"  # messages: filled later
        n = int((await ex(f"SELECT count(*) AS n FROM {counted}"))[0]["n"])
    if n <= SORT_MESSAGES_MAX and rows is DerivedRows.LOADED:
        # sorted into a table declared like the first (a CREATE TABLE AS would drop its compression)
        await ex("ALTER TABLE messages RENAME TO messages_unsorted")
        await ex(table_statement("messages", compress=compress))
        await ex("INSERT INTO messages SELECT * FROM messages_unsorted ORDER BY created_at, id")
        await ex("DROP TABLE messages_unsorted")
        lap("messages")
    if not postings_sorted:
        await _sort_postings(engine, compress=compress)
        lap("postings")
    await ex(
        "CREATE OR REPLACE TABLE terms AS SELECT t.term, t.tid, c.df FROM terms t JOIN "
        "(SELECT tid, count(*)::INTEGER AS df FROM postings GROUP BY tid) c ON c.tid = t.tid ORDER BY t.term"
    )
    lap("terms")
    await ex(
        "CREATE OR REPLACE TABLE stats AS SELECT count(*)::BIGINT AS n, "
        "coalesce(sum(doc_len), 0)::BIGINT AS total FROM docs"
    )
    for stmt in INDEX_STATEMENTS:
        await ex(stmt)
    lap("indexes")


async def _sort_postings(engine: SQLEngine, *, compress: bool) -> None:
    """``postings`` rewritten sorted by (tid, doc), in parts of about ``SORT_PART`` rows."""
    ex = engine.execute
    # the first tid of each part: a term's postings counted, parts cut on running totals
    parts = [
        int(r["lo"])
        for r in await ex(
            f"SELECT min(tid) AS lo FROM (SELECT tid, (sum(c) OVER (ORDER BY tid) - c) // {int(SORT_PART)} AS part "
            "FROM (SELECT tid, count(*) AS c FROM postings GROUP BY tid)) GROUP BY part ORDER BY lo"
        )
    ]
    if len(parts) <= 1:
        await ex("CREATE OR REPLACE TABLE postings AS SELECT * FROM postings ORDER BY tid, doc")
    else:
        await ex("ALTER TABLE postings RENAME TO postings_unsorted")
        await ex(table_statement("postings", compress=compress))
        for lo, hi in zip(parts, parts[1:] + [None]):
            upper = f" AND tid < {hi}" if hi is not None else ""
            await ex(
                f"INSERT INTO postings SELECT * FROM postings_unsorted WHERE tid >= {lo}{upper} "
                "ORDER BY tid, doc"
            )
        await ex("DROP TABLE postings_unsorted")


async def drop_sessions(engine: SQLEngine, sids: list[str], figures: KeywordFigures) -> None:
    """Remove the sessions' messages, docs, postings and vectors, keeping ``terms``
    and ``stats`` exact (``figures`` are forgotten)."""
    if not sids:
        return
    figures.forget()
    ex = engine.execute
    inl = f"IN ({marks(len(sids))})"
    await ex(f"CREATE OR REPLACE TEMP TABLE gone AS SELECT doc FROM docs WHERE session_id {inl}", sids)
    await ex(
        "UPDATE terms SET df = terms.df - g.c FROM (SELECT tid, count(*)::INTEGER AS c FROM postings "
        "WHERE doc IN (SELECT doc FROM gone) GROUP BY tid) g WHERE terms.tid = g.tid"
    )
    await ex("DELETE FROM terms WHERE df <= 0")
    await ex(
        "UPDATE stats SET n = stats.n - g.n, total = stats.total - g.t FROM (SELECT count(*) AS n, "
        f"coalesce(sum(doc_len), 0) AS t FROM docs WHERE session_id {inl}) g",
        sids,
    )
    await ex("DELETE FROM postings WHERE doc IN (SELECT doc FROM gone)")
    await ex(
        f"DELETE FROM embeddings WHERE message_id IN (SELECT id FROM messages WHERE session_id {inl})", sids
    )
    await ex(f"DELETE FROM docs WHERE session_id {inl}", sids)
    await ex(f"DELETE FROM messages WHERE session_id {inl}", sids)
    await ex("DROP TABLE IF EXISTS gone")
