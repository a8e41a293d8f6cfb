"""The CPython runtime: stores in memory or SQLite, the ``duckdb`` package as
the query engine, ``urllib`` (in a worker thread) as the HTTP transport, and a
drain lock per engine. No browser: no IndexedDB, no online event, no BPE counter.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any, AsyncIterator

from ..errors import TransportError, TransportTimeout, UnsupportedEnvironment
from ..http import HTTPResponse, Transport
from .base import LocalDrainLock, Runtime

if TYPE_CHECKING:
    from ..index.engine import SQLEngine
    from ..stores.base import Store

__all__ = ["CPythonRuntime", "UrllibTransport", "LocalDrainLock"]


class UrllibTransport:
    """CPython transport: ``urllib.request`` run in a worker thread."""

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float | None = 30.0,
    ) -> HTTPResponse:
        return await asyncio.to_thread(self._request, method, url, headers or {}, body, timeout)

    @staticmethod
    def _open(method: str, url: str, headers: dict[str, str], body: bytes | None, timeout: float | None) -> Any:
        req = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            return urllib.request.urlopen(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            return e
        except TimeoutError as e:
            raise TransportTimeout(f"{method} {url}: timed out") from e
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise TransportTimeout(f"{method} {url}: timed out") from e
            raise TransportError(f"{method} {url}: {e.reason}") from e
        except (ConnectionError, OSError) as e:
            raise TransportError(f"{method} {url}: {e}") from e

    def _request(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None, timeout: float | None
    ) -> HTTPResponse:
        resp = self._open(method, url, headers, body, timeout)
        try:
            data = resp.read()
        except TimeoutError as e:
            raise TransportTimeout(f"{method} {url}: timed out reading the body") from e
        except (ConnectionError, OSError) as e:
            raise TransportError(f"{method} {url}: {e}") from e
        except http.client.HTTPException as e:  # IncompleteRead: the answer was cut off
            raise TransportError(f"{method} {url}: answer cut off: {e!r}") from e
        finally:
            resp.close()
        return HTTPResponse(resp.status if hasattr(resp, "status") else resp.code, dict(resp.headers), data)

    async def stream_lines(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float | None = 30.0,
    ) -> AsyncIterator[HTTPResponse | str]:
        resp = await asyncio.to_thread(self._open, method, url, headers or {}, body, timeout)
        try:
            yield HTTPResponse(resp.status if hasattr(resp, "status") else resp.code, dict(resp.headers))
            while True:
                try:
                    line = await asyncio.to_thread(resp.readline)
                except TimeoutError as e:
                    raise TransportTimeout(f"{method} {url}: timed out mid-stream") from e
                except (ConnectionError, OSError) as e:
                    raise TransportError(f"{method} {url}: {e}") from e
                if not line:
                    return
                yield line.decode("utf-8").rstrip("\r\n")
        finally:
            await asyncio.to_thread(resp.close)


class CPythonRuntime(Runtime):
    """chatmem on CPython: ``open(persist=path)`` is SQLite, otherwise memory."""

    kind = "cpython"

    def _default_transport(self) -> Transport:
        return UrllibTransport()

    async def open_store(self, name: str, *, persist: str | None, durability: str) -> Store:
        # imported here: the stores import the sync rules, whose package reaches back for this runtime
        if persist is not None:
            from ..stores.sqlite import SQLiteStore

            return SQLiteStore(str(persist), durability=durability)
        from ..stores.inprocess import MemoryStore

        return MemoryStore()

    async def open_query_engine(self, cache: str | None = None) -> SQLEngine:
        try:
            from ..index.engine import DuckDBEngine

            return DuckDBEngine(cache) if cache else DuckDBEngine()
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise UnsupportedEnvironment("the query index needs the duckdb package: pip install duckdb") from e

    def drain_lock(self, name: str) -> LocalDrainLock:
        return LocalDrainLock()

    async def storage_estimate(self, store: Store) -> dict[str, Any]:
        path = getattr(store, "path", None)
        usage = os.path.getsize(path) if path and path != ":memory:" and os.path.exists(path) else None
        return {"usage": usage, "quota": None, "persisted": path is not None}

    async def request_persistence(self, store: Store) -> bool:
        return getattr(store, "path", None) is not None
