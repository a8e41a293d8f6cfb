"""The page runtime: the only Python module that imports ``js`` / ``pyodide``.

It reaches the JS bridge (``web/js/bridge.js`` and the modules it gathers),
which the page registers as the JS module ``chatmem_bridge``
(``pyodide.registerJsModule``). Everything crosses as JSON text; every bridge
handle answers ``{"ok", "value" | "error": {"name", "message"}}`` and failures
are turned into typed errors here (``errors.translate_dom_error``).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from typing import Any, AsyncIterator, Awaitable, Callable

import js  # type: ignore[import-not-found]
from pyodide.code import eval_code_async  # type: ignore[import-not-found]
from pyodide.ffi import create_proxy, to_js  # type: ignore[import-not-found]

from ..errors import (
    DatabaseClosed,
    IndexLocked,
    QueryError,
    SessionNotFound,
    StorageError,
    TransportError,
    TransportTimeout,
    UnsupportedEnvironment,
    ValidationError,
    translate_dom_error,
)
from ..http import HTTPResponse, Transport
from ..stores.indexeddb import IndexedDBStore
from .base import Runtime

__all__ = ["PageRuntime", "BridgeDB", "open_database", "drop_database", "run_code", "FetchTransport",
           "storage_estimate", "request_persistence", "DuckDBWasmEngine", "IndexLocked", "opfs_remove",
           "index_cache_path", "open_index_engine", "WebLock", "is_online", "on_online", "bpe_counter",
           "WebCryptoSuite", "fetch_model"]


def _bridge() -> Any:
    try:
        import chatmem_bridge  # type: ignore[import-not-found]
    except ImportError:
        try:  # PyScript: config {"js_modules": {"main": {"./js/bridge.js": "chatmem_bridge"}}}
            from pyscript.js_modules import chatmem_bridge  # type: ignore[import-not-found]
        except ImportError as e:
            raise UnsupportedEnvironment(
                "the chatmem JS bridge is not registered: call loadChatmem(pyodide) from js/load.js "
                "(or pyodide.registerJsModule('chatmem_bridge', bridge)), or under PyScript name "
                "./js/bridge.js as 'chatmem_bridge' in js_modules.main"
            ) from e
    return chatmem_bridge


# ---------------------------------------------------------------------------- the envelope
# Every bridge handle answers {"ok", "value" | "error": {"name", "message"}}
# (web/js/envelope.js); each kind of handle translates the error its own way.

Translate = Callable[[dict[str, Any]], Exception]


def _store_error(err: dict[str, Any]) -> Exception:
    name, message = err.get("name", "Error"), err.get("message", "")
    if name == "SessionNotFound":
        return SessionNotFound(message)
    return translate_dom_error(name, message)


def _engine_error(err: dict[str, Any]) -> Exception:
    name, message = err.get("name", "Error"), err.get("message", "")
    if name == "DatabaseClosed":
        return DatabaseClosed(message)
    if name == "IndexLocked":
        return IndexLocked(message)
    return QueryError(f"{name}: {message}")


async def _call(handle: Any, method: str, args: dict[str, Any], translate: Translate) -> Any:
    """One call through a bridge handle: JSON in, the envelope's value out, or the
    translated error raised (the bridge's own words kept as ``__cause__``)."""
    envelope = json.loads(await handle.call(method, json.dumps(args, separators=(",", ":"))))
    if envelope["ok"]:
        return envelope["value"]
    err = envelope["error"]
    raise translate(err) from StorageError(f"{err.get('name')}: {err.get('message')}")


def _opened(res: Any, translate: Translate) -> Any:
    """The handle of an ``opened`` answer ({ok, value, error}), or its translated error."""
    if not res.ok:
        raise translate(json.loads(res.error))
    return res.value


class BridgeDB:
    """One open IndexedDB database; ``call`` runs one bridge method = one transaction."""

    def __init__(self, handle: Any, name: str):
        self._handle = handle
        self.name = name
        self._proxies: list[Any] = []

    async def call(self, method: str, **args: Any) -> Any:
        return await _call(self._handle, method, args, _store_error)

    def subscribe(self, fn: Callable[[dict[str, Any]], None]) -> None:
        """Call ``fn(notice)`` when another tab writes to this database."""
        proxy = create_proxy(lambda raw: fn(json.loads(raw)))
        self._proxies.append(proxy)
        self._handle.subscribe(proxy)

    async def close(self) -> None:
        await self._handle.call("close", "{}")
        for p in self._proxies:
            p.destroy()
        self._proxies.clear()


async def open_database(name: str, durability: str = "relaxed") -> BridgeDB:
    return BridgeDB(_opened(await _bridge().openEnvelope(name, durability), _store_error), name)


async def drop_database(name: str) -> None:
    await _bridge().drop(name)


async def storage_estimate() -> dict[str, Any]:
    return json.loads(await _bridge().storageEstimate())  # type: ignore[no-any-return]


async def request_persistence() -> bool:
    return bool(await _bridge().requestPersistence())


class WebCryptoSuite:
    """``chatmem.sync.e2e.CipherSuite`` on WebCrypto (``web/js/crypto.js``): one call per batch."""

    async def pbkdf2_sha256(self, password: bytes, salt: bytes, iterations: int) -> bytes:
        out = await _bridge().e2ePbkdf2(_b64(password), _b64(salt), iterations)
        return base64.b64decode(str(out))

    async def seal_many(self, key: bytes, items: Any) -> list[bytes]:
        raw = await _bridge().e2eSeal(_b64(key), json.dumps([[_b64(x) for x in it] for it in items]))
        return [base64.b64decode(c) for c in json.loads(str(raw))]

    async def open_many(self, key: bytes, items: Any) -> list[bytes | None]:
        raw = await _bridge().e2eOpen(_b64(key), json.dumps([[_b64(x) for x in it] for it in items]))
        return [None if p is None else base64.b64decode(p) for p in json.loads(str(raw))]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# ---------------------------------------------------------------------------- DuckDB-Wasm engine


class DuckDBWasmEngine:
    """``chatmem.index.SQLEngine`` over DuckDB-Wasm in a worker (see query-engine.js ``duckdbOpen``).

    ``path`` None is an in-memory database; ``opfs://<file>`` a database file in
    the origin private file system that survives reloads (``persistent``).
    """

    kind = "duckdb-wasm"

    def __init__(self, handle: Any, path: str | None = None):
        self._handle = handle
        self.path = path
        self.persistent = bool(path)
        #: the Web Lock that makes this tab the owner of the file (released on close)
        self.owner_lock: WebLock | None = None
        #: a sentence for the user when the cached file had to be rebuilt or cannot be kept
        self.notice: str | None = None

    @classmethod
    async def open(cls, path: str | None = None) -> DuckDBWasmEngine:
        """Open DuckDB-Wasm; ``IndexLocked`` when another tab holds the ``opfs://`` file."""
        return cls(_opened(await _bridge().duckdbOpenEnvelope(path), _engine_error), path)

    async def _call(self, method: str, **args: Any) -> Any:
        return await _call(self._handle, method, args, _engine_error)

    async def execute(
        self, sql: str, params: list[Any] | None = None, *, interruptible: bool = False
    ) -> list[dict[str, Any]]:
        call = self._call("execute", sql=sql, params=list(params) if params else None,
                          interruptible=interruptible)
        res = await (self._interruptible(call) if interruptible else call)
        cols = res["columns"]
        return [dict(zip(cols, row)) for row in res["rows"]]

    async def _interruptible(self, call: Any) -> Any:
        """Await ``call``; if the awaiting task is cancelled, cancel the query in the worker
        and wait until it has stopped (the engine is free when this raises)."""
        fut = asyncio.ensure_future(call)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            await self._handle.cancel()
            while not fut.done():
                try:
                    await asyncio.wait({fut})
                except asyncio.CancelledError:
                    continue
            if not fut.cancelled():
                fut.exception()
            raise

    async def executemany(self, sql: str, rows: Any) -> None:
        await self._call("executemany", sql=sql, rows=[list(r) for r in rows])

    async def load_rows(self, table: str, columns: list[str], rows: Any) -> None:
        # column-major: one JSON array per column, half the size of row arrays
        if rows:
            await self._call("loadRows", table=table, columns=columns, cols=[list(c) for c in zip(*rows)])

    async def close(self) -> None:
        try:
            await self._call("close")
        finally:
            lock, self.owner_lock = getattr(self, "owner_lock", None), None
            if lock is not None:
                await lock.release()


async def open_index_engine(path: str) -> tuple[DuckDBWasmEngine, str | None]:
    """The engine of the cached index at ``path`` and a notice for the user, if any.

    The tab that gets the Web Lock ``chatmem-index:<path>`` (held until the engine
    closes or the page goes) owns the file, so a file it cannot open is not held
    by another tab but unreadable: it is deleted and opened afresh (the index is
    rebuilt from the store), or, if that fails too, the index stays in memory.
    A tab without the lock gets an in-memory index.
    """
    lock = WebLock(f"chatmem-index:{path}")
    if not await lock.acquire():
        return await DuckDBWasmEngine.open(), None
    notice = None
    try:
        try:
            engine = await DuckDBWasmEngine.open(path)
        except StorageError as e:
            await opfs_remove(path.removeprefix("opfs://"))
            notice = f"The saved search index could not be read ({e}); it is being rebuilt from your messages."
            engine = await DuckDBWasmEngine.open(path)
    except StorageError as e:
        await lock.release()
        note = f"The search index cannot be saved in this browser ({e}); it is kept in memory for this page."
        return await DuckDBWasmEngine.open(), note
    engine.owner_lock = lock
    return engine, notice


async def opfs_remove(name: str) -> bool:
    """Delete a file (and its ``.wal``) from the origin private file system."""
    return bool(await _bridge().opfsRemove(name))


# ---------------------------------------------------------------------------- exact token counts


async def bpe_counter(encoding: str) -> Callable[[str], int]:
    """A synchronous ``count(text)`` for an OpenAI BPE encoding, run in JS (gpt-tokenizer)."""
    fn = await _bridge().tokenCounter(encoding)
    return lambda text: int(fn(text))


# ---------------------------------------------------------------------------- the embedding model


async def fetch_model() -> bytes:
    """The static embedding model's bytes, fetched from this site (the service
    worker caches the file on this first fetch). Its path is in ``build-info.json``."""
    base = str(js.document.baseURI) if hasattr(js, "document") else str(js.location.href)
    info = await (await js.fetch(js.URL.new("build-info.json", base).href)).json()
    path = info.model if hasattr(info, "model") else None
    if not path:
        raise ValueError("build-info.json names no embedding model")
    resp = await js.fetch(js.URL.new(str(path), base).href)
    if not resp.ok:
        raise ValueError(f"embedding model: HTTP {resp.status}")
    buf = await resp.arrayBuffer()
    return bytes(js.Uint8Array.new(buf).to_py())


# ---------------------------------------------------------------------------- sync: Web Locks, online


class WebLock:
    """A Web Lock taken without waiting: ``acquire()`` is False while another tab holds it.

    Holding it proves no other tab of this origin drains the same outbox; the
    browser releases it when the tab goes away (reload, crash, close).
    """

    exclusive = True

    def __init__(self, name: str):
        self.name = name
        self._release: Any = None

    async def acquire(self) -> bool:
        if self._release is not None:
            return True
        release = await _bridge().tryLock(self.name)
        if release is False or release is None:
            return False
        self._release = release
        return True

    async def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            await release()  # settles once the lock is free (a re-acquire right after succeeds)


def is_online() -> bool:
    """The browser's ``navigator.onLine``."""
    return bool(_bridge().isOnline())


def on_online(fn: Callable[[], None]) -> Callable[[], None]:
    """Call ``fn()`` on the window's ``online`` event; returns a function that stops it."""
    proxy = create_proxy(fn)
    stop_js = _bridge().onOnline(proxy)

    def stop() -> None:
        stop_js()
        proxy.destroy()

    return stop


# ---------------------------------------------------------------------------- the page's test hook


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if hasattr(value, "to_py"):
        return value.to_py()
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


async def run_code(code: str) -> str:
    """Run async Python (top-level await allowed) in a fresh namespace; JSON of the last expression."""
    ns: dict[str, Any] = {"__name__": "__main__"}
    result = await eval_code_async(code, ns)
    return json.dumps(result, default=_jsonable)


# ---------------------------------------------------------------------------- fetch transport


class FetchTransport:
    """``chatmem.http.Transport`` over the browser's ``fetch``."""

    async def _fetch(
        self, method: str, url: str, headers: dict[str, str] | None, body: bytes | None,
        timeout: float | None,
    ) -> Any:
        controller = js.AbortController.new()
        timer = None
        if timeout is not None:
            timer = js.setTimeout(create_proxy(lambda: controller.abort()), int(timeout * 1000))
        init: dict[str, Any] = {"method": method, "headers": headers or {}, "signal": controller.signal}
        if body is not None:
            init["body"] = js.Uint8Array.new(to_js(body))
        try:
            resp = await js.fetch(url, to_js(init, dict_converter=js.Object.fromEntries))
        except Exception as e:  # JsException: TypeError (network) or AbortError (timeout)
            if "AbortError" in str(e):
                raise TransportTimeout(f"{method} {url}: timed out") from e
            raise TransportError(f"{method} {url}: {e}") from e
        return resp, timer, controller

    @staticmethod
    def _headers(resp: Any) -> dict[str, str]:
        return {k: v for k, v in resp.headers.entries()}

    async def request(
        self, method: str, url: str, *, headers: dict[str, str] | None = None,
        body: bytes | None = None, timeout: float | None = 30.0,
    ) -> HTTPResponse:
        resp, timer, _ = await self._fetch(method, url, headers, body, timeout)
        try:
            data = (await resp.arrayBuffer()).to_bytes()
        except Exception as e:
            raise (TransportTimeout if "AbortError" in str(e) else TransportError)(f"{method} {url}: {e}") from e
        finally:
            if timer is not None:
                js.clearTimeout(timer)
        return HTTPResponse(int(resp.status), self._headers(resp), bytes(data))

    async def stream_lines(
        self, method: str, url: str, *, headers: dict[str, str] | None = None,
        body: bytes | None = None, timeout: float | None = 30.0,
    ) -> AsyncIterator[HTTPResponse | str]:
        resp, timer, controller = await self._fetch(method, url, headers, body, timeout)
        reader = resp.body.getReader()
        decoder = js.TextDecoder.new()
        buf = ""
        try:
            yield HTTPResponse(int(resp.status), self._headers(resp))
            while True:
                try:
                    chunk = await reader.read()
                except Exception as e:
                    raise (TransportTimeout if "AbortError" in str(e) else TransportError)(
                        f"{method} {url}: {e}") from e
                if chunk.done:
                    break
                buf += decoder.decode(chunk.value, to_js({"stream": True}, dict_converter=js.Object.fromEntries))
                *lines, buf = buf.split("\n")
                for line in lines:
                    yield line.rstrip("\r")
            if buf:
                yield buf.rstrip("\r")
        finally:
            if timer is not None:
                js.clearTimeout(timer)
            try:
                controller.abort()
            except Exception:
                pass


# ---------------------------------------------------------------------------- the runtime


def index_cache_path(store_name: str) -> str:
    """The OPFS file of the cached query index of the IndexedDB database ``store_name``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in store_name)
    return f"opfs://chatmem-index-{safe}.duckdb"


class PageRuntime(Runtime):
    """chatmem in a browser page (Pyodide): IndexedDB, DuckDB-Wasm, ``fetch``, Web Locks."""

    kind = "page"

    def _default_transport(self) -> Transport:
        return FetchTransport()

    async def open_store(self, name: str, *, persist: str | None, durability: str) -> IndexedDBStore:
        if persist is not None:
            raise ValidationError("persist= is for CPython; in the browser data lives in IndexedDB",
                                  field="persist")
        return await self.open_indexeddb(name, durability=durability)

    async def open_indexeddb(self, name: str, *, durability: str) -> IndexedDBStore:
        return IndexedDBStore(await open_database(name, durability), durability)

    def index_cache(self, store: Any) -> str | None:
        name = getattr(store, "name", None)
        return index_cache_path(name) if store.kind == "indexeddb" and name else None

    async def open_query_engine(self, cache: str | None = None) -> DuckDBWasmEngine:
        if cache:
            engine, notice = await open_index_engine(cache)
            engine.notice = notice
            return engine
        return await DuckDBWasmEngine.open()

    def drain_lock(self, name: str) -> WebLock:
        return WebLock(f"chatmem-sync:{name}")

    online = staticmethod(is_online)

    def on_online(self, fn: Callable[[], None]) -> Callable[[], None]:
        return on_online(fn)

    async def storage_estimate(self, store: Any) -> dict[str, Any]:
        return await storage_estimate()

    async def request_persistence(self, store: Any) -> bool:
        return await request_persistence()

    async def token_counter(self, encoding: str) -> Callable[[str], int]:
        return await bpe_counter(encoding)

    def model_loader(self) -> Callable[[], Awaitable[bytes]]:
        return fetch_model

    def cipher_suite(self) -> WebCryptoSuite:
        return WebCryptoSuite()
