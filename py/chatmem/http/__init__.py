"""The HTTP boundary: one small ``Transport`` protocol, so that the embedder,
the chat provider and sync never care whether they run on CPython (standard
library ``urllib`` in a worker thread, ``runtime.cpython``) or in Pyodide (the
browser's ``fetch``, ``runtime.page``); the runtime gives the transport. Tests inject ``MockTransport(handler)`` for
pure logic and use real servers on 127.0.0.1 for protocol behaviour.

Transport errors are ``TransportError`` (no response at all: refused, reset,
DNS, offline) and ``TransportTimeout``; any HTTP status is a response, not an
error.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Protocol

from ..errors import TransportError, TransportTimeout

__all__ = [
    "HTTPResponse",
    "Transport",
    "TransportError",
    "TransportTimeout",
    "MockTransport",
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
