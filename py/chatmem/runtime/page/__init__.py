"""The page runtime: the only Python package that imports ``js`` / ``pyodide``.

It reaches the JS bridge (``web/js/bridge.js`` and the modules it gathers),
which the page registers as the JS module ``chatmem_bridge``
(``pyodide.registerJsModule``). Everything crosses as JSON text; every bridge
handle answers ``{"ok", "value" | "error": {"name", "message"}}`` and failures
are turned into typed errors here (``errors.translate_dom_error``).
"""

from __future__ import annotations

import gc
from typing import Any, Awaitable, Callable

from ...embedding.static import StaticEmbedder, TokenSums
from ...errors import IndexLocked, ValidationError
from ...http import Transport
from ...stores.indexeddb import IndexedDBStore
from ..base import Runtime
from .bridge import (
    BridgeDB,
    WebCryptoSuite,
    bpe_counter,
    drop_database,
    fetch_model,
    open_database,
    request_persistence,
    run_code,
    storage_estimate,
)
from .duckdb_wasm import (
    DuckDBWasmEngine,
    PageDerivation,
    duckdb_import,
    index_cache_path,
    open_index_engine,
    opfs_exists,
    opfs_remove,
    page_derivation,
)
from .fetch import FetchTransport
from .locks import WebLock, is_online, on_online
from .share import PageShareTransport
from .sums import js_token_sums

__all__ = [
    "PageRuntime",
    "BridgeDB",
    "open_database",
    "drop_database",
    "run_code",
    "FetchTransport",
    "storage_estimate",
    "request_persistence",
    "DuckDBWasmEngine",
    "IndexLocked",
    "opfs_remove",
    "index_cache_path",
    "open_index_engine",
    "WebLock",
    "is_online",
    "on_online",
    "bpe_counter",
    "WebCryptoSuite",
    "fetch_model",
    "PageShareTransport",
]


class PageRuntime(Runtime):
    """chatmem in a browser page (Pyodide): IndexedDB, DuckDB-Wasm, ``fetch``, Web Locks."""

    kind = "page"

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        #: the index cache files whose Web Lock this page holds (it owns their index)
        self._owned: set[str] = set()

    def _default_transport(self) -> Transport:
        return FetchTransport()

    async def open_store(self, name: str, *, persist: str | None, durability: str) -> IndexedDBStore:
        if persist is not None:
            raise ValidationError(
                "persist= is for CPython; in the browser data lives in IndexedDB", field="persist"
            )
        return await self.open_indexeddb(name, durability=durability)

    async def open_indexeddb(self, name: str, *, durability: str) -> IndexedDBStore:
        store = IndexedDBStore(await open_database(name, durability), durability)
        _freeze_modules()
        return store

    def index_cache(self, store: Any) -> str | None:
        return index_cache_path(store.name) if store.kind == "indexeddb" and store.name else None

    async def open_query_engine(self, cache: str | None = None) -> DuckDBWasmEngine:
        if cache:
            engine, notice = await open_index_engine(cache, lock=cache not in self._owned)
            engine.notice = notice
            return engine
        return await DuckDBWasmEngine.open()

    async def early_derivation(
        self, store: Any, cache: str | None, session_counts: list[tuple[str, int]]
    ) -> PageDerivation | None:
        if not cache:
            return None
        try:
            if await opfs_exists(cache.removeprefix("opfs://")):
                return None
        except Exception:  # noqa: BLE001 - no private file system here: the usual way decides
            return None
        # the engine's modules first: the derivation's work on this thread would slow their import
        await duckdb_import()
        return page_derivation(store, session_counts, None)

    def index_share(self, cache: str) -> PageShareTransport:
        return PageShareTransport(cache, self._owned)

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

    def token_sums(self, model: StaticEmbedder) -> TokenSums:
        return js_token_sums(model)

    def cipher_suite(self) -> WebCryptoSuite:
        return WebCryptoSuite()


_frozen = False


def _freeze_modules() -> None:
    """Once per page: move what the first open imported (``import chatmem`` reads its modules
    on first use: their classes and functions live as long as the page) out of reach of
    Python's cyclic collector, as ``loadChatmem`` does with the boot's (js/load.js)."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()
