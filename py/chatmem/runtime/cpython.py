"""The CPython runtime: stores in memory or SQLite, the ``duckdb`` package as
the query engine, ``urllib`` (in a worker thread) as the HTTP transport, and a
drain lock per engine. No browser: no IndexedDB, no online event, no BPE counter.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from typing import TYPE_CHECKING, Any, AsyncIterator

from ..errors import TransportError, TransportTimeout, UnsupportedEnvironment
from ..http import HTTPResponse, Transport
from ..sync.lock import LocalDrainLock
from .base import Runtime

if TYPE_CHECKING:
    from ..index.sql_engine import SQLEngine
    from ..stores.base import Store
    from ..sync.encryption import CipherSuite

__all__ = ["CPythonRuntime", "UrllibTransport"]


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
    def _open(
        method: str, url: str, headers: dict[str, str], body: bytes | None, timeout: float | None
    ) -> Any:
        # imported on the first request: urllib loads http.client, email and more, which
        # chatmem's import in a page (where this module is imported but never used) avoids
        import urllib.error
        import urllib.request

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
        import http.client

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
        """``timeout`` bounds the wait for each read. Lines are read by a daemon thread, so
        abandoning the stream (cancel, ``aclose``) returns at once: the socket is shut down."""
        import http.client

        resp = await asyncio.to_thread(self._open, method, url, headers or {}, body, timeout)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[bytes | BaseException] = asyncio.Queue()

        def put(item: bytes | BaseException) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is gone: nobody is listening
                pass

        def reader() -> None:
            try:
                while True:
                    line = resp.readline()
                    put(line)
                    if not line:
                        return
            except BaseException as e:  # noqa: BLE001 - handed to the consumer
                put(e)

        threading.Thread(target=reader, daemon=True, name="chatmem-stream").start()
        try:
            yield HTTPResponse(resp.status if hasattr(resp, "status") else resp.code, dict(resp.headers))
            while True:
                item = await queue.get()
                if isinstance(item, TimeoutError):
                    raise TransportTimeout(f"{method} {url}: timed out mid-stream") from item
                if isinstance(item, (ConnectionError, OSError, ValueError, http.client.HTTPException)):
                    raise TransportError(f"{method} {url}: {item!r}") from item
                if isinstance(item, BaseException):
                    raise item
                if not item:
                    return
                yield item.decode("utf-8").rstrip("\r\n")
        finally:
            _abandon(resp)


def _abandon(resp: Any) -> None:
    """Close a response another thread may be reading: shut its socket down first."""
    sock = getattr(getattr(getattr(resp, "fp", None), "raw", None), "_sock", None)
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        resp.close()
    except Exception:  # noqa: BLE001 - closing a half-read response may complain; it is closed
        pass


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
            from ..index.sql_engine import DuckDBEngine

            return DuckDBEngine(cache) if cache else DuckDBEngine()
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise UnsupportedEnvironment(
                "the query index needs the duckdb package: pip install duckdb"
            ) from e

    def drain_lock(self, name: str) -> LocalDrainLock:
        return LocalDrainLock()

    async def storage_estimate(self, store: Store) -> dict[str, Any]:
        path = store.path
        usage = os.path.getsize(path) if path and path != ":memory:" and os.path.exists(path) else None
        return {"usage": usage, "quota": None, "persisted": path is not None}

    async def request_persistence(self, store: Store) -> bool:
        return store.path is not None

    def cipher_suite(self) -> CipherSuite:
        from ..sync.cipher import CryptographySuite

        return CryptographySuite()
