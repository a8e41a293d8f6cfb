"""``KeywordFigures``: the figures a keyword search reads, kept in Python.

It holds ``(n, total)`` and ``term -> (tid, df)`` for the terms queries asked
about (the whole vocabulary while it has at most ``TERM_CACHE`` terms), the
message id and time of docs searches ranked, and the postings of the terms
searches read, updated exactly by each append and forgotten by a delete, a
rebuild or a failed write: a keyword search then needs no statement to learn
them. The first query after an opening looks up only its own terms; the whole
vocabulary is read after it has been answered, a page per hold of the index's
lock (``read_vocabulary_page``), so neither the first answer nor the next one
waits for tens of thousands of rows. Likewise every doc's message id, time and
length (``DocTable``; only the length past ``doctable.DOC_CACHE`` docs, nothing
past ``doctable.LENGTHS_CACHE``) is read in pages after an answer, and kept up to
date by appends: a search then turns its winners into message ids with no
statement (in the page that statement is a round trip to the engine's worker, a
quarter of a search), and reads its postings without joining ``docs`` for their
lengths (at 1,000,000 docs that join scans them all, most of a search). Last, the
postings of the rarest terms (``RarePostings``: at most ``RARE_DF`` docs a term,
``RARE_POSTINGS`` in all, about 8 bytes each) are read in pages and kept exact by
appends: a query of such terms, which is most of what people type, is then answered
with no statement at all. A vocabulary too large to keep whole has those terms' names
and counts kept with their postings (``rare_terms``), so this holds there too.
Nothing here is durable.
"""

from __future__ import annotations

import asyncio
from array import array
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from . import doctable
from .doctable import DocTable
from .rare import RarePostings
from .sql_engine import SQLEngine, columns, marks

__all__ = [
    "POSTINGS_CACHE",
    "RARE_DF",
    "RARE_PAGE",
    "RARE_POSTINGS",
    "RARE_TERMS",
    "TERM_CACHE",
    "VERDICTS_CACHE",
    "VOCABULARY_PAGE",
    "KeywordFigures",
    "RarePostings",
]

#: query terms whose id and df are kept in Python (then forgotten all at once)
TERM_CACHE = 50_000
#: terms read per statement when the whole vocabulary is read
VOCABULARY_PAGE = 2000
#: postings kept in Python at most (then forgotten all at once)
POSTINGS_CACHE = 100_000
#: docs admitted by search filters kept in Python at most (then forgotten all at once)
VERDICTS_CACHE = 1_000_000
#: appends of more messages than this forget the cached terms instead of updating them
_EXACT_UPDATE = 500
#: terms in at most this many docs have their postings kept in Python (``RarePostings``)
RARE_DF = 1024
#: at most this many of those postings, the rarest terms' first (two 4-byte ints each)
RARE_POSTINGS = 2_000_000
#: about this many postings read per statement when they are read
RARE_PAGE = 20_000
#: at most this many of those terms when the whole vocabulary is not kept (past
#: ``TERM_CACHE``): their names are kept beside their postings (``rare_terms``)
RARE_TERMS = 100_000

#: a term counts as this many postings more in a page's size (a page of rare terms is
#: a row per term: at most RARE_PAGE / _RARE_TERM_COST of them)
_RARE_TERM_COST = 10

#: the terms whose postings are kept (in at most RARE_DF docs, the rarest first, at most
#: RARE_POSTINGS postings in all), in pages in tid order: a row per page with its tids.
#: A read only: the background read writes nothing (a save's transaction may be open)
_RARE_PLAN = (
    "SELECT page, list(tid ORDER BY tid) AS tids FROM (SELECT tid, coalesce(sum(df + {cost}) OVER ("
    "ORDER BY tid ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)::BIGINT // {page} AS page FROM ("
    "SELECT tid, df, sum(df) OVER (ORDER BY df, tid) AS c, row_number() OVER (ORDER BY df, tid) AS r "
    "FROM terms WHERE df BETWEEN 1 AND {df}) WHERE c <= {most} AND r <= {terms}) GROUP BY page ORDER BY page"
)

#: one page of the kept postings, as one row (see ``read_rare_page``)
_RARE_PAGE_SQL = (
    "SELECT list(tid ORDER BY tid) AS tids, list(n ORDER BY tid) AS counts, "
    "string_agg(docs, ' ' ORDER BY tid) AS docs, string_agg(tfs, ' ' ORDER BY tid) AS tfs FROM ("
    "SELECT tid, count(*)::INTEGER AS n, string_agg(doc::VARCHAR, ' ' ORDER BY doc) AS docs, "
    "string_agg(tf::VARCHAR, ' ' ORDER BY doc) AS tfs FROM postings WHERE tid BETWEEN {lo} AND {hi} "
    "AND tid IN ({tids}) GROUP BY tid)"
)
#: the names and dfs of a page's terms, when the whole vocabulary is not kept
_RARE_NAMES_SQL = "SELECT term, tid, df FROM terms WHERE tid IN ({tids})"


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
        #: a whole read of the docs under way: its table, the generation it began in, and
        #: the docs appended since (numbered past the read's end: added when it ends)
        self._doc_read: tuple[DocTable, int, list[tuple[int, str, Any, int]]] | None = None
        #: bumped by every append (``count`` brings a whole read of the vocabulary under
        #: way up to it; a write it did not see drops that read)
        self.term_writes = 0
        self._term_read: tuple[dict[str, tuple[int, int] | None], int, int, int] | None = None
        #: tid -> (docs, tfs) of the rarest terms (``read_rare_page``), exact while kept
        self.rare = RarePostings()
        #: whether the rare postings were read (or found not worth it) since last forgotten
        self.rare_sized = False
        #: a read of them under way: its pages (each page's tids), the next page, its generation
        self._rare_read: tuple[list[list[int]], int, int] | None = None
        #: term -> (tid, df) of the terms in ``rare`` when ``terms`` is not the whole
        #: vocabulary (past ``TERM_CACHE``): a query of them needs no look-up either
        self.rare_terms: dict[str, tuple[int, int]] = {}
        #: per search filter (its SQL over ``docs d`` and parameters): ``(docs in the index,
        #: next doc to judge, the docs it admits)``, judged by filtered searches. Holds until a
        #: session changes (``forget_verdicts``) or docs are renumbered (a delete:
        #: ``forget_terms``); an append only brings docs not judged yet
        self.verdicts: dict[tuple[str, tuple[Any, ...]], tuple[int, int, set[int]]] = {}
        self._verdict_rows = 0
        #: bumped whenever the verdicts are forgotten (a check that began before is dropped)
        self.verdict_epoch = 0

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
        self.rare = RarePostings()
        self.rare_terms = {}
        self.rare_sized = False
        self._rare_read = None
        self.generation += 1
        self.forget_verdicts()

    def forget_verdicts(self) -> None:
        """Which docs each filter admits is no longer known (a session changed)."""
        self.verdicts.clear()
        self._verdict_rows = 0
        self.verdict_epoch += 1

    def remember_verdicts(
        self, key: tuple[str, tuple[Any, ...]], epoch: int, got: tuple[int, int, set[int]]
    ) -> None:
        """Keep what a filter admits (``verdicts``), judged while the verdicts were of ``epoch``."""
        if epoch != self.verdict_epoch:
            return
        old = self.verdicts.get(key)
        grown = len(got[2]) - (len(old[2]) if old else 0)
        if self._verdict_rows + grown > VERDICTS_CACHE:
            self.verdicts.clear()
            self._verdict_rows, grown = 0, len(got[2])
        self._verdict_rows += grown
        self.verdicts[key] = got

    def known_docs(self) -> DocTable | dict[int, tuple[str, int, int]]:
        """What is known of docs' message ids and times (``.get(doc)``, then ``[0]``, ``[1]``):
        every doc, or those read."""
        table = self.doc_table
        return table if table is not None and table.names else self.docs

    async def read_docs(self, engine: SQLEngine, start: int, end: int | None) -> tuple[int, int] | None:
        """Read one page of a whole read of the docs, from doc ``start`` (``end``: where the
        read stops, None on its first page); returns ``(next start, end)``, or None when the
        read is over (done, not worth it, or dropped by a delete or a rebuild, which may
        renumber docs; an append between two pages numbers its docs past ``end``, and they
        join the table when the read ends). The caller holds the index's write lock for
        each page, not between them."""
        if self.doc_table is not None or self.docs_sized:
            return None
        if end is None:
            rows = await engine.execute("SELECT count(*) AS n, coalesce(max(doc) + 1, 0) AS e FROM docs")
            n = int(rows[0]["n"])
            if n > doctable.LENGTHS_CACHE:
                self.docs_sized = True
                return None
            names = n <= doctable.DOC_CACHE  # past it only the lengths are kept
            # empty (appends will fill it), or a search read them all (a small index): no page
            if names and len(self.docs) >= n:
                table = DocTable()
                for doc, (mid, created, dl) in self.docs.items():
                    table.add(doc, mid, created, dl)
                self.doc_table, self.docs_sized = table, True
                self.docs.clear()
                return None
            self._doc_read = (DocTable(names), self.generation, [])
            end = int(rows[0]["e"])
        if self._doc_read is None:
            return None
        table, generation, appended = self._doc_read
        if generation != self.generation:
            self._doc_read = None
            return None  # forgotten between two pages: read again at the next search
        # constant bounds: zone maps skip to the page (docs are stored by doc)
        size = doctable.DOC_PAGE if table.names else doctable.LENGTHS_PAGE
        cols = "doc, message_id, created_at, doc_len" if table.names else "doc, doc_len"
        page = await columns(
            engine,
            f"SELECT {cols} FROM docs WHERE doc >= {int(start)} AND doc < {min(int(start) + size, int(end))}",
        )
        add = table.add
        if page and table.names:
            for doc, mid, created, dl in zip(*page):
                add(int(doc), str(mid), int(created), int(dl))
        elif page:
            for doc, dl in zip(*page):
                add(int(doc), "", 0, int(dl))
        start += size
        if start < end:
            return start, end
        self.doc_table = doctable.extended(table, appended)
        self.docs_sized = True
        self._doc_read = None
        self.docs.clear()  # the table has them all
        return None

    def add_docs(self, docs: Iterable[tuple[int, str, Any, int]]) -> None:
        """Docs an append added (doc, message id, time, length): kept in the ``DocTable``
        when there is one, and by a whole read under way when it ends."""
        docs = list(docs)
        if self._doc_read is not None:
            self._doc_read[2].extend(docs)
        self.doc_table = doctable.extended(self.doc_table, docs)  # None: read as needed

    def adopt_docs(self, table: DocTable | None) -> None:
        """Every doc, as a derivation from scratch numbered them (None: too many to keep)."""
        self.doc_table, self.docs_sized = table, True
        self._doc_read = None

    async def read_all(
        self, engine: SQLEngine, lock: asyncio.Lock, idle: Callable[[], Awaitable[Any]], *, docs: bool
    ) -> None:
        """The background read a search starts: the vocabulary, then (with ``docs``) every
        doc and the rarest terms' postings, a page per hold of ``lock``, each once ``idle``
        (no search under way): searches and writes go between two pages, and a search
        never waits for more than one."""
        more = True
        while more:
            await idle()
            async with lock:
                more = await self.read_vocabulary_page(engine)
        page: tuple[int, int] | None = (0, -1)
        while docs and page is not None:
            await idle()
            async with lock:
                page = await self.read_docs(engine, page[0], None if page[1] < 0 else page[1])
        more = docs
        while more:
            await idle()
            async with lock:
                more = await self.read_rare_page(engine)

    async def read_vocabulary(self, engine: SQLEngine) -> None:
        """Read the whole vocabulary when it has at most ``TERM_CACHE`` terms (then a
        search needs no lookup at all), every page at once (``read_vocabulary_page``)."""
        while await self.read_vocabulary_page(engine):
            pass

    async def read_vocabulary_page(self, engine: SQLEngine) -> bool:
        """Read the next page of a whole read of the vocabulary (the first call counts the
        terms and starts the read, unless the vocabulary was sized already); True while
        pages remain. An append between two pages keeps the read going (``count`` brings
        the pages read up to it; its new terms come in later pages); a bigger write or a
        delete, which forget the terms, drops it (the next search starts it again). The
        caller holds the index's write lock for each page, not between them, so searches
        and writes go between pages (one answer of 50,000 terms held the page's main
        thread 0.1-0.3 s)."""
        if self._term_read is None:
            if self.sized:
                return False
            self.sized = True
            size = await engine.execute("SELECT count(*) AS n FROM terms")
            if int(size[0]["n"]) > TERM_CACHE:
                return False
            self._term_read = ({}, self.generation, self.term_writes, -1)
        terms, generation, writes, after = self._term_read
        if self._term_read_dropped():
            return False
        page = await columns(
            engine,
            "SELECT term, tid, df FROM terms WHERE tid > ? ORDER BY tid LIMIT ?",
            [after, VOCABULARY_PAGE],
        )
        if self._term_read_dropped(writes):
            return False
        if page:
            names, tids, dfs = page
            terms.update(zip(names, zip(map(int, tids), map(int, dfs))))
        if page and len(page[0]) == VOCABULARY_PAGE:
            self._term_read = (terms, generation, writes, int(page[1][-1]))
            return True
        self.terms = terms
        self.whole = True
        self._term_read = None
        return False

    def _term_read_dropped(self, writes: int | None = None) -> bool:
        """Drop a whole read of the vocabulary that a write overtook (True): a forgetting,
        or an append ``count`` did not bring it up to. ``writes``: the appends counted when
        the caller sent its page's statement; one since (which the caller's lock rules
        out) may or may not be in the page, so nothing half-read is kept then."""
        if self._term_read is None:
            return True
        _, generation, kept, _ = self._term_read
        if (generation, kept if writes is None else writes) == (self.generation, self.term_writes):
            return False
        self._term_read = None
        if generation == self.generation:
            self.sized = False  # an append changed the counts: read again at the next search
        return True

    async def read_rare_page(self, engine: SQLEngine) -> bool:
        """Read the next page of the rarest terms' postings into ``rare`` (the first call
        picks the terms: those in at most ``RARE_DF`` docs, the rarest first, up to
        ``RARE_POSTINGS`` postings); True while pages remain. Only once the vocabulary was
        sized and every doc's length is kept (a search scores kept postings with the
        lengths of the ``DocTable``). A vocabulary too large to keep whole (past
        ``TERM_CACHE``) has the kept terms' names read too (``rare_terms``, at most
        ``RARE_TERMS`` of them). An append between two pages keeps the read going:
        ``count`` adds its postings to the terms read, and later pages read theirs as they
        are then; a forgetting drops it. The caller holds the index's write lock for each
        page, not between them."""
        if self._rare_read is None:
            if self.rare_sized:
                return False
            self.rare_sized = True
            if not (self.whole or self.sized) or self._term_read is not None or self.doc_table is None:
                return False
            # the terms are picked and paged by the engine (not on the page's main thread)
            plan = await columns(
                engine,
                _RARE_PLAN.format(
                    df=int(RARE_DF),
                    most=int(RARE_POSTINGS),
                    cost=_RARE_TERM_COST,
                    page=int(RARE_PAGE),
                    terms=int(RARE_TERMS) if not self.whole else int(RARE_POSTINGS),
                ),
            )
            if not plan:
                return False
            self._rare_read = ([list(map(int, t)) for t in plan[1]], 0, self.generation)
        pages, i, generation = self._rare_read
        if generation != self.generation:
            self._rare_read = None
            return False
        tids = pages[i]
        writes = self.term_writes
        # postings are stored by tid: the range lets zone maps skip to the page. The page
        # comes as one row: its terms, their posting counts, and all docs and all tfs as two
        # strings of numbers: no Python object per posting, and next to no containers (a
        # container per term made Python's collector scan the heap, 30-60 ms pauses)
        listed = ", ".join(map(str, tids))
        got = await columns(engine, _RARE_PAGE_SQL.format(lo=tids[0], hi=tids[-1], tids=listed))
        names = None if self.whole else await columns(engine, _RARE_NAMES_SQL.format(tids=listed))
        if (generation, writes) != (self.generation, self.term_writes):
            self._rare_read = None  # a write the lock should have kept out: keep what is whole
            return False
        if got and got[0][0]:
            (got_tids,), (counts,), (docs_text,), (tfs_text,) = got
            self.rare.add_page(
                got_tids,
                counts,
                array("i", map(int, docs_text.split())),
                array("i", map(int, tfs_text.split())),
            )
        if names:
            self.rare_terms.update(zip(names[0], zip(map(int, names[1]), map(int, names[2]))))
        if i + 1 < len(pages):
            self._rare_read = (pages, i + 1, generation)
            return True
        self._rare_read = None
        return False

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

    async def lookup(
        self, engine: SQLEngine, terms: Iterable[str], *, whole: bool = True
    ) -> dict[str, tuple[int, int]]:
        """``{term: (tid, df)}`` for those of ``terms`` that are indexed (with ``whole``,
        a vocabulary not yet sized is read whole first; else only these terms)."""
        want = list(dict.fromkeys(terms))
        if whole:
            await self.read_vocabulary(engine)
        rare = self.rare_terms
        missing = [] if self.whole else [t for t in want if t not in self.terms and t not in rare]
        if missing and len(self.terms) + len(missing) > TERM_CACHE:
            # the terms looked up so far go (with the postings read of them, which appends
            # update only while their term is kept); the rare ones' stay
            self.terms.clear()
            self.postings.clear()
            self._posting_rows = 0
            missing = [t for t in want if t not in rare]
        if missing:
            rows = await engine.execute(
                f"SELECT term, tid, df FROM terms WHERE term IN ({marks(len(missing))})", missing
            )
            for t in missing:
                self.terms[t] = None
            for r in rows:
                self.terms[r["term"]] = (int(r["tid"]), int(r["df"]))
        out = {}
        for t in want:
            v = self.terms.get(t) or rare.get(t)
            if v is not None:
                out[t] = v
        return out

    def count(self, toks: list[list[str]], docs: list[int] | None = None) -> None:
        """Bring the figures up to an append of docs with terms ``toks`` (before its
        new terms are read); ``docs``: their numbers (without them the kept postings of
        rare terms are forgotten)."""
        self.term_writes += 1
        if self.stats is not None:
            n, total = self.stats
            self.stats = (n + len(toks), total + sum(len(t) for t in toks))
        read = self._term_read
        if not self.terms and not self.rare_terms and read is None:
            return
        if len(toks) > _EXACT_UPDATE:
            self.forget_terms()  # drops a whole read under way too
            return
        delta: Counter[str] = Counter()
        for t in toks:
            delta.update(set(t))
        if self.rare:
            self._count_rare(toks, docs)
        rare_terms = self.rare_terms
        if rare_terms:
            for term, c in delta.items():
                v = rare_terms.get(term)
                if v is not None:
                    rare_terms[term] = (v[0], v[1] + c)
                    dropped = self.postings.pop(v[0], None)
                    if dropped is not None:
                        self._posting_rows -= len(dropped)
        if read is not None and read[1] == self.generation:
            # a whole read of the vocabulary under way keeps going: the terms its pages
            # hold get the same counts; the others (new terms are numbered past every id
            # read so far) are read by its next pages as they are now
            part, generation, _, after = read
            for term, c in delta.items():
                v = part.get(term)
                if v is not None:
                    part[term] = (v[0], v[1] + c)
            self._term_read = (part, generation, self.term_writes, after)
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

    def _count_rare(self, toks: list[list[str]], docs: list[int] | None) -> None:
        """Add an append's postings to the kept postings of the terms it holds."""
        if docs is None or len(docs) != len(toks):
            self.rare, self.rare_terms = RarePostings(), {}
            return
        rare, terms, names = self.rare, self.terms, self.rare_terms
        for doc, t in zip(docs, toks):
            for term, tf in Counter(t).items():
                v = terms.get(term) or names.get(term)
                if v is not None and v[0] in rare:
                    rare.append(v[0], doc, tf)

    async def add_new(self, engine: SQLEngine, first_tid: int) -> None:
        """While the whole vocabulary is kept: read the terms numbered from ``first_tid``."""
        if not self.whole:
            return
        new = await engine.execute("SELECT term, tid, df FROM terms WHERE tid >= ?", [first_tid])
        if len(self.terms) + len(new) > TERM_CACHE:
            self.forget_terms()
        else:
            self.terms.update((r["term"], (int(r["tid"]), int(r["df"]))) for r in new)
