"""The browser adapter: the only module that imports ``js`` / ``pyodide``.

It reaches the JS bridge (``web/js/bridge.js``), which the page registers as
the JS module ``chatmem_bridge`` (``pyodide.registerJsModule``). Everything
crosses as JSON text; bridge failures come back as ``{"name", "message"}``
and are turned into typed errors here (``errors.translate_dom_error``).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from typing import Any, AsyncIterator, Callable

import js  # type: ignore[import-not-found]
from pyodide.code import eval_code_async  # type: ignore[import-not-found]
from pyodide.ffi import create_proxy, to_js  # type: ignore[import-not-found]

from .errors import (
    DatabaseClosed,
    IndexLocked,
    QueryError,
    SessionNotFound,
    StorageError,
    TransportError,
    TransportTimeout,
    UnsupportedEnvironment,
    translate_dom_error,
)
from .http import HTTPResponse

__all__ = ["BridgeDB", "open_database", "run_code", "FetchTransport", "storage_estimate",
           "request_persistence", "DuckDBWasmEngine", "IndexLocked", "opfs_remove", "WebLock",
           "open_index_engine", "is_online", "on_online", "WebCryptoSuite"]


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


def _error(err: dict[str, Any]) -> Exception:
    name, message = err.get("name", "Error"), err.get("message", "")
    if name == "SessionNotFound":
        return SessionNotFound(message)
    return translate_dom_error(name, message)


class BridgeDB:
    """One open IndexedDB database; ``call`` runs one bridge method = one transaction."""

    def __init__(self, handle: Any, name: str):
        self._handle = handle
        self.name = name
        self._proxies: list[Any] = []

    async def call(self, method: str, **args: Any) -> Any:
        raw = await self._handle.call(method, json.dumps(args, separators=(",", ":")))
        envelope = json.loads(raw)
        if envelope["ok"]:
            return envelope["value"]
        err = envelope["error"]
        exc = _error(err)
        cause = StorageError(f"{err.get('name')}: {err.get('message')}")
        raise exc from cause

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
    res = await _bridge().openEnvelope(name, durability)
    if not res.ok:
        raise _error(json.loads(res.error))
    return BridgeDB(res.db, name)


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
    """``chatmem.index.SQLEngine`` over DuckDB-Wasm in a worker (see bridge.js ``duckdbOpen``).

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

    @classmethod
    async def open(cls, path: str | None = None) -> DuckDBWasmEngine:
        """Open DuckDB-Wasm; ``IndexLocked`` when another tab holds the ``opfs://`` file."""
        res = await _bridge().duckdbOpenEnvelope(path)
        if not res.ok:
            err = json.loads(res.error)
            if err.get("name") == "IndexLocked":
                raise IndexLocked(err.get("message", ""))
            raise QueryError(f"{err.get('name')}: {err.get('message')}")
        return cls(res.engine, path)

    async def _call(self, method: str, **args: Any) -> Any:
        raw = await self._handle.call(method, json.dumps(args, separators=(",", ":")))
        envelope = json.loads(raw)
        if envelope["ok"]:
            return envelope["value"]
        err = envelope["error"]
        cause = StorageError(f"{err.get('name')}: {err.get('message')}")
        if err.get("name") == "DatabaseClosed":
            raise DatabaseClosed(err.get("message", "")) from cause
        raise QueryError(f"{err.get('name')}: {err.get('message')}") from cause

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
