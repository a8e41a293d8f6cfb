"""One query index for every tab of a store: the owner keeps it, the guests ask it.

Several pages (tabs) of one browser profile open the same store. Exactly one
of them, the *owner* (in a page: the tab holding the Web Lock of the index's
cache file), keeps the query index: its engine, its cache file, and its upkeep
from the store. Every other tab is a *guest*: its ``LiveIndex`` holds a
``RemoteQueryIndex`` whose engine (``RemoteEngine``) sends each statement to
the owner and gets the rows back. Search, retrieval and ``mem.sql`` run their
logic in the asking tab (a semantic query is embedded there); only SQL and rows
cross, as JSON text, through the runtime's ``ShareTransport``.

Freshness: only the owner writes the index, always from the store (the source
of truth), never from another tab's SQL. A guest's own writes and the other
tabs' write notices it received mark sessions stale; its ``ready()`` sends
those session ids to the owner (``ready``), which re-reads them from the store
before it answers. So a write acknowledged in any tab is visible to the next
query from that tab, and from every tab once its write notice arrived, as
before the index was shared.

Takeover: when the owner goes (closed, reloaded, crashed) the next tab in line
becomes owner, opens the saved file and catches up from the store, then
serves. Requests sent meanwhile wait: the asking tab keeps each until it is
answered and sends it again to every new owner, which runs an id only once.

Requests (``{"op": ...}``) and what the owner answers:

- ``ready {stale, resync}``: re-read those sessions (everything) from the store; null
- ``execute {sql, params}``: the library's own SQL; ``{columns, rows}``
- ``sql {sql, params}``: a user's query (checked again, run by the owner's ``execute_read_only``); ``{columns, rows}``
- ``cancel {target}``: interrupt that request; null once the engine is free
- ``embed {model, dim, session_id, batch_size, limit}``: embed missing vectors with the
  owner's embedder; ``{n, progress}``, or null when the owner's model is another
- ``load {table: "embeddings", columns, rows}``: vectors a guest made with its own model
- ``nearest {model_key, dim, vector, k, candidates}``: the owner engine's approximate
  nearest rows (``nearest``); one list per column, or null where it keeps no such index
- ``rebuild``, ``save``, ``status``

Every answer is ``{"ok": true, "value": ...}`` or ``{"ok": false, "error": {"type", "message"}}``
(``type`` names a ``chatmem.errors`` class).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import secrets
from typing import Any, Awaitable, Callable, Iterable, Protocol, Sequence

from .. import errors
from ..embedding.embedders import Embedder
from ..errors import QueryError, ValidationError, shown
from ..records.validation import INT64_MAX, INT64_MIN
from ..scheduling.settle import settle
from .nearest import NearestFilter
from .query_index import QueryIndex, RecordSource
from .sql_engine import EngineDerivation, rows_to_columns
from .sqlguard import check_read_only
from .transport import ShareTransport

__all__ = ["IndexHost", "IndexShare", "RemoteEngine", "RemoteQueryIndex", "ShareTransport", "answer_guest"]

Host = Callable[[dict[str, Any]], Awaitable[Any]]


def _plain(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _error(e: BaseException) -> str:
    kind = type(e).__name__ if isinstance(e, errors.ChatmemError) else "QueryError"
    message = str(e) if isinstance(e, errors.ChatmemError) else f"{type(e).__name__}: {e}"
    return json.dumps({"ok": False, "error": {"type": kind, "message": message}})


def _unwrap(text: str) -> Any:
    ans = json.loads(text)
    if ans.get("ok"):
        return ans.get("value")
    err = ans.get("error") or {}
    cls = getattr(errors, str(err.get("type", "")), None)
    message = str(err.get("message", "the query index failed"))
    if not (isinstance(cls, type) and issubclass(cls, errors.ChatmemError)):
        cls = QueryError
    try:
        exc = cls(message)
    except TypeError:
        exc = QueryError(message)
    raise exc


class IndexShare:
    """Requests to the owner (with ids unique across tabs) and, as owner, their answers."""

    def __init__(self, transport: ShareTransport):
        self.transport = transport
        self._prefix = secrets.token_hex(6)
        self._ids = itertools.count(1)
        self._running: dict[str, asyncio.Task[None]] = {}
        self._serving = False
        #: requests answered as owner (other tabs' and this tab's own through the share)
        self.served = 0

    async def claim(self, on_owner: Callable[[], None]) -> str:
        return await self.transport.claim(on_owner)

    async def call(self, op: str, **args: Any) -> Any:
        """One request to the owner; its value, or its error raised here.

        A cancelled ``sql`` request is interrupted at the owner too; this returns
        once the owner's engine is free (as a local interruptible query does)."""
        rid = f"{self._prefix}-{next(self._ids)}"
        fut = asyncio.ensure_future(
            self.transport.request(rid, json.dumps({"op": op, **args}, default=_plain))
        )
        try:
            text = await asyncio.shield(fut)
        except asyncio.CancelledError:
            self.transport.forget(rid)
            if op == "sql":
                await settle(asyncio.ensure_future(self.call("cancel", target=rid)))
            raise
        return _unwrap(text)

    # ------------------------------------------------------------------ as owner
    def serve(self, host: Host) -> None:
        """Answer requests with ``host(request)`` from now on (queued ones first); once."""
        if self._serving:
            return
        self._serving = True

        def handler(rid: str, body: str) -> None:
            self._running[rid] = asyncio.ensure_future(self._answer(host, rid, body))

        self.transport.serve(handler)

    async def _answer(self, host: Host, rid: str, body: str) -> None:
        try:
            req = json.loads(body)
            value = None
            if req.get("op") == "cancel":
                await self._cancel(str(req.get("target")))
            else:
                value = await host(req)
            text = json.dumps({"ok": True, "value": value}, default=_plain)
        except asyncio.CancelledError:
            text = _error(QueryError("Interrupted: the query was cancelled"))
        except Exception as e:  # noqa: BLE001 - every failure goes back to the tab that asked
            text = _error(e)
        finally:
            self._running.pop(rid, None)
        self.served += 1
        self.transport.answer(rid, text)

    async def _cancel(self, target: str) -> None:
        task = self._running.get(target)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})

    async def drain(self) -> None:
        """Take no more requests and wait until those taken are answered."""
        self.transport.stop()
        while self._running:
            await asyncio.wait(set(self._running.values()))

    async def close(self) -> None:
        await self.transport.close()


class RemoteEngine:
    """``SQLEngine`` whose statements run on the owner's engine."""

    kind = "remote"
    persistent = False
    notice: str | None = None
    in_thread = False
    columnar = False

    def __init__(self, share: IndexShare):
        self.share = share
        self.open_ms: dict[str, float] = {}

    async def execute(
        self, sql: str, params: list[Any] | None = None, *, interruptible: bool = False
    ) -> list[dict[str, Any]]:
        res = await self.share.call(
            "sql" if interruptible else "execute", sql=sql, params=list(params) if params else None
        )
        cols = res["columns"]
        return [dict(zip(cols, row)) for row in res["rows"]]

    async def execute_read_only(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        return await self.execute(sql, params, interruptible=True)

    async def execute_small(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        return await self.execute(sql, params)

    async def execute_columns(self, sql: str, params: list[Any] | None = None) -> list[list[Any]]:
        return rows_to_columns(await self.execute(sql, params))

    def derivation(self, store: Any, session_counts: list[tuple[str, int]]) -> EngineDerivation | None:
        return None

    async def executemany(self, sql: str, rows: Any) -> None:
        raise QueryError("another tab keeps the query index: only it writes what the store derives")

    async def load_rows(self, table: str, columns: list[str], rows: Any) -> None:
        if rows:
            await self.share.call("load", table=table, columns=columns, rows=[list(r) for r in rows])

    async def nearest(
        self,
        model_key: int,
        dim: int,
        vector: Sequence[float],
        k: int,
        candidates: int,
        filter: NearestFilter | None = None,
    ) -> list[list[Any]] | None:
        cols: list[list[Any]] | None = await self.share.call(
            "nearest",
            model_key=model_key,
            dim=dim,
            vector=list(vector),
            k=k,
            candidates=candidates,
            filter=None if filter is None else filter.wire(),
        )
        return cols

    async def close(self) -> None:
        return None


_GUEST_WRITE = "another tab keeps the query index: only it writes what the store derives"


class RemoteQueryIndex(QueryIndex):
    """A guest's view of the owner's index: reads through ``RemoteEngine``; nothing
    the store derives is written from here (the owner re-reads the store instead)."""

    keeps_docs = False  # the owner's writes renumber them

    def __init__(
        self, share: IndexShare, *, embedder: Embedder | None = None, records: RecordSource | None = None
    ):
        super().__init__(RemoteEngine(share), embedder=embedder, records=records)
        self.share = share
        self._ready = True

    async def setup(self) -> None:
        return None  # the owner's index exists

    async def bm25_stats(self) -> tuple[int, float]:
        self._figures.stats = None  # the owner's writes change them: never kept here
        return await super().bm25_stats()

    async def term_stats(self, terms: Iterable[str]) -> dict[str, tuple[int, int]]:
        self._figures.forget_terms()
        self._figures.sized = True  # look up just these terms, every time
        return await super().term_stats(terms)

    async def catch_up(self, stale: list[str], resync: bool) -> None:
        """Have the owner re-read these sessions (or everything) from the store before it answers."""
        await self.share.call("ready", stale=stale, resync=resync)

    async def embed_missing(
        self,
        embedder: Embedder,
        *,
        session_id: str | None = None,
        batch_size: int = 256,
        limit: int | None = None,
    ) -> int:
        """The owner embeds with its embedder when it is this model; otherwise the vectors
        are made here and the owner stores them."""
        ans = await self.share.call(
            "embed",
            model=embedder.model,
            dim=embedder.dimensions,
            session_id=session_id,
            batch_size=batch_size,
            limit=limit,
        )
        if ans is None:
            return await super().embed_missing(
                embedder, session_id=session_id, batch_size=batch_size, limit=limit
            )
        done, total = ans["progress"]
        self.embed_progress = (int(done), int(total))
        return int(ans["n"])

    async def apply(self, kind: str, session_id: str, payload: Any = None) -> None:
        raise QueryError(_GUEST_WRITE)

    async def resync(self, sessions: Any, messages: Any, drop: Any = ()) -> None:
        raise QueryError(_GUEST_WRITE)

    async def rebuild(self, sessions: Any, messages: Any, *, embed: bool = False) -> None:
        raise QueryError(_GUEST_WRITE)

    async def compact(self) -> None:
        raise QueryError(_GUEST_WRITE)

    async def set_meta(self, key: str, value: str) -> None:
        raise QueryError(_GUEST_WRITE)


class IndexHost(Protocol):
    """What the owner's index (``LiveIndex``) offers to answer guests."""

    embedder: Embedder

    def mark_stale(self, session_ids: list[str], resync: bool = False) -> None: ...

    def changed_in_background(self) -> None: ...

    def status(self) -> dict[str, Any]: ...

    async def ready(self) -> QueryIndex: ...

    async def rebuild(self) -> None: ...

    async def save(self) -> bool: ...


def _rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"columns": list(rows[0]) if rows else [], "rows": [list(r.values()) for r in rows]}


class _Request:
    """One guest request's fields, each checked before the owner acts on it.

    Requests come from other tabs of the same origin, but a tab may run another
    version of the page or be broken, so a malformed field is a ``ValidationError``
    naming it, never a ``KeyError`` or ``TypeError`` from deep inside the owner."""

    def __init__(self, req: object):
        if not isinstance(req, dict):
            raise ValidationError("an index request must be an object", field="op")
        self.fields: dict[str, Any] = req
        self.op = req.get("op")

    def _bad(self, name: str, what: str) -> ValidationError:
        return ValidationError(f"index request {shown(self.op)}: {name} must be {what}", field=name)

    def text(self, name: str) -> str:
        value = self.fields.get(name)
        if not isinstance(value, str):
            raise self._bad(name, "a string")
        return value

    def optional_text(self, name: str) -> str | None:
        return None if self.fields.get(name) is None else self.text(name)

    def integer(self, name: str, low: int, high: int) -> int:
        value = self.fields.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self._bad(name, f"an integer from {low:,} to {high:,}")
        return value

    def optional_integer(self, name: str, low: int, high: int) -> int | None:
        return None if self.fields.get(name) is None else self.integer(name, low, high)

    def array(self, name: str) -> list[Any]:
        value = self.fields.get(name)
        if not isinstance(value, list):
            raise self._bad(name, "an array")
        return value

    def texts(self, name: str) -> list[str]:
        value = self.fields.get(name)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._bad(name, "an array of strings")
        return value

    def rows(self, name: str, width: int) -> list[list[Any]]:
        value = self.array(name)
        if not all(isinstance(r, list) and len(r) == width for r in value):
            raise self._bad(name, f"an array of rows of {width} values")
        return value

    def nearest_filter(self, name: str) -> NearestFilter | None:
        value = self.fields.get(name)
        if value is None:
            return None
        what = "an object of sessions and roles (arrays of strings) and start and end (integers)"
        if not isinstance(value, dict):
            raise self._bad(name, what)
        sub = _Request(dict(value, op=self.op))
        try:
            start = sub.optional_integer("start", INT64_MIN, INT64_MAX)
            end = sub.optional_integer("end", INT64_MIN, INT64_MAX)
            sessions, roles = (None if value.get(k) is None else sub.texts(k) for k in ("sessions", "roles"))
        except ValidationError as e:
            raise self._bad(name, what) from e
        return NearestFilter(sessions, roles, start, end)

    def params(self) -> list[Any] | None:
        value = self.fields.get("params")
        if value is not None and not isinstance(value, list):
            raise self._bad("params", "an array")
        return value

    def vector(self, name: str, dim: int) -> list[float]:
        value = self.fields.get(name)
        if (
            not isinstance(value, list)
            or len(value) != dim
            or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value
            )
        ):
            raise self._bad(name, f"an array of {dim:,} finite numbers")
        return [float(x) for x in value]


_MOST = 2**31 - 1  # counts, dimensions and model keys: well within a 32-bit integer


async def answer_guest(live: IndexHost, raw: dict[str, Any]) -> Any:
    """The owner's answer to one request of a guest (see the module docstring)."""
    req = _Request(raw)
    op = req.op
    if op == "ready":
        live.mark_stale(req.texts("stale"), bool(req.fields.get("resync")))
        await live.ready()
        return None
    if op == "rebuild":
        await live.rebuild()
        return None
    if op == "save":
        return await live.save()
    if op == "status":
        return live.status()
    if op not in ("execute", "sql", "embed", "nearest", "load"):
        raise ValidationError(f"unknown index request {shown(op)}", field="op")
    if op == "load" and req.fields.get("table") != "embeddings":
        raise ValidationError("a guest tab may only store embeddings", field="table")
    # every field is checked before the index is opened for the request
    if op == "execute":
        sql, params = req.text("sql"), req.params()
        index = await live.ready()
        return _rows(await index.execute(sql, params))
    if op == "sql":
        sql, params = req.text("sql"), req.params()
        check_read_only(sql)
        index = await live.ready()
        async with index._lock:
            return _rows(await index.engine.execute_read_only(sql, params or []))
    if op == "embed":
        model = req.optional_text("model")
        dim = req.optional_integer("dim", 0, _MOST)
        session_id = req.optional_text("session_id")
        batch_size = req.optional_integer("batch_size", 1, _MOST) or 256
        limit = req.optional_integer("limit", 0, _MOST)
        emb = live.embedder
        if emb.model != model or (dim and emb.dimensions and emb.dimensions != dim):
            return None
        index = await live.ready()
        n = await index.embed_missing(emb, session_id=session_id, batch_size=batch_size, limit=limit)
        if n:
            live.changed_in_background()
        return {"n": n, "progress": list(index.embed_progress)}
    if op == "nearest":
        model_key = req.integer("model_key", 0, 2**53)  # embeddings.model_key: 53 bits
        dim = req.integer("dim", 1, _MOST)
        vector = req.vector("vector", dim)
        k, candidates = req.integer("k", 1, _MOST), req.integer("candidates", 1, _MOST)
        flt = req.nearest_filter("filter")
        index = await live.ready()
        async with index._lock:
            return await index.engine.nearest(model_key, dim, vector, k, candidates, flt)
    columns = req.texts("columns")
    rows = req.rows("rows", len(columns))
    index = await live.ready()
    async with index._lock:
        await index.engine.load_rows("embeddings", columns, rows)
    live.changed_in_background()
    return None
