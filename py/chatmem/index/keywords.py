"""The keyword tables of the query index: how a batch of messages enters and
leaves ``docs``, ``terms``, ``postings`` and ``stats``, and the figures a
search reads kept in Python (``KeywordFigures``).

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

``KeywordFigures`` holds ``(n, total)`` and ``term -> (tid, df)`` for the
terms queries asked about (the whole vocabulary while it has at most
``TERM_CACHE`` terms) and the message id and time of docs searches ranked,
and the postings of the terms searches read,
updated exactly by each append and forgotten by a delete,
a rebuild or a failed write: a keyword search then needs no statement to learn
them. The first query after an opening looks up only its own terms; the whole
vocabulary is read after it has been answered (``read_vocabulary``), so the
first answer never waits for tens of thousands of rows. Likewise every doc's
message id, time and length (``DocTable``, while the index has at most ``doctable.DOC_CACHE``
docs) is read in pages after an answer, and kept up to date by appends: a
search then turns its winners into message ids with no statement (in the page
that statement is a round trip to the engine's worker, a quarter of a search),
and reads its postings without joining ``docs`` for their lengths.
Nothing here is durable.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping
from typing import Any

from ..settle import settle
from ..slices import Slicer
from . import doctable
from .doctable import DocTable
from .engine import SQLEngine
from .schema import STAGE_COLUMNS, TABLES, message_row, message_rows
from .tokenize import terms_of_word, words

__all__ = ["POSTINGS_CACHE", "TERM_CACHE", "KeywordFigures", "Prepared", "TermIds", "drop_sessions", "load_messages",
           "prepare_messages", "store_messages", "stream_messages"]

#: query terms whose id and df are kept in Python (then forgotten all at once)
TERM_CACHE = 50_000
#: terms read per statement when the whole vocabulary is read
VOCABULARY_PAGE = 2000
#: postings kept in Python at most (then forgotten all at once)
POSTINGS_CACHE = 100_000
#: appends of more messages than this forget the cached terms instead of updating them
_EXACT_UPDATE = 500

_COLS = {name: [c for c, _ in cols] for name, cols in TABLES.items()}
_STAGE = [c for c, _ in STAGE_COLUMNS]
_MID, _CREATED, _LEN = _STAGE.index("message_id"), _STAGE.index("created_at"), _STAGE.index("doc_len")
_STAGE_DDL = "CREATE OR REPLACE TEMP TABLE stage (" + ", ".join(f"{c} {t}" for c, t in STAGE_COLUMNS) + ")"
_DOCS = ", ".join(_COLS["docs"])
#: one row per (term, doc) of the staged batch, with its tf
_STAGE_TERMS = ("CREATE OR REPLACE TEMP TABLE st AS SELECT term, doc, count(*)::INTEGER AS tf "
                "FROM (SELECT doc, unnest(string_split(toks, ' ')) AS term "
                "FROM stage WHERE toks <> '') GROUP BY term, doc")


def _marks(n: int) -> str:
    return ", ".join("?" for _ in range(n))


class KeywordFigures:
    """BM25's ``(n, total)`` and the ``(tid, df)`` of known terms, exact as of the
    last write through ``load_messages`` / ``drop_sessions``."""

    def __init__(self) -> None:
        #: (n, total) as in ``stats``; None: read it at the next query
        self.stats: tuple[int, int] | None = None
        #: term -> (tid, df), or None for a term not indexed
        self.terms: dict[str, tuple[int, int] | None] = {}
        #: ``terms`` holds the whole vocabulary (a term not in it is not indexed)
        self.whole = False
        #: whether the vocabulary was counted since the figures were last forgotten
        self.sized = False
        #: bumped whenever the figures are forgotten (a read that began before is dropped)
        self.generation = 0
        #: doc -> (message_id, created_at, doc_len) of docs read since the figures were
        #: last forgotten (a doc's number is reused only after a delete, which forgets them)
        self.docs: dict[int, tuple[str, int, int]] = {}
        #: tid -> its postings ``(doc, tf, dl)`` as read by a search; a term's are dropped
        #: when an append adds to them, all when the terms are forgotten
        self.postings: dict[int, list[tuple[int, int, int]]] = {}
        self._posting_rows = 0
        #: every doc's message id and time, once read whole (``read_docs``); None: not kept
        self.doc_table: DocTable | None = None
        #: whether the docs were read whole (or found too many) since last forgotten
        self.docs_sized = False
        #: bumped by every append: a whole read of the docs that began before is dropped
        self.doc_writes = 0
        self._doc_read: tuple[DocTable, int, int] | None = None

    def forget(self) -> None:
        self.stats = None
        self.forget_terms()

    def forget_terms(self) -> None:
        self.terms.clear()
        self.docs.clear()
        self.postings.clear()
        self._posting_rows = 0
        self.whole = self.sized = False
        self.doc_table = None
        self.docs_sized = False
        self.generation += 1

    def known_docs(self) -> DocTable | dict[int, tuple[str, int, int]]:
        """What is known of docs' message ids and times (``.get(doc)``, then ``[0]``, ``[1]``):
        every doc, or those read."""
        return self.doc_table if self.doc_table is not None else self.docs

    async def read_docs(self, engine: SQLEngine, start: int, end: int | None) -> tuple[int, int] | None:
        """Read one page of a whole read of the docs, from doc ``start`` (``end``: where the
        read stops, None on its first page); returns ``(next start, end)``, or None when the
        read is over (done, not worth it, or dropped by a write). The caller holds the
        index's write lock for each page, not between them."""
        if self.doc_table is not None or self.docs_sized:
            return None
        if end is None:
            rows = await engine.execute("SELECT count(*) AS n, coalesce(max(doc) + 1, 0) AS e FROM docs")
            n = int(rows[0]["n"])
            if n > doctable.DOC_CACHE:
                self.docs_sized = True
                return None
            # empty (appends will fill it), or a search read them all (a small index): no page
            if len(self.docs) >= n:
                table = DocTable()
                for doc, (mid, created, dl) in self.docs.items():
                    table.add(doc, mid, created, dl)
                self.doc_table, self.docs_sized = table, True
                self.docs.clear()
                return None
            self._doc_read = (DocTable(), self.generation, self.doc_writes)
            end = int(rows[0]["e"])
        if self._doc_read is None:
            return None
        table, generation, writes = self._doc_read
        if (generation, writes) != (self.generation, self.doc_writes):
            self._doc_read = None
            return None  # a write came between two pages: read again at the next search
        # constant bounds: zone maps skip to the page (docs are stored by doc)
        rows = await engine.execute("SELECT doc, message_id, created_at, doc_len FROM docs "
                                    f"WHERE doc >= {int(start)} AND doc < {int(start) + doctable.DOC_PAGE}")
        for r in rows:
            table.add(int(r["doc"]), str(r["message_id"]), int(r["created_at"]), int(r["doc_len"]))
        start += doctable.DOC_PAGE
        if start < end:
            return start, end
        self.doc_table = table
        self.docs_sized = True
        self._doc_read = None
        self.docs.clear()  # the table has them all
        return None

    def add_docs(self, docs: Iterable[tuple[int, str, Any, int]]) -> None:
        """Docs an append added (doc, message id, time, length): kept in the ``DocTable``
        when there is one."""
        self.doc_writes += 1
        table = self.doc_table
        if table is None:
            return
        for doc, mid, created, dl in docs:
            if created is None or doc >= doctable.DOC_CACHE:
                self.doc_table = None  # not kept whole any more: read as needed
                return
            table.add(doc, mid, int(created), int(dl))

    async def read_vocabulary(self, engine: SQLEngine) -> None:
        """Read the whole vocabulary when it has at most ``TERM_CACHE`` terms (then a
        search needs no lookup at all); the caller holds the index's write lock."""
        if self.sized:
            return
        self.sized = True
        generation = self.generation
        size = await engine.execute("SELECT count(*) AS n FROM terms")
        if int(size[0]["n"]) > TERM_CACHE:
            return
        # a page at a time: one answer of 50,000 terms held the page's main thread 0.1-0.3 s
        terms: dict[str, tuple[int, int] | None] = {}
        last = -1
        while True:
            rows = await engine.execute("SELECT term, tid, df FROM terms WHERE tid > ? ORDER BY tid LIMIT ?",
                                        [last, VOCABULARY_PAGE])
            if generation != self.generation:
                return
            terms.update((r["term"], (int(r["tid"]), int(r["df"]))) for r in rows)
            if len(rows) < VOCABULARY_PAGE:
                break
            last = int(rows[-1]["tid"])
        self.terms = terms
        self.whole = True

    def remember_postings(self, postings: dict[int, list[tuple[int, int, int]]]) -> None:
        """Keep the postings a search read (only of terms whose id is kept in ``terms``)."""
        add = sum(len(v) for v in postings.values())
        if self._posting_rows + add > POSTINGS_CACHE:
            self.postings.clear()
            self._posting_rows = 0
        if add <= POSTINGS_CACHE:
            self.postings.update(postings)
            self._posting_rows += add

    def remember_docs(self, docs: dict[int, tuple[str, int, int]]) -> None:
        if len(self.docs) + len(docs) > TERM_CACHE:
            self.docs.clear()
        self.docs.update(docs)

    async def bm25(self, engine: SQLEngine) -> tuple[int, float]:
        """``(document count, mean document length)``."""
        if self.stats is None:
            rows = await engine.execute("SELECT n, total FROM stats")
            self.stats = (int(rows[0]["n"]), int(rows[0]["total"])) if rows else (0, 0)
        n, total = self.stats
        return n, max(total / max(n, 1), 1e-9)

    async def lookup(self, engine: SQLEngine, terms: Iterable[str], *,
                     whole: bool = True) -> dict[str, tuple[int, int]]:
        """``{term: (tid, df)}`` for those of ``terms`` that are indexed (with ``whole``,
        a vocabulary not yet sized is read whole first; else only these terms)."""
        want = list(dict.fromkeys(terms))
        if whole:
            await self.read_vocabulary(engine)
        missing = [] if self.whole else [t for t in want if t not in self.terms]
        if missing and len(self.terms) + len(missing) > TERM_CACHE:
            self.forget_terms()
            self.sized = True
            missing = want
        if missing:
            rows = await engine.execute(f"SELECT term, tid, df FROM terms WHERE term IN ({_marks(len(missing))})",
                                        missing)
            for t in missing:
                self.terms[t] = None
            for r in rows:
                self.terms[r["term"]] = (int(r["tid"]), int(r["df"]))
        out = {}
        for t in want:
            v = self.terms.get(t)
            if v is not None:
                out[t] = v
        return out

    def count(self, toks: list[list[str]]) -> None:
        """Bring the figures up to an append of docs with terms ``toks`` (before its
        new terms are read)."""
        if self.stats is not None:
            n, total = self.stats
            self.stats = (n + len(toks), total + sum(len(t) for t in toks))
        if not self.terms:
            return
        if len(toks) > _EXACT_UPDATE:
            self.forget_terms()
            return
        delta: Counter[str] = Counter()
        for t in toks:
            delta.update(set(t))
        for term, c in delta.items():
            if term in self.terms:
                v = self.terms[term]
                if v is None:
                    del self.terms[term]  # newly indexed: its id is read at the next query
                else:
                    self.terms[term] = (v[0], v[1] + c)
                    dropped = self.postings.pop(v[0], None)  # the append adds to them
                    if dropped is not None:
                        self._posting_rows -= len(dropped)

    async def add_new(self, engine: SQLEngine, first_tid: int) -> None:
        """While the whole vocabulary is kept: read the terms numbered from ``first_tid``."""
        if not self.whole:
            return
        new = await engine.execute("SELECT term, tid, df FROM terms WHERE tid >= ?", [first_tid])
        if len(self.terms) + len(new) > TERM_CACHE:
            self.forget_terms()
        else:
            self.terms.update((r["term"], (int(r["tid"]), int(r["df"]))) for r in new)


def _lap(ms: dict[str, float] | None, phase: str, since: float) -> float:
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


async def prepare_messages(records: list[dict[str, Any]], doc: int, ms: dict[str, float] | None = None,
                           ids: TermIds | None = None) -> Prepared:
    """Tokenise ``records`` (doc ids from ``doc`` on) into the rows ``store_messages`` loads
    (with ``ids``: staging rows of term ids, and no terms list); yields to the event loop
    every ``slices.SLICE_S`` (in the page this runs on the main thread, while the engine
    works in its worker). ``ms`` gains the time as ``tokenise``."""
    mrows: list[tuple[Any, ...]] = []
    srows: list[tuple[Any, ...]] = []
    toks: list[list[str]] = []
    slicer = Slicer()
    t = time.perf_counter()
    spent = 0.0
    for rec in records:
        if ids is None:
            m, st, tk = message_rows(rec)
            toks.append(tk)
        else:
            m = message_row(rec)
            code = ids.code(words(m[-1]))
            st = (rec["id"], rec.get("sessionId"), rec.get("role"), rec.get("createdAt"),
                  code.count(" ") + 1 if code else 0, code)
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


async def store_messages(engine: SQLEngine, batch: Prepared, figures: KeywordFigures, *, counts: bool = True,
                         first_tid: int = 0, ms: dict[str, float] | None = None, ids: bool = False) -> int:
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
    t = _lap(ms, "load", t)
    await ex(f"INSERT INTO docs SELECT {_DOCS} FROM stage")
    if ids:
        # the staging rows hold term ids: count them; the terms, the order and df come after
        await ex("INSERT INTO postings SELECT tid, doc, count(*)::INTEGER FROM (SELECT doc, "
                 "CAST(w AS INTEGER) AS tid FROM (SELECT doc, unnest(string_split(toks, ' ')) AS w "
                 "FROM stage WHERE toks <> '')) GROUP BY tid, doc")
        await ex("DROP TABLE IF EXISTS stage")
        _lap(ms, "derive", t)
        return 0
    await ex(_STAGE_TERMS)
    await ex(
        "INSERT INTO terms SELECT term, (SELECT coalesce(max(tid) + 1, 0) FROM terms) "
        "+ (row_number() OVER (ORDER BY term))::INTEGER - 1, 0 FROM (SELECT DISTINCT term FROM st) n "
        "WHERE NOT EXISTS (SELECT 1 FROM terms t WHERE t.term = n.term)")
    await ex("INSERT INTO postings SELECT t.tid, st.doc, st.tf FROM st JOIN terms t ON t.term = st.term "
             "ORDER BY t.tid, st.doc")
    if counts:
        await ex("UPDATE terms SET df = terms.df + d.c FROM (SELECT term, count(*)::INTEGER AS c FROM st "
                 "GROUP BY term) d WHERE terms.term = d.term")
        await ex("UPDATE stats SET n = stats.n + g.n, total = stats.total + g.t FROM "
                 "(SELECT count(*) AS n, coalesce(sum(doc_len), 0) AS t FROM stage) g")
        figures.count(toks)
        figures.add_docs((r[0], str(r[_MID]), r[_CREATED], r[_LEN]) for r in srows)
        await figures.add_new(engine, first_tid)
    await ex("DROP TABLE IF EXISTS stage")
    await ex("DROP TABLE IF EXISTS st")
    _lap(ms, "derive", t)
    return sum(len(set(tk)) for tk in toks) if counts else 0


async def load_messages(engine: SQLEngine, records: list[dict[str, Any]], figures: KeywordFigures,
                        *, counts: bool = True, ms: dict[str, float] | None = None) -> int:
    """Tokenise ``records`` once and load them after the index's last doc
    (``prepare_messages`` then ``store_messages``). Returns the number of postings added."""
    base = await engine.execute("SELECT (SELECT coalesce(max(doc) + 1, 0) FROM docs) AS b, "
                                "(SELECT coalesce(max(tid) + 1, 0) FROM terms) AS t")
    doc, first_tid = int(base[0]["b"]), int(base[0]["t"])
    batch = await prepare_messages(records, doc, ms)
    return await store_messages(engine, batch, figures, counts=counts, first_tid=first_tid, ms=ms)


async def _each(items: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]]
                ) -> AsyncIterator[Mapping[str, Any]]:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


async def stream_messages(engine: SQLEngine, messages: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
                          figures: KeywordFigures, *, chunk: int = 20_000, ms: dict[str, float] | None = None) -> None:
    """Load ``messages`` (records, read ``chunk`` at a time) into an empty index, without
    the counts and unsorted (a rebuild sorts and counts after), term ids numbered in
    Python (``TermIds``): each chunk is read and tokenised while the
    engine (in the page: DuckDB's worker, beside the main thread) loads and derives the
    chunk before. The engine is free when this returns or raises."""
    doc = 0
    loading: asyncio.Future[int] | None = None
    ids = TermIds()

    async def add(records: list[dict[str, Any]]) -> None:
        nonlocal doc, loading
        batch = await prepare_messages(records, doc, ms, ids)
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
    finally:
        if loading is not None and not loading.done():
            await settle(loading)


async def drop_sessions(engine: SQLEngine, sids: list[str], figures: KeywordFigures) -> None:
    """Remove the sessions' messages, docs, postings and vectors, keeping ``terms``
    and ``stats`` exact (``figures`` are forgotten)."""
    if not sids:
        return
    figures.forget()
    ex = engine.execute
    inl = f"IN ({_marks(len(sids))})"
    await ex(f"CREATE OR REPLACE TEMP TABLE gone AS SELECT doc FROM docs WHERE session_id {inl}", sids)
    await ex(
        "UPDATE terms SET df = terms.df - g.c FROM (SELECT tid, count(*)::INTEGER AS c FROM postings "
        "WHERE doc IN (SELECT doc FROM gone) GROUP BY tid) g WHERE terms.tid = g.tid")
    await ex("DELETE FROM terms WHERE df <= 0")
    await ex(
        "UPDATE stats SET n = stats.n - g.n, total = stats.total - g.t FROM (SELECT count(*) AS n, "
        f"coalesce(sum(doc_len), 0) AS t FROM docs WHERE session_id {inl}) g", sids)
    await ex("DELETE FROM postings WHERE doc IN (SELECT doc FROM gone)")
    await ex(f"DELETE FROM embeddings WHERE message_id IN (SELECT id FROM messages WHERE session_id {inl})", sids)
    await ex(f"DELETE FROM docs WHERE session_id {inl}", sids)
    await ex(f"DELETE FROM messages WHERE session_id {inl}", sids)
    await ex("DROP TABLE IF EXISTS gone")
