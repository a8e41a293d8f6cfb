"""``chatmem.http.Transport`` over the browser's ``fetch``."""

from __future__ import annotations

from typing import Any, AsyncIterator

import js  # type: ignore[import-not-found]
from pyodide.ffi import create_proxy, to_js  # type: ignore[import-not-found]

from ...errors import TransportError, TransportTimeout
from ...http import HTTPResponse

__all__ = ["FetchTransport"]


class FetchTransport:
    """``chatmem.http.Transport`` over the browser's ``fetch``."""

    async def _fetch(
        self,
        method: str,
        url: str,
        headers: dict[str, str] | None,
        body: bytes | None,
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
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float | None = 30.0,
    ) -> HTTPResponse:
        resp, timer, _ = await self._fetch(method, url, headers, body, timeout)
        try:
            data = (await resp.arrayBuffer()).to_bytes()
        except Exception as e:
            raise (TransportTimeout if "AbortError" in str(e) else TransportError)(
                f"{method} {url}: {e}"
            ) from e
        finally:
            if timer is not None:
                js.clearTimeout(timer)
        return HTTPResponse(int(resp.status), self._headers(resp), bytes(data))

    async def stream_lines(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float | None = 30.0,
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
                        f"{method} {url}: {e}"
                    ) from e
                if chunk.done:
                    break
                buf += decoder.decode(
                    chunk.value, to_js({"stream": True}, dict_converter=js.Object.fromEntries)
                )
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
