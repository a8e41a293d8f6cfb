"""``AnthropicProvider``: Claude through Anthropic's Messages API, streamed.

``POST {base_url}/v1/messages`` with ``stream: true``; the answer arrives as
server-sent events (``message_start``, ``content_block_delta`` with
``text_delta`` pieces, ``message_delta`` with the ``stop_reason``,
``message_stop``; ``error`` events mid-stream). The window it is given may be
OpenAI-style messages (what ``build_context`` returns by default; converted
with ``chatmem.chat.formats.to_anthropic``) or the ``{"system", "messages"}`` shape
of ``build_context(..., format="anthropic")``.

Same failure semantics as ``OpenAICompatibleProvider``: HTTP statuses become
the ``ProviderError`` family (401/403 auth, 404, 429 with ``Retry-After``,
5xx and 529 "overloaded" as server errors); an ``error`` event, a stream that
ends before ``message_stop``, or a dropped connection raise
``ProviderServerError``; so the chat turn keeps the user message and stores
nothing of the answer. The api key goes only into the ``x-api-key`` header.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Mapping, Sequence

from ..errors import ProviderServerError, ProviderTimeout, ProviderUnavailable, ValidationError
from ..http import HTTPResponse, Transport, TransportError, TransportTimeout
from .formats import from_anthropic_blocks, to_anthropic
from .providers import HTTPProvider, provider_error

__all__ = ["AnthropicProvider", "ANTHROPIC_VERSION"]

#: the ``anthropic-version`` header sent with every request
ANTHROPIC_VERSION = "2023-06-01"


class AnthropicProvider(HTTPProvider):
    """A Claude model behind the Messages API (or any server speaking it)."""

    #: the window format this provider wants (sets the per-message token overhead)
    format = "anthropic"

    def __init__(
        self,
        api_key: str | None,
        model: str = "claude-sonnet-4-5",
        base_url: str = "https://api.anthropic.com",
        *,
        max_tokens: int = 1024,
        temperature: float | None = None,
        name: str = "anthropic",
        timeout: float = 60.0,
        transport: Transport | None = None,
        extra_body: dict[str, Any] | None = None,
    ):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValidationError("base_url must be an http(s) URL", field="base_url")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValidationError("max_tokens must be an int >= 1", field="max_tokens")
        if temperature is not None and not isinstance(temperature, (int, float)):
            raise ValidationError("temperature must be a number", field="temperature")
        self._api_key = api_key
        self.model = model
        base = base_url.rstrip("/")
        self.base_url = base[: -len("/v1")] if base.endswith("/v1") else base
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.name = name
        self.timeout = timeout
        self.extra_body = dict(extra_body or {})
        self._transport = transport

    def __repr__(self) -> str:
        return f"AnthropicProvider(model={self.model!r}, base_url={self.base_url!r})"  # no key

    def _request(
        self,
        messages: Sequence[Mapping[str, Any]] | Mapping[str, Any],
        model: str | None,
        stream: bool,
        kw: dict[str, Any],
    ) -> tuple[str, dict[str, str], bytes]:
        shaped = dict(messages) if isinstance(messages, Mapping) else to_anthropic(messages)
        body: dict[str, Any] = {
            "model": model or self.model,
            "max_tokens": self.max_tokens,
            "messages": shaped["messages"],
            "stream": stream,
        }
        if shaped.get("system"):
            body["system"] = shaped["system"]
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        body.update(kw)
        headers = {
            "content-type": "application/json",
            "anthropic-version": ANTHROPIC_VERSION,
            "accept": "text/event-stream" if stream else "application/json",
        }
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return f"{self.base_url}/v1/messages", headers, json.dumps(body).encode()

    async def complete(self, messages: Any, *, model: str | None = None, **kw: Any) -> str:
        """The whole answer's text at once (no streaming)."""
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
            return from_anthropic_blocks(data["content"])[0]
        except (ValueError, KeyError, TypeError) as e:
            raise ProviderServerError(f"{url}: unreadable answer") from e

    async def stream(self, messages: Any, *, model: str | None = None, **kw: Any) -> AsyncIterator[str]:
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
                rest = [str(line) async for line in lines]
                raise provider_error(HTTPResponse(first.status, first.headers, "\n".join(rest).encode()), url)
            async for line in lines:
                assert isinstance(line, str)
                if not line.startswith("data:"):
                    continue  # "event:" lines name the type the data repeats
                try:
                    event = json.loads(line[5:].strip())
                except ValueError as e:
                    raise ProviderServerError(f"{url}: unreadable event in the stream") from e
                kind = event.get("type") if isinstance(event, dict) else None
                if kind == "error":
                    err = event.get("error") or {}
                    raise ProviderServerError(f"{url}: {err.get('type', 'error')}: {err.get('message', '')}")
                if kind == "content_block_delta":
                    delta = event.get("delta") or {}
                    if delta.get("type") == "text_delta" and delta.get("text"):
                        yield str(delta["text"])
                elif kind == "message_stop":
                    finished = True
                    break
            if not finished:
                raise ProviderServerError(f"{url}: the stream ended before the answer finished")
        except TransportTimeout as e:
            raise ProviderTimeout(f"{url}: timed out") from e
        except TransportError as e:
            raise (ProviderServerError if "mid-stream" in str(e) else ProviderUnavailable)(
                f"{url}: {e}"
            ) from e
        finally:
            await lines.aclose()  # type: ignore[attr-defined]
