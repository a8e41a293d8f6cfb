"""The HTTP boundary: one small ``Transport`` protocol, so that the embedder,
the chat provider and sync never care whether they run on CPython (standard
library ``urllib`` in a worker thread) or in Pyodide (the browser's ``fetch``,
provided by the browser adapter). Tests inject ``MockTransport(handler)`` for
pure logic and use real servers on 127.0.0.1 for protocol behaviour.

Transport errors are ``TransportError`` (no response at all: refused, reset,
DNS, offline) and ``TransportTimeout``; any HTTP status is a response, not an
error.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Protocol

from .errors import TransportError, TransportTimeout

__all__ = [
    "HTTPResponse",
    "Transport",
    "TransportError",
    "TransportTimeout",
    "UrllibTransport",
    "MockTransport",
    "default_transport",
]


@dataclass
class HTTPResponse:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def header(self, name: str) -> str | None:
        name = name.lower()
        for k, v in self.headers.items():
            if k.lower() == name:
                return v
        return None


class Transport(Protocol):
    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float | None = 30.0,
    ) -> HTTPResponse: ...

    def stream_lines(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float | None = 30.0,
    ) -> AsyncIterator[HTTPResponse | str]:
        """Yield the ``HTTPResponse`` (status and headers, empty body) first, then
        each line of the body as it arrives (for server-sent events)."""
        ...


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
        """``timeout`` bounds the wait for each read. Lines are read by a daemon thread, so
        abandoning the stream (cancel, ``aclose``) returns at once: the socket is shut down."""
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


Handler = Callable[[str, str, dict[str, str], bytes | None], Awaitable[HTTPResponse] | HTTPResponse]


class MockTransport:
    """A transport that answers with ``handler(method, url, headers, body)``; for unit tests."""

    def __init__(self, handler: Handler):
        self.handler = handler
        self.calls: list[tuple[str, str, dict[str, str], bytes | None]] = []

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float | None = 30.0,
    ) -> HTTPResponse:
        self.calls.append((method, url, headers or {}, body))
        out = self.handler(method, url, headers or {}, body)
        if asyncio.iscoroutine(out) or isinstance(out, Awaitable):
            out = await out
        assert isinstance(out, HTTPResponse)
        return out

    async def stream_lines(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float | None = 30.0,
    ) -> AsyncIterator[HTTPResponse | str]:
        resp = await self.request(method, url, headers=headers, body=body, timeout=timeout)
        yield HTTPResponse(resp.status, resp.headers)
        for line in resp.body.decode("utf-8").split("\n"):
            yield line


def default_transport() -> Transport:
    """``fetch`` in the browser, ``urllib`` on CPython."""
    import sys

    if sys.platform == "emscripten":
        from . import _browser

        return _browser.FetchTransport()
    return UrllibTransport()
