"""``QueryIndex``: the derived DuckDB copy of the store that SQL and search read.

Kept fresh two ways that give the same answers:

- ``apply(kind, session_id, payload)`` for each change event the core emits
  after the store acknowledged a write (``Memory.on_change``). When it returns
  the write is visible to ``sql`` and ``search``. Applying the same
  ``messages-appended`` twice is harmless (ids already indexed are skipped),
  so a tab can replay events it is unsure about.
- ``rebuild(sessions, messages)`` from the store, through the engine's bulk
  path, then sorts ``postings`` by term.

A batch of messages is tokenised once in Python and loaded in bulk; SQL
derives ``docs``, ``terms``, the integer ``postings`` and the counts from it
(``keywords.py``), so no posting row ever crosses the boundary. The BM25 statistics (``terms.df``, ``stats.n``, ``stats.total``) are
integer counts kept exact on every write, so the incremental index answers
exactly like a rebuilt one; the index also keeps the figures its queries read
(``stats`` and the id and df of recently queried terms) in Python, updated
exactly by each append and dropped by a delete, so that a keyword search is
one statement. Postings appended since the last sort sit in an unsorted tail
(each batch sorted in itself); ``compact()`` re-sorts, and runs by itself once
the tail passes ``compact_after`` rows.

The index holds no copy of a message record beyond its scalar fields and
plain text: ``records(ids)`` reads hits' records from the store (``records=``,
e.g. ``store.get_messages``), or, for an index without a store, makes them
from its own rows (content = the plain text).

Nothing here is durable: the store is the source of truth.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from ..embedding.embedders import Embedder
from ..errors import QueryTimeout, StorageError, ValidationError, shown
from ..records.models import extract_text
from ..records.validation import INT64_MAX, INT64_MIN
from . import fill, nearest
from .catchup import catch_up
from .derivation import Started, run_derivation
from .figures import KeywordFigures
from .fill import FillState, MessagesFill
from .gate import AnswerGate
from .keywords import STAGE, DerivedRows, drop_sessions, finish_derivation, load_messages, stream_messages
from .missing import embed_missing
from .nearest import NearestFilter
from .partitions import VectorPartitions
from .schema import (
    SCHEMA_VERSION,
    TABLES,
    create_statements,
    row_to_message_record,
    row_to_session_record,
    session_row,
)
from .sql_engine import DuckDBEngine, EngineDerivation, SQLEngine, columns, marks
from .sqlguard import check_read_only

__all__ = ["EVENT_KINDS", "QueryIndex"]

EVENT_KINDS = frozenset(
    {"session-created", "session-updated", "session-deleted", "session-cleared", "messages-appended"}
)

_COLS = {name: [c for c, _ in cols] for name, cols in TABLES.items()}
_CHUNK = 20_000
#: the longest ``timeout`` (seconds) ``sql`` takes: a day; longer is no timeout (None)
MAX_SQL_TIMEOUT = 86_400
_FETCH_SIZES = (5, 10, 20, 50, 100, 200, 500, 1000)
RecordSource = Callable[[list[str]], Awaitable[list[dict[str, Any] | None]]]
_DEFAULT_TITLE = "New Conversation"  # sessions.DEFAULT_TITLE: what messages.add creates
#: a statement that names the ``messages`` table (it waits for ``messages`` to be filled)
_NAMES_MESSAGES = re.compile(r"\bmessages\b", re.IGNORECASE)


class QueryIndex:
    """The query index over one ``SQLEngine``.

    ``embedder``, when given, embeds each appended message as it is indexed
    (so a semantic search sees it when ``apply`` returns); without one,
    vectors are made on demand by ``embed_missing`` (which semantic search calls).
    """

    #: whether docs read by a search are kept (``KeywordFigures.docs``) across searches
    keeps_docs = True

    def __init__(
        self,
        engine: SQLEngine,
        *,
        embedder: Embedder | None = None,
        compact_after: int = 200_000,
        records: RecordSource | None = None,
        compress: bool = True,
    ):
        self.engine = engine
        #: tables are created with their columns' ``schema.COMPRESSION`` (False for a
        #: file whose storage version has none of it)
        self.compress = compress
        self.embedder = embedder
        self.compact_after = compact_after
        self.unsorted_postings = 0
        #: what the last ``resync`` did (sessions loaded whole, only appended to, messages
        #: loaded) and the milliseconds of its steps
        self.last_resync: dict[str, int] = {}
        self.resync_ms: dict[str, float] = {}
        self._records = records
        self._lock = asyncio.Lock()
        #: ``messages`` being filled after a derivation that left the texts out (``fill.py``)
        self.fill: MessagesFill | None = None
        self._ready = False
        self._figures = KeywordFigures()
        #: copies of the vectors a search filter admits (an engine in this process only)
        self._partitions = (
            VectorPartitions(engine, self._figures, self._lock) if isinstance(engine, DuckDBEngine) else None
        )
        self._vocabulary: asyncio.Task[None] | None = None
        #: the searches under way (``search.search`` enters ``answering()``): the
        #: background read of the vocabulary and docs waits until none is
        self._answers = AnswerGate()
        self.answering = self._answers.answering
        self._to_embed: list[tuple[str, str]] = []
        #: ``(session_id, role, created_at)`` of the messages in ``_to_embed``
        self._embed_meta: dict[str, tuple[str | None, str | None, int | None]] = {}
        #: ``(model, dim)`` of the embedders every message has a vector of; emptied by any write
        self._complete: set[tuple[str, int]] = set()
        #: ``(messages with a vector, messages)`` as of the last ``embed_missing`` batch
        self.embed_progress: tuple[int, int] = (0, 0)
        #: milliseconds per phase of the last ``rebuild``: ``stream`` (reading the records,
        #: tokenising them, ``tokenise``, while the engine loads, ``load``, and derives the
        #: keyword tables, ``derive``, of the batch before), then ``sort`` (and indexing)
        self.rebuild_ms: dict[str, float] = {}

    # ------------------------------------------------------------------ setup
    async def setup(self) -> None:
        """Create the tables if they do not exist (idempotent; called by every method)."""
        if self._ready:
            return
        for stmt in create_statements(compress=self.compress):
            await self.engine.execute(stmt)
        await self._after_create()

    def set_up(self) -> None:
        """The tables exist (a valid cached file): ``setup`` has nothing to do."""
        self._ready = True

    async def _after_create(self) -> None:
        await self.engine.execute(
            "INSERT INTO index_meta SELECT 'schema', ? WHERE NOT EXISTS "
            "(SELECT 1 FROM index_meta WHERE key = 'schema')",
            [SCHEMA_VERSION],
        )
        self._ready = True

    async def meta(self, key: str) -> str | None:
        """A value of ``index_meta`` (``None`` when absent or the table is missing)."""
        try:
            rows = await self.engine.execute("SELECT value FROM index_meta WHERE key = ?", [key])
        except Exception:
            return None
        return rows[0]["value"] if rows else None

    async def set_meta(self, key: str, value: str) -> None:
        await self.setup()
        async with self._lock:
            await self.engine.execute("DELETE FROM index_meta WHERE key = ?", [key])
            await self.engine.execute("INSERT INTO index_meta VALUES (?, ?)", [key, value])

    async def close(self) -> None:
        if self._vocabulary is not None and not self._vocabulary.done():
            self._vocabulary.cancel()
        if self.fill is not None:
            async with self._lock:
                await self._stop_fill()
        await self.engine.close()

    async def _stop_fill(self) -> None:
        """Stop filling ``messages`` (the caller holds the lock)."""
        current, self.fill = self.fill, None
        if current is not None:
            await current.cancel()

    async def messages_filled(self) -> bool:
        """Wait until ``messages`` holds every message (after a derivation that left the
        texts out, ``fill.py``): whether it does (False: its fill failed)."""
        while (current := self.fill) is not None and current.filling:
            await current.ended()
        return self.fill is None or self.fill.state is FillState.DONE

    @contextlib.asynccontextmanager
    async def _holding(self, sql: str = "", *, reads_messages: bool = False) -> AsyncIterator[None]:
        """The index lock, for a statement ``sql``; one that names ``messages`` (or
        ``reads_messages``) waits until that table is filled, and a failed fill is a
        ``StorageError`` rather than an answer missing messages."""
        reads_messages = reads_messages or bool(_NAMES_MESSAGES.search(sql))
        while True:
            if reads_messages and not await self.messages_filled():
                error = self.fill.error if self.fill is not None else None
                raise StorageError(f"the index's messages could not be filled: {error}") from error
            await self._lock.acquire()
            if not (reads_messages and self.fill is not None and self.fill.filling):
                break
            self._lock.release()  # a derivation began a fill meanwhile
        try:
            yield
        finally:
            self._lock.release()

    @property
    def in_thread(self) -> bool:
        """Whether the engine runs in this thread (CPython's ``duckdb``), where a statement
        is cheap; in the page each is a round trip to the engine's worker."""
        return self.engine.in_thread

    @property
    def columnar(self) -> bool:
        """Whether the engine answers a read column by column (the page's: no dict per row
        built on the main thread); ``execute_columns`` works either way."""
        return self.engine.columnar

    @property
    def embedded(self) -> set[tuple[str, int]]:
        """``(model, dim)`` of the embedders every message has a vector of; emptied by any write."""
        return self._complete

    @property
    def write_lock(self) -> asyncio.Lock:
        """Held by every write to the index's tables (and by every read through ``execute``)."""
        return self._lock

    # ------------------------------------------------------------------ reads
    async def execute(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        """Run trusted SQL (the library's own) under the index lock."""
        await self.setup()
        if (sql.split(None, 1) or [""])[0].upper() not in ("SELECT", "WITH"):
            self._complete.clear()  # it may write: embed_missing counts again
        async with self._holding(sql):
            return await self.engine.execute(sql, params)

    async def execute_small(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        """``execute`` for a small read (a few thousand rows at most): the engine's
        ``execute_small`` (no thread hop on CPython)."""
        await self.setup()
        async with self._holding(sql):
            return await self.engine.execute_small(sql, params)

    async def vector_table(self, where: str, params: list[Any], vectors: int) -> str | None:
        """A table holding exactly the ``embeddings e`` rows that pass ``where`` (see
        ``partitions``), or None: scan ``embeddings`` with the condition."""
        if self._partitions is None:
            return None
        await self.setup()
        return await self._partitions.table_for(where, params, vectors)

    async def nearest(
        self,
        model_key: int,
        dim: int,
        vector: Sequence[float],
        k: int,
        rows: int,
        filters: NearestFilter | None = None,
    ) -> list[list[Any]] | None:
        """The ``k`` rows nearest to the unit ``vector`` among those ``filters`` admit, from
        the engine's approximate index (``nearest``; one list per column ``message_id,
        created_at, sim, rsim``), or None: scan the vectors (an index of fewer than
        ``NEAREST_FROM`` of ``rows``, or an engine that keeps no approximate index: one in
        this thread keeps none, and its filtered searches read ``partitions``)."""
        if rows < nearest.NEAREST_FROM or (filters is not None and self.engine.in_thread):
            return None
        await self.setup()
        async with self._lock:
            flt = None if filters is None else await self._nearest_filter(filters)
            return await self.engine.nearest(model_key, dim, vector, k, nearest.candidates(rows, k), flt)

    async def _nearest_filter(self, filters: NearestFilter) -> NearestFilter:
        """``filters`` as the engine reads them: its characters' sessions read from
        ``sessions`` (and kept to the sessions it names too)."""
        if filters.characters is None:
            return filters
        rows = []
        if filters.characters:
            rows = await self.engine.execute_small(
                f"SELECT session_id FROM sessions WHERE character_id IN ({marks(len(filters.characters))})",
                list(filters.characters),
            )
        theirs = {str(r["session_id"]) for r in rows}
        sessions = (
            sorted(theirs) if filters.sessions is None else [s for s in filters.sessions if s in theirs]
        )
        return NearestFilter(sessions, filters.roles, filters.start, filters.end)

    async def execute_columns(self, sql: str, params: list[Any] | None = None) -> list[list[Any]]:
        """A read's result as one list per column (``engine.columns``), under the index lock."""
        await self.setup()
        async with self._holding(sql):
            return await columns(self.engine, sql, params)

    async def sql(
        self, query: str, params: list[Any] | tuple[Any, ...] | None = None, *, timeout: float | None = None
    ) -> list[dict[str, Any]]:
        """Run one read-only statement from a user; ``ReadOnlySQLError`` for anything else.

        After ``timeout`` seconds (None: no limit) the statement is interrupted and
        ``QueryTimeout`` raised; a cancelled caller interrupts it too. Either way the
        index is free for the next statement when this returns or raises.
        """
        check_read_only(query)
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 < timeout <= MAX_SQL_TIMEOUT
        ):
            raise ValidationError(
                f"timeout must be a number of seconds > 0 and at most {MAX_SQL_TIMEOUT}, or None",
                field="timeout",
            )
        if params is None:
            params = []
        if not isinstance(params, (list, tuple)):
            raise ValidationError("params must be a list of values", field="params")
        for i, p in enumerate(params):
            if p is not None and not isinstance(p, (str, int, float, bool)):
                raise ValidationError(
                    f"param {i} must be a str, int, float, bool or None, got {type(p).__name__}",
                    field="params",
                    index=i,
                )
            if isinstance(p, str) and not p.isascii():
                try:
                    p.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValidationError(
                        f"param {i} is not valid Unicode (a lone surrogate)", field="params", index=i
                    ) from None
            elif isinstance(p, int) and not isinstance(p, bool) and not INT64_MIN <= p <= INT64_MAX:
                raise ValidationError(
                    f"param {i} is an integer out of the 64-bit range", field="params", index=i
                )
        await self.setup()
        async with self._holding(query):
            try:
                return await asyncio.wait_for(self.engine.execute_read_only(query, list(params)), timeout)
            except TimeoutError as e:
                raise QueryTimeout(f"the query ran longer than {timeout} s and was interrupted") from e

    async def bm25_stats(self) -> tuple[int, float]:
        """``(document count, mean document length)`` for BM25 (kept exact by every write)."""
        await self.setup()
        return await self._figures.bm25(self.engine)

    async def term_stats(self, terms: Iterable[str]) -> dict[str, tuple[int, int]]:
        """``{term: (tid, df)}`` for those of ``terms`` that are indexed; read once,
        then kept exact by every write. A vocabulary not read yet is read whole once
        this query is answered (in the background, under the write lock), then the
        docs (``KeywordFigures.read_docs``), then the rarest terms' postings
        (``KeywordFigures.read_rare_page``), a page per hold of the lock."""
        await self.setup()
        fig = self._figures
        if (not fig.sized or (self.keeps_docs and not (fig.docs_sized and fig.rare_sized))) and (
            self._vocabulary is None or self._vocabulary.done()
        ):
            self._vocabulary = asyncio.ensure_future(self._read_vocabulary())
        return await fig.lookup(self.engine, terms, whole=False)

    async def figures_read(self) -> None:
        """Wait until the figures a search keeps in Python (the vocabulary, the doc table,
        the rarest terms' postings), whose read the first search starts in the background,
        are read (at once when no read is under way)."""
        task = self._vocabulary
        if task is not None and not task.done():
            await asyncio.shield(task)

    async def _read_vocabulary(self) -> None:
        await asyncio.sleep(0.05)  # a lookup made outside a search: after its answer too
        try:
            await self._figures.read_all(self.engine, self._lock, self._answers.idle, docs=self.keeps_docs)
        except Exception:  # noqa: BLE001 - e.g. the engine closed: terms and docs are looked up per query
            pass

    # what searches read, kept exact by every write (``KeywordFigures``; ``scoring`` uses them)
    doc_cache = property(
        lambda self: self._figures.known_docs(),
        doc="``{doc: (message_id, created_at)}`` (``.get``) of every doc, or of those read",
    )
    postings_cache = property(lambda self: self._figures.postings, doc="``{tid: [(doc, tf, dl)]}``")
    doc_lengths = property(
        lambda self: self._figures.doc_table,
        doc="every doc's length (``DocTable.length``) once read whole, else None",
    )
    rare_postings = property(
        lambda self: self._figures.rare,
        doc="``{tid: (docs, tfs)}`` of the rarest terms, once read (else empty)",
    )

    def remember_postings(self, postings: dict[int, list[tuple[int, int, int]]]) -> None:
        self._figures.remember_postings(postings)

    @property
    def verdicts(self) -> KeywordFigures:
        """Which docs each search filter admits, as far as filtered searches judged them
        (``scoring.admitted``); kept exact by every write."""
        return self._figures

    def remember_docs(self, docs: dict[int, tuple[str, int, int]]) -> None:
        self._figures.remember_docs(docs)

    def _forget_stats(self) -> None:
        """Messages change: the cached BM25 figures and embedding completeness are stale."""
        self._figures.forget()
        self._complete.clear()

    async def _drop_messages(self, sids: str | list[str]) -> None:
        sids = [sids] if isinstance(sids, str) else list(sids)
        if self.fill is not None and self.fill.filling:
            self.fill.wrote_sessions(sids)
        await drop_sessions(self.engine, sids, self._figures)

    async def _load_messages(
        self, records: list[dict[str, Any]], *, counts: bool = True, ms: dict[str, float] | None = None
    ) -> None:
        added = await load_messages(self.engine, records, self._figures, counts=counts, ms=ms)
        if counts:
            self.unsorted_postings += added

    async def records(self, ids: list[str]) -> list[dict[str, Any] | None]:
        """The message records of ``ids``, in order (None where absent): from the
        store when the index has one, else made from the index's own rows."""
        if not ids:
            return []
        if self._records is not None:
            return await self._records(list(ids))
        size = next((n for n in _FETCH_SIZES if n >= len(ids)), len(ids))
        padded = list(ids) + [ids[0]] * (size - len(ids))  # one prepared statement per size class
        rows = await self.execute(f"SELECT * FROM messages WHERE id IN ({marks(size)})", padded)
        by_id = {r["id"]: r for r in rows}
        return [row_to_message_record(by_id[i]) if i in by_id else None for i in ids]

    async def counts(self) -> dict[str, int]:
        """Rows per table (for tests and status displays)."""
        out = {}
        for name in TABLES:
            rows = await self.execute(f"SELECT count(*) AS n FROM {name}")
            out[name] = int(rows[0]["n"])
        return out

    # ------------------------------------------------------------------ writes
    async def apply(self, kind: str, session_id: str, payload: Any = None) -> None:
        """Bring the index up to date with one acknowledged write.

        - ``session-created``: ``payload`` is the session record;
        - ``session-updated``: ``payload`` is the dict of changed record keys;
        - ``session-deleted``, ``session-cleared``: ``payload`` is ignored, or the
          new session record (for ``session-cleared``);
        - ``messages-appended``: ``payload`` is the list of stored message
          records, or ``{"messages": [...], "session": record}``.
        """
        if kind not in EVENT_KINDS:
            raise ValidationError(f"unknown change kind {shown(kind)}", field="kind")
        if not isinstance(session_id, str) or not session_id:
            raise ValidationError("session_id must be a non-empty string", field="session_id")
        await self.setup()
        async with self._lock:
            self._to_embed, self._embed_meta = [], {}
            self._complete.clear()  # messages may come or go: embed_missing counts again
            await self.engine.execute("BEGIN TRANSACTION")
            try:
                await self._apply(kind, session_id, payload)
                await self.engine.execute("COMMIT")
            except BaseException:
                self._forget_stats()
                await self._rollback()
                raise
            to_embed, self._to_embed = self._to_embed, []
            meta, self._embed_meta = self._embed_meta, {}
            if to_embed and self.embedder is not None:
                # after the commit: a failing embedder leaves the keyword index
                # current and the vectors to ``embed_missing``
                from .embeddings import store_embeddings, with_previous

                items = await with_previous(self.engine, self.embedder, to_embed)
                await store_embeddings(self.engine, self.embedder, items, meta)
        if self.unsorted_postings > self.compact_after:
            await self.compact()

    async def _apply(self, kind: str, sid: str, payload: Any) -> None:
        ex = self.engine.execute
        if kind != "messages-appended":
            self._figures.forget_verdicts()  # the session's fields (a filter reads them) change
        elif (
            self._figures.verdicts
            and isinstance(payload, Mapping)
            and isinstance(payload.get("session"), Mapping)
        ):
            # an append replaces the session's row: a filter's verdicts hold while it keeps its character
            rows = await ex("SELECT character_id FROM sessions WHERE session_id = ?", [sid])
            if rows and rows[0]["character_id"] != payload["session"].get(
                "characterId", rows[0]["character_id"]
            ):
                self._figures.forget_verdicts()
        if kind == "session-created":
            await ex("DELETE FROM sessions WHERE session_id = ?", [sid])
            await self.engine.load_rows(
                "sessions", _COLS["sessions"], [session_row(dict(payload, sessionId=sid))]
            )
        elif kind == "session-updated":
            await self._merge_session(sid, dict(payload or {}))
        elif kind in ("session-deleted", "session-cleared"):
            await self._drop_messages(sid)
            if kind == "session-deleted":
                await ex("DELETE FROM sessions WHERE session_id = ?", [sid])
            elif isinstance(payload, Mapping):
                await self._merge_session(sid, dict(payload))
            else:
                await ex("UPDATE sessions SET message_count = 0 WHERE session_id = ?", [sid])
        else:
            session = None
            records = payload
            if isinstance(payload, Mapping):
                records, session = payload.get("messages"), payload.get("session")
            if not isinstance(records, list):
                raise ValidationError("messages-appended needs a list of message records", field="payload")
            await self._append(sid, records, session)

    async def resync(
        self,
        sessions: Sequence[Mapping[str, Any]],
        messages: Sequence[Mapping[str, Any]],
        drop: Iterable[str] = (),
    ) -> None:
        """In one transaction: replace the ``sessions`` (records) and all their
        messages by ``messages``, and remove the sessions ``drop``. What a cached
        index does to catch up with the store; a session only appended to gets
        just its new messages (``catchup.py``; ``last_resync`` counts them,
        ``resync_ms`` times the steps)."""
        await self.setup()
        async with self._holding(reads_messages=True):
            self._forget_stats()
            await self.engine.execute("BEGIN TRANSACTION")
            try:
                done = await catch_up(self.engine, self._figures, sessions, messages, [str(d) for d in drop])
                t = time.perf_counter()
                await self.engine.execute("COMMIT")
                done.ms["commit"] = (time.perf_counter() - t) * 1000
            except BaseException:
                await self._rollback()
                raise
            self._forget_stats()
            self._complete.clear()  # new messages have no vectors yet
            self.unsorted_postings += done.postings
            self.last_resync, self.resync_ms = done.counts(), done.ms
        if self.unsorted_postings > self.compact_after:
            await self.compact()

    async def _rollback(self) -> None:
        """End the failed transaction (a failed COMMIT, e.g. of a file that cannot be
        written, leaves it open; one already ended is no error)."""
        try:
            await self.engine.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - no transaction left to end
            pass

    async def _merge_session(self, sid: str, changes: dict[str, Any]) -> None:
        rows = await self.engine.execute("SELECT * FROM sessions WHERE session_id = ?", [sid])
        if not rows:
            return
        rec = row_to_session_record(rows[0])
        rec.update({k: v for k, v in changes.items() if k in rec and k != "sessionId"})
        await self.engine.execute("DELETE FROM sessions WHERE session_id = ?", [sid])
        await self.engine.load_rows("sessions", _COLS["sessions"], [session_row(rec)])

    async def _append(
        self, sid: str, records: list[dict[str, Any]], session: Mapping[str, Any] | None
    ) -> None:
        if not records:
            return
        ids = [r["id"] for r in records]
        have: set[str] = set()
        for i in range(0, len(ids), 500):
            part = ids[i : i + 500]
            got = await self.engine.execute(
                f"SELECT message_id FROM docs WHERE message_id IN ({marks(len(part))})", part
            )
            have.update(r["message_id"] for r in got)
        fresh = [dict(r, sessionId=sid) for r in records if r["id"] not in have]
        if session is not None:
            await self.engine.execute("DELETE FROM sessions WHERE session_id = ?", [sid])
            await self.engine.load_rows(
                "sessions", _COLS["sessions"], [session_row(dict(session, sessionId=sid))]
            )
        else:
            exists = await self.engine.execute("SELECT 1 AS x FROM sessions WHERE session_id = ?", [sid])
            last = max(int(r["createdAt"]) for r in records)
            if not exists:
                # messages.add creates the session in the same transaction: its defaults
                rec = {
                    "sessionId": sid,
                    "title": _DEFAULT_TITLE,
                    "createdAt": last,
                    "updatedAt": last,
                    "messageCount": 0,
                }
                await self.engine.load_rows("sessions", _COLS["sessions"], [session_row(rec)])
            if fresh:
                await self.engine.execute(
                    "UPDATE sessions SET message_count = message_count + ?, "
                    "updated_at = greatest(updated_at, ?) WHERE session_id = ?",
                    [len(fresh), last, sid],
                )
        if fresh:
            filling = self.fill if self.fill is not None and self.fill.filling else None
            if filling is not None:
                # the fill may have read them from the store before this write came: its
                # rows go, and it leaves them out from now on
                fresh_ids = [r["id"] for r in fresh]
                await self.engine.execute(
                    f"DELETE FROM messages WHERE id IN ({marks(len(fresh_ids))})", fresh_ids
                )
                filling.wrote_messages(fresh_ids)
            await self._load_messages(fresh)
            # during a fill a message's previous one may not be in ``messages`` yet: its
            # vector waits for ``embed_missing``, as for a model not loaded yet
            if getattr(self.embedder, "loaded", True) and filling is None:
                # a lazily loaded model is not fetched for a write: embed_missing catches up
                self._to_embed.extend((r["id"], extract_text(r.get("content"))) for r in fresh)
                self._embed_meta.update((r["id"], (sid, r.get("role"), r.get("createdAt"))) for r in fresh)

    async def compact(self) -> None:
        """Rewrite ``postings`` sorted by (tid, doc), so queries skip to their terms again."""
        await self.setup()
        async with self._lock:
            await self._sort_postings()
            self.unsorted_postings = 0

    async def _sort_postings(self) -> None:
        await self.engine.execute(
            "CREATE OR REPLACE TABLE postings AS SELECT * FROM postings ORDER BY tid, doc"
        )

    async def rebuild(
        self,
        sessions: Iterable[Mapping[str, Any]],
        messages: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]] | EngineDerivation | Started,
        *,
        embed: bool = False,
    ) -> None:
        """Drop everything and load ``sessions`` and ``messages`` (records) in bulk.

        ``messages`` may be a plain or an async iterable; it is read in chunks,
        so the whole store never sits in memory at once; or an ``EngineDerivation``
        (the page's: the records go from the store to the engine without crossing
        into Python, which supplies the terms), maybe ``Started`` before the engine opened. With ``embed=True`` (and an ``embedder``)
        every message is embedded too; otherwise ``embed_missing`` does it later.
        """
        async with self._lock:
            await self._stop_fill()
            self._forget_stats()
            ex = self.engine.execute
            for table in ("messages_unsorted", "postings_unsorted", STAGE):
                await ex(f"DROP TABLE IF EXISTS {table}")
            for ix in ("messages_id", "postings_term", "docs_doc", "terms_term"):
                await ex(f"DROP INDEX IF EXISTS {ix}")
            # the ART indexes are built once at the end, not row by row
            for stmt in create_statements(replace=True, compress=self.compress):
                if not stmt.startswith("CREATE INDEX"):
                    await ex(stmt)
            await self._after_create()
            await self.engine.load_rows("sessions", _COLS["sessions"], [session_row(s) for s in sessions])
            ms: dict[str, float] = {}
            t0 = time.perf_counter()
            rows = DerivedRows.LOADED
            derivation: EngineDerivation | None = None
            if isinstance(messages, (EngineDerivation, Started)):
                derivation = messages.d if isinstance(messages, Started) else messages
                rows = DerivedRows.DOCS if derivation.texts_later else DerivedRows.STAGED
                docs, ordered = await run_derivation(self.engine, messages, ms, compress=self.compress)
            else:
                docs, ordered = (
                    await stream_messages(self.engine, messages, self._figures, chunk=_CHUNK, ms=ms),
                    False,
                )
            t1 = time.perf_counter()
            ms["stream"] = (t1 - t0) * 1000
            await finish_derivation(
                self.engine, compress=self.compress, postings_sorted=ordered, rows=rows, ms=ms
            )
            ms["sort"] = (time.perf_counter() - t1) * 1000
            self.rebuild_ms = {k: round(v, 1) for k, v in ms.items()}
            self.unsorted_postings = 0
            self._forget_stats()
            self._figures.adopt_docs(docs)  # numbered as derived: nothing to read back
            if derivation is not None and derivation.texts_later:
                self.fill = MessagesFill(derivation.text_fill(fill.FILL_STEP), self._lock, self._answers.idle)
        if embed and self.embedder is not None:
            await self.embed_missing(self.embedder)

    async def embed_missing(
        self,
        embedder: Embedder,
        *,
        session_id: str | None = None,
        batch_size: int = 256,
        limit: int | None = None,
    ) -> int:
        """Embed the messages that have no vector for ``embedder.model`` yet (at most
        ``limit``, oldest first); return how many (see ``missing.embed_missing``)."""
        return await embed_missing(self, embedder, session_id=session_id, batch_size=batch_size, limit=limit)
