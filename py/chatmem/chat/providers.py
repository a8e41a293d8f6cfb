"""Chat models: the ``ChatProvider`` interface and an OpenAI-compatible client.

``OpenAICompatibleProvider`` speaks ``POST {base_url}/chat/completions`` with
``stream: true`` (server-sent events), which OpenAI, Ollama, LM Studio,
llama.cpp's server and vLLM all serve. It runs over ``chatmem.http``: the
browser's ``fetch`` in Pyodide, ``urllib`` on CPython. Cancel a turn by
cancelling its task: the connection is closed and nothing is returned.
The api key goes only into the ``Authorization`` header, never into URLs,
errors or logs.
"""

from __future__ import annotations

import json
import math
from typing import Any, AsyncIterator, Protocol, runtime_checkable

from ..errors import (
    ProviderAuthError,
    ProviderError,
    ProviderNotFound,
    ProviderRateLimited,
    ProviderServerError,
    ProviderTimeout,
    ProviderUnavailable,
    TransportError,
    TransportTimeout,
    ValidationError,
)
from ..http import HTTPResponse, Transport

__all__ = ["ChatProvider", "HTTPProvider", "OpenAICompatibleProvider", "provider_error"]


@runtime_checkable
class ChatProvider(Protocol):
    """What the chat turn and the LLM summarizer need from a model."""

    #: recorded on assistant messages as ``provider``
    name: str

    async def complete(
        self, messages: list[dict[str, Any]], *, model: str | None = None, **kw: Any
    ) -> str: ...

    def stream(
        self, messages: list[dict[str, Any]], *, model: str | None = None, **kw: Any
    ) -> AsyncIterator[str]: ...


def _retry_after_ms(resp: HTTPResponse) -> int | None:
    value = resp.header("retry-after")
    try:
        seconds = float(value) if value else math.nan
    except ValueError:
        return None
    return int(seconds * 1000) if math.isfinite(seconds) and 0 <= seconds <= 86_400 * 365 else None


def provider_error(resp: HTTPResponse, url: str) -> ProviderError:
    """The one place HTTP statuses of a model server become typed errors."""
    detail = ""
    try:
        body = resp.json()
        if isinstance(body, dict):
            err = body.get("error")
            detail = err.get("message", "") if isinstance(err, dict) else str(err or "")
    except (ValueError, UnicodeDecodeError):
        detail = resp.text[:200]
    where = f"{url}: HTTP {resp.status}" + (f": {detail}" if detail else "")
    s = resp.status
    if s in (401, 403):
        return ProviderAuthError(f"{where} (check the api key)", status=s)
    if s == 404:
        return ProviderNotFound(f"{where} (check the base URL and the model name)", status=s)
    if s == 429:
        return ProviderRateLimited(where, status=s, retry_after_ms=_retry_after_ms(resp))
    if s >= 500:
        return ProviderServerError(where, status=s)
    return ProviderError(where, status=s)


class HTTPProvider:
    """What the HTTP chat providers share: the transport, the runtime's default
    unless one was given (no I/O until the first request)."""

    _transport: Transport | None

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            from ..runtime import default_transport

            self._transport = default_transport()
        return self._transport


class OpenAICompatibleProvider(HTTPProvider):
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str = "gpt-4o-mini",
        temperature: float | None = None,
        *,
        name: str = "openai-compatible",
        timeout: float = 60.0,
        transport: Transport | None = None,
        extra_body: dict[str, Any] | None = None,
    ):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValidationError("base_url must be an http(s) URL", field="base_url")
        if temperature is not None and not isinstance(temperature, (int, float)):
            raise ValidationError("temperature must be a number", field="temperature")
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.model = model
        self.temperature = temperature
        self.name = name
        self.timeout = timeout
        self.extra_body = dict(extra_body or {})
        self._transport = transport

    def __repr__(self) -> str:
        return f"OpenAICompatibleProvider({self.base_url!r}, model={self.model!r})"  # no key

    def _request(
        self, messages: list[dict[str, Any]], model: str | None, stream: bool, kw: dict[str, Any]
    ) -> tuple[str, dict[str, str], bytes]:
        body: dict[str, Any] = {"model": model or self.model, "messages": messages, "stream": stream}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        body.update(kw)
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return f"{self.base_url}/chat/completions", headers, json.dumps(body).encode()

    async def complete(self, messages: list[dict[str, Any]], *, model: str | None = None, **kw: Any) -> str:
        """The whole answer at once (no streaming)."""
        url, headers, body = self._request(messages, model, False, kw)
        try:
            resp = await self.transport.request("POST", url, headers=headers, body=body, timeout=self.timeout)
        except TransportTimeout as e:
            raise ProviderTimeout(f"{url}: timed out") from e
        except TransportError as e:
            raise ProviderUnavailable(f"{url}: {e}") from e
        if resp.status != 200:
            raise provider_error(resp, url)
        try:
            data = resp.json()
            return str(data["choices"][0]["message"].get("content") or "")
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise ProviderServerError(f"{url}: unreadable answer") from e

    async def stream(
        self, messages: list[dict[str, Any]], *, model: str | None = None, **kw: Any
    ) -> AsyncIterator[str]:
        """Yield the answer's text pieces as the server sends them (SSE)."""
        url, headers, body = self._request(messages, model, True, kw)
        finished = False
        lines = self.transport.stream_lines("POST", url, headers=headers, body=body, timeout=self.timeout)
        try:
            try:
                first = await lines.__anext__()
            except StopAsyncIteration as e:
                raise ProviderServerError(f"{url}: empty answer") from e
            assert isinstance(first, HTTPResponse)
            if first.status != 200:
                rest = []
                async for line in lines:
                    rest.append(str(line))
                raise provider_error(HTTPResponse(first.status, first.headers, "\n".join(rest).encode()), url)
            async for line in lines:
                assert isinstance(line, str)
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    finished = True
                    break
                try:
                    event = json.loads(data)
                except ValueError as e:
                    raise ProviderServerError(f"{url}: unreadable event in the stream") from e
                if isinstance(event, dict) and event.get("error"):
                    raise ProviderServerError(f"{url}: {event['error']}")
                for choice in event.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        yield piece
                    if choice.get("finish_reason"):
                        finished = True
            if not finished:
                raise ProviderServerError(f"{url}: the stream ended before the answer finished")
        except TransportTimeout as e:
            raise ProviderTimeout(f"{url}: timed out") from e
        except TransportError as e:
            raise (
                ProviderServerError if finished is False and "mid-stream" in str(e) else ProviderUnavailable
            )(f"{url}: {e}") from e
        finally:
            await lines.aclose()  # type: ignore[attr-defined]
