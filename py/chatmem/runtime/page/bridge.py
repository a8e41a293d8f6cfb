"""The page's bridge to JS: the registered ``chatmem_bridge`` module, its envelope
(JSON in; ``{"ok", "value" | "error"}`` out, errors typed here), the IndexedDB
database handle, WebCrypto, the BPE counter, the model download and the test hook."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any, Callable, Iterable

import js  # type: ignore[import-not-found]
from pyodide.code import eval_code_async  # type: ignore[import-not-found]
from pyodide.ffi import create_proxy  # type: ignore[import-not-found]

from ...errors import (
    DatabaseClosed,
    IndexLocked,
    QueryError,
    ReadOnlySQLError,
    SessionNotFound,
    StorageError,
    UnsupportedEnvironment,
    translate_dom_error,
)

__all__ = [
    "BridgeDB",
    "Translate",
    "WebCryptoSuite",
    "bpe_counter",
    "bridge",
    "call",
    "drop_database",
    "engine_error",
    "fetch_model",
    "open_database",
    "opened",
    "request_persistence",
    "run_code",
    "storage_estimate",
    "value_of",
]


def bridge() -> Any:
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


def engine_error(err: dict[str, Any]) -> Exception:
    name, message = err.get("name", "Error"), err.get("message", "")
    if name == "DatabaseClosed":
        return DatabaseClosed(message)
    if name == "IndexLocked":
        return IndexLocked(message)
    if name == "ReadOnlySQLError":
        return ReadOnlySQLError(message, field="query")
    return QueryError(f"{name}: {message}")


async def call(handle: Any, method: str, args: dict[str, Any], translate: Translate, *extra: Any) -> Any:
    """One call through a bridge handle: JSON in, the envelope's value out, or the
    translated error raised (the bridge's own words kept as ``__cause__``).
    ``extra`` (JS values or proxies) follow the JSON text as arguments."""
    return value_of(await handle.call(method, _dumps(args), *extra), translate)


def value_of(answer: str, translate: Translate) -> Any:
    """The value of an envelope (JSON text), or its translated error raised."""
    envelope = json.loads(answer)
    if envelope["ok"]:
        return envelope["value"]
    err = envelope["error"]
    raise translate(err) from StorageError(f"{err.get('name')}: {err.get('message')}")


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def opened(res: Any, translate: Translate) -> Any:
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
        ops = args.get("ops")
        if not callable(ops):
            return await call(self._handle, method, args, _store_error)
        # built only if the transaction finds the outbox on, synchronously inside it
        later = create_proxy(lambda: _dumps(ops()))
        try:
            return await call(self._handle, method, dict(args, ops=None), _store_error, later)
        finally:
            later.destroy()

    def derivation(self, engine_handle: Any, options: dict[str, Any]) -> Any:
        """derive.js's ``Derivation`` of the index in ``engine_handle`` from this database."""
        return bridge().derivation(self._handle, engine_handle, _dumps(options))

    async def append_batches(
        self, session_id: str, batches: Iterable[list[dict[str, Any]]], now: int, ops: Any = None
    ) -> Any:
        """``appendMessages`` with its records fed chunk by chunk (the bridge's ``BatchAppend``):
        IndexedDB writes each chunk while the next is built. Nothing is awaited until every
        chunk is fed, so the transaction stays open; an error raised while building a chunk
        aborts it (nothing written) and propagates. Answers [first seq, session record]."""
        return await _fed(self._handle.batchAppend(session_id), batches, ops, now=now)

    async def import_batches(self, batches: Iterable[list[Any]], ops: Any = None) -> None:
        """``importSessions`` (fresh sessions only) with its [session, messages] pairs fed chunk
        by chunk (the bridge's ``BatchImport``), as ``append_batches`` feeds an append: an
        error raised while building a chunk aborts the transaction (nothing written)."""
        await _fed(self._handle.batchImport(), batches, ops)

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


async def _fed(writer: Any, batches: Iterable[Any], ops: Any, **args: Any) -> Any:
    """Feed ``batches`` to a bridge writer (``BatchAppend``, ``BatchImport``) and finish it with
    ``args`` and ``ops`` (a function: called by the bridge inside the transaction, only if the
    outbox is on). Nothing is awaited until every chunk is fed, so the transaction stays open;
    an error raised while building a chunk aborts it (nothing written) and propagates."""
    later = create_proxy(lambda: _dumps(ops())) if callable(ops) else None
    try:
        try:
            for chunk in batches:
                writer.feed(_dumps(chunk))
        except BaseException:
            writer.abort()
            raise
        answer = writer.finishEnvelope(_dumps({**args, "ops": None if later else ops}), later)
        return value_of(await answer, _store_error)
    finally:
        if later is not None:
            later.destroy()


async def open_database(name: str, durability: str = "relaxed") -> BridgeDB:
    return BridgeDB(opened(await bridge().openEnvelope(name, durability), _store_error), name)


async def drop_database(name: str) -> None:
    await bridge().drop(name)


async def storage_estimate() -> dict[str, Any]:
    return json.loads(await bridge().storageEstimate())  # type: ignore[no-any-return]


async def request_persistence() -> bool:
    return bool(await bridge().requestPersistence())


class WebCryptoSuite:
    """``chatmem.sync.encryption.CipherSuite`` on WebCrypto (``web/js/crypto.js``): one call per batch."""

    async def pbkdf2_sha256(self, password: bytes, salt: bytes, iterations: int) -> bytes:
        out = await bridge().e2ePbkdf2(_b64(password), _b64(salt), iterations)
        return base64.b64decode(str(out))

    async def seal_many(self, key: bytes, items: Any) -> list[bytes]:
        raw = await bridge().e2eSeal(_b64(key), json.dumps([[_b64(x) for x in it] for it in items]))
        return [base64.b64decode(c) for c in json.loads(str(raw))]

    async def open_many(self, key: bytes, items: Any) -> list[bytes | None]:
        raw = await bridge().e2eOpen(_b64(key), json.dumps([[_b64(x) for x in it] for it in items]))
        return [None if p is None else base64.b64decode(p) for p in json.loads(str(raw))]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# ---------------------------------------------------------------------------- exact token counts


async def bpe_counter(encoding: str) -> Callable[[str], int]:
    """A synchronous ``count(text)`` for an OpenAI BPE encoding, run in JS (gpt-tokenizer)."""
    fn = await bridge().tokenCounter(encoding)
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
    data: bytes = buf.to_bytes()  # one copy out of JS
    return data


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
