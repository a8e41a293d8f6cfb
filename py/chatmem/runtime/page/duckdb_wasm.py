"""The query engine in the page: DuckDB-Wasm in a worker, its OPFS file and who owns it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ...errors import QueryError, ReadOnlySQLError, StorageError
from ...index.keywords import STAGE
from ...index.nearest import NearestFilter
from ...index.schema import MESSAGE_COLUMNS
from ...index.sql_engine import READ_ONLY_REFUSAL, WRITE_REFUSED, EngineDerivation, TextFill
from ...scheduling.settle import settle
from ...stores.indexeddb import IndexedDBStore
from .bridge import bridge, call, engine_error, opened
from .locks import WebLock

__all__ = [
    "DERIVE_CHUNK",
    "DERIVE_RUN",
    "DuckDBWasmEngine",
    "PageDerivation",
    "TEXTS_LATER_FROM",
    "index_cache_path",
    "open_index_engine",
    "duckdb_import",
    "opfs_exists",
    "opfs_remove",
    "page_derivation",
]

#: about this many messages a chunk of a derivation in the page
DERIVE_CHUNK = 20_000
#: postings a run of a derivation in the page holds before it is sorted and loaded (see
#: derive.js ``hold``): 24 bytes a posting held and sorted, 288 MB of arrays. A search
#: reads a term's postings from each run, so smaller runs made keyword search slower
DERIVE_RUN = 12_000_000
#: into a file, a derivation's loads go in transactions of about this many messages (see
#: derive.js): a commit per chunk checkpointed each time, rewriting the row group still
#: filling, and one transaction for everything held it all in memory
DERIVE_TRANSACTION = 120_000
#: a derivation of at least this many messages leaves the texts out and fills ``messages``
#: once the index answers searches (see derive.js ``TextFill``): moving every text into the
#: engine took about half of a derivation, and a keyword search reads none of them
TEXTS_LATER_FROM = 300_000


class DuckDBWasmEngine:
    """``chatmem.index.SQLEngine`` over DuckDB-Wasm in a worker (see query-engine.js ``duckdbOpen``).

    ``path`` None is an in-memory database; ``opfs://<file>`` a database file in
    the origin private file system that survives reloads (``persistent``).
    """

    kind = "duckdb-wasm"
    in_thread = False
    columnar = True

    def __init__(self, handle: Any, path: str | None = None):
        self._handle = handle
        self.path = path
        self.persistent = bool(path)
        #: the Web Lock that makes this tab the owner of the file (released on close)
        self.owner_lock: WebLock | None = None
        #: a sentence for the user when the cached file had to be rebuilt or cannot be kept
        self.notice: str | None = None
        #: milliseconds per step of the opening (import, instantiate, open, setup)
        ms = getattr(handle, "openMs", None)
        self.open_ms: dict[str, float] = ms.to_py() if ms is not None and hasattr(ms, "to_py") else {}

    @classmethod
    async def open(cls, path: str | None = None) -> DuckDBWasmEngine:
        """Open DuckDB-Wasm; ``IndexLocked`` when another tab holds the ``opfs://`` file."""
        return cls(opened(await bridge().duckdbOpenEnvelope(path), engine_error), path)

    async def _call(self, method: str, **args: Any) -> Any:
        return await call(self._handle, method, args, engine_error)

    async def execute(
        self, sql: str, params: list[Any] | None = None, *, interruptible: bool = False
    ) -> list[dict[str, Any]]:
        call = self._call(
            "execute", sql=sql, params=list(params) if params else None, interruptible=interruptible
        )
        res = await (self._interruptible(call) if interruptible else call)
        # column-major (query-engine.js ``resultJSON``): one array per column
        cols = res["columns"]
        return [dict(zip(cols, row)) for row in zip(*res["cols"])]

    async def execute_read_only(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        """A user's statement (``mem.sql``): prepared once to count it (DuckDB-Wasm refuses to
        prepare more than one statement), then run the interruptible way inside a read-only
        transaction that is rolled back (query-engine.js ``executeReadOnly``)."""
        call = self._call("executeReadOnly", sql=sql, params=list(params) if params else None)
        try:
            res = await self._interruptible(call)
        except QueryError as e:
            if READ_ONLY_REFUSAL in str(e):
                raise ReadOnlySQLError(WRITE_REFUSED, field="query") from e
            raise
        cols = res["columns"]
        return [dict(zip(cols, row)) for row in zip(*res["cols"])]

    async def execute_small(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        return await self.execute(sql, params)

    async def execute_columns(self, sql: str, params: list[Any] | None = None) -> list[list[Any]]:
        """``execute``'s rows as one list per column, as the worker answers them (no dicts)."""
        res = await self._call(
            "execute", sql=sql, params=list(params) if params else None, interruptible=False
        )
        cols: list[list[Any]] = res["cols"]
        return cols

    async def _interruptible(self, call: Any) -> Any:
        """Await ``call``; if the awaiting task is cancelled, cancel the query in the worker
        and wait until it has stopped (the engine is free when this raises)."""
        fut = asyncio.ensure_future(call)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            await self._handle.cancel()
            await settle(fut)
            raise

    async def executemany(self, sql: str, rows: Any) -> None:
        await self._call("executemany", sql=sql, rows=[list(r) for r in rows])

    async def load_rows(self, table: str, columns: list[str], rows: Any) -> None:
        # column-major: one JSON array per column, half the size of row arrays
        if rows:
            await self._call("loadRows", table=table, columns=columns, cols=[list(c) for c in zip(*rows)])

    def derivation(
        self,
        store: Any,
        session_counts: list[tuple[str, int]],
        chunk: int = DERIVE_CHUNK,
        sort_max: int = DERIVE_RUN,
        batch: int = 1 << 21,
        transaction: int = DERIVE_TRANSACTION,
    ) -> PageDerivation | None:
        """``page_derivation`` into this engine."""
        return page_derivation(
            store, session_counts, self, chunk=chunk, sort_max=sort_max, batch=batch, transaction=transaction
        )

    async def nearest(
        self,
        model_key: int,
        dim: int,
        vector: Sequence[float],
        k: int,
        candidates: int,
        filter: NearestFilter | None = None,
    ) -> list[list[Any]] | None:
        """The approximate index kept beside the engine (``web/js/nearest.js``)."""
        res = await self._call(
            "nearest",
            modelKey=model_key,
            dim=dim,
            vector=list(vector),
            k=k,
            candidates=candidates,
            filter=None if filter is None else filter.wire(),
        )
        cols: list[list[Any]] = res["cols"]
        return cols

    async def close(self) -> None:
        try:
            await self._call("close")
        finally:
            lock, self.owner_lock = self.owner_lock, None
            if lock is not None:
                await lock.release()


def page_derivation(
    store: Any,
    session_counts: list[tuple[str, int]],
    engine: DuckDBWasmEngine | None,
    chunk: int = DERIVE_CHUNK,
    sort_max: int = DERIVE_RUN,
    batch: int = 1 << 21,
    transaction: int = DERIVE_TRANSACTION,
) -> PageDerivation | None:
    """A derivation of the keyword tables from ``store`` done in the page (derive.js), the
    sessions read in the given order, the postings handed over in runs of up to ``sort_max``
    each sorted by term (a counting sort in JS instead of DuckDB's: none is sorted again)
    and loaded ``batch`` rows at a time, into a
    file in transactions of about ``transaction`` messages; into ``engine``, or (None) into
    the one given later to ``attach`` (it reads, splits and counts meanwhile). None unless
    ``store`` is the page's IndexedDB one."""
    if not isinstance(store, IndexedDBStore):
        return None
    make = store.bridge_db.derivation
    options = {
        "sessions": [[sid, int(n)] for sid, n in session_counts],
        "chunk": int(chunk),
        "columns": [[c, key] for c, _, key in MESSAGE_COLUMNS],
        "stage": STAGE,
        "sortMax": int(sort_max),
        "batch": int(batch),
        "transaction": int(transaction),
        "texts": sum(int(n) for _, n in session_counts) < TEXTS_LATER_FROM,
    }
    handle = make(engine._handle if engine is not None else None, options)
    return PageDerivation(handle, engine is None, texts_later=not options["texts"])


class PageDerivation(EngineDerivation):
    """``derive.js``'s ``Derivation`` (see ``chatmem.index.derivation``)."""

    def __init__(self, handle: Any, early: bool = False, *, texts_later: bool = False):
        self._handle = handle
        #: made before its engine was open: ``attach`` gives it
        self.early = early
        self.texts_later = texts_later

    def text_fill(self, step: int) -> PageTextFill:
        return PageTextFill(self._handle.textFill(int(step)))

    async def attach(self, engine: Any) -> None:
        if self.early:
            self._handle.attachEngine(engine._handle)

    async def next(self) -> dict[str, Any] | None:
        return await call(self._handle, "next", {}, engine_error)  # type: ignore[no-any-return]

    async def feed(self, terms: dict[str, list[str]], hard: list[list[str]]) -> dict[str, list[Any]]:
        return await call(self._handle, "feed", {"terms": terms, "hard": hard}, engine_error)  # type: ignore[no-any-return]

    async def finish(self) -> dict[str, Any]:
        return await call(self._handle, "finish", {}, engine_error)  # type: ignore[no-any-return]

    async def abort(self) -> None:
        await call(self._handle, "abort", {}, engine_error)


class PageTextFill(TextFill):
    """``derive.js``'s ``TextFill``."""

    def __init__(self, handle: Any):
        self._handle = handle

    async def step(self, skip_sessions: list[str], skip_ids: list[str]) -> tuple[int, bool]:
        got = await call(
            self._handle, "step", {"skipSessions": skip_sessions, "skipIds": skip_ids}, engine_error
        )
        return int(got["messages"]), bool(got["done"])


#: seconds a new owner waits for the engine of a tab that just went to let go of the file
RELEASE_WAIT = 15.0


async def open_index_engine(path: str, *, lock: bool = True) -> tuple[DuckDBWasmEngine, str | None]:
    """The engine of the cached index at ``path`` and a notice for the user, if any.

    Only the owner of the file opens it: the tab holding the Web Lock
    ``chatmem-index:<path>`` (held until the engine closes or the page goes). With
    ``lock`` this call takes the lock without waiting, and a tab that does not get it
    has an in-memory index; without, the caller holds it already (the index's
    ``IndexShare``). The owner waits a moment for a tab that just went to let go of
    the file; a file it still cannot open is not held by another tab but
    unreadable: it is deleted and opened afresh (the index is rebuilt from the
    store), or, if that fails too, the index stays in memory.
    """
    owner_lock = None
    if lock:
        owner_lock = WebLock(f"chatmem-index:{path}")
        if not await owner_lock.acquire():
            return await DuckDBWasmEngine.open(), None
    notice = None
    try:
        try:
            engine = await _open_released(path)
        except StorageError as e:
            await opfs_remove(path.removeprefix("opfs://"))
            notice = (
                f"The saved search index could not be read ({e}); it is being rebuilt from your messages."
            )
            engine = await DuckDBWasmEngine.open(path)
    except StorageError as e:
        if owner_lock is not None:
            await owner_lock.release()
        note = f"The search index cannot be saved in this browser ({e}); it is kept in memory for this page."
        return await DuckDBWasmEngine.open(), note
    engine.owner_lock = owner_lock
    return engine, notice


def _busy(e: Exception) -> bool:
    """The file is open elsewhere (an OPFS access handle not yet let go), not unreadable."""
    text = f"{e} {e.__cause__}"
    return "Access Handle" in text or "NoModificationAllowed" in text


async def _open_released(path: str) -> DuckDBWasmEngine:
    delay, waited = 0.05, 0.0
    while True:
        try:
            return await DuckDBWasmEngine.open(path)
        except StorageError as e:
            if not _busy(e) or waited >= RELEASE_WAIT:
                raise
        await asyncio.sleep(delay)
        waited += delay
        delay = min(delay * 2, 1.0)


async def duckdb_import() -> bool:
    """Import DuckDB-Wasm's modules (once a page); whether they are there."""
    return bool(await bridge().duckdbImport())


async def opfs_exists(name: str) -> bool:
    """Whether the origin private file system holds the file ``name``."""
    return bool(await bridge().opfsExists(name))


async def opfs_remove(name: str) -> bool:
    """Delete a file (and its ``.wal``) from the origin private file system."""
    return bool(await bridge().opfsRemove(name))


def index_cache_path(store_name: str) -> str:
    """The OPFS file of the cached query index of the IndexedDB database ``store_name``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in store_name)
    return f"opfs://chatmem-index-{safe}.duckdb"
