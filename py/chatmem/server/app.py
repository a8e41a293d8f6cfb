"""The HTTP face of the reference server (Starlette, an ASGI framework).

Routes: ``GET /v1/health``, ``POST /v1/push``, ``GET /v1/changes``, and the
end-to-end encryption routes under ``/v1/e2e`` (see ``e2e``); CORS for
pages on other origins; Bearer-key auth mapping each key to its own data
space (the space is a hash of the key: the database never holds a key).
Storage work runs in a worker thread, never on the event loop.

This is the only module of chatmem that imports a third-party package.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ValidationError
from .e2e import CAPABILITY, E2EConflict, E2EService
from .faults import Fault, FaultPlan
from .service import MAX_OPS_PER_PUSH, SyncService

__all__ = ["create_app", "space_for_key", "FaultMiddleware", "MAX_BODY_BYTES"]

MAX_BODY_BYTES = 16 * 1024 * 1024


def space_for_key(api_key: str) -> str:
    """The data space of a key: a hash, so keys are never stored."""
    return hashlib.sha256(("chatmem-space:" + api_key).encode("utf-8")).hexdigest()


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class _Auth:
    def __init__(self, api_keys: Sequence[str]):
        if not api_keys:
            raise ValidationError("at least one api key is needed", field="api_keys")
        self._keys = [(k.encode("utf-8"), space_for_key(k)) for k in api_keys]

    def space(self, request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        given = token.strip().encode("utf-8")
        found = None
        for key, space in self._keys:  # compare with every key, in constant time each
            if hmac.compare_digest(key, given):
                found = space
        return found


_UNAUTHORIZED = {"WWW-Authenticate": 'Bearer realm="chatmem-sync"'}


def create_app(
    service: SyncService,
    api_keys: Sequence[str],
    *,
    faults: FaultPlan | None = None,
    cors_origins: Sequence[str] = ("*",),
    max_body_bytes: int = MAX_BODY_BYTES,
) -> ASGIApp:
    """The ASGI app. Request bodies over ``max_body_bytes`` are refused with 413."""
    auth = _Auth(api_keys)
    keys = E2EService(service.storage)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "protocol": 1, "capabilities": [CAPABILITY]})

    async def call(request: Request, fn: Any, *args: Any) -> Response:
        space = auth.space(request)
        if space is None:
            return _error(401, "missing or unknown api key", _UNAUTHORIZED)
        try:
            answer = await run_in_threadpool(fn, space, *args)
        except ValidationError as e:
            return _error(400, str(e))
        except E2EConflict as e:
            return JSONResponse({"error": str(e), "code": e.code}, status_code=409)
        return JSONResponse(answer)

    async def json_body(request: Request) -> Any:
        try:
            return json.loads(await request.body())
        except (ValueError, UnicodeDecodeError):
            return None

    async def e2e_state(request: Request) -> Response:
        return await call(request, keys.state)

    async def e2e_pending(request: Request) -> Response:
        q = request.query_params
        return await call(request, keys.pending, q.get("after"), q.get("limit"))

    async def e2e_begin(request: Request) -> Response:
        return await call(request, keys.begin, await json_body(request))

    async def e2e_rewrite(request: Request) -> Response:
        return await call(request, keys.rewrite, await json_body(request))

    async def e2e_commit(request: Request) -> Response:
        return await call(request, keys.commit, await json_body(request))

    async def push(request: Request) -> Response:
        space = auth.space(request)
        if space is None:
            return _error(401, "missing or unknown api key", _UNAUTHORIZED)
        try:
            payload = json.loads(await request.body())
        except RecursionError:
            return _error(400, "body is nested too deeply")
        except (ValueError, UnicodeDecodeError):
            return _error(400, "body is not valid JSON")
        ops = payload.get("ops") if isinstance(payload, dict) else None
        if isinstance(ops, list) and len(ops) > MAX_OPS_PER_PUSH:
            return _error(413, f"at most {MAX_OPS_PER_PUSH} operations per push")
        try:
            answer = await run_in_threadpool(service.push, space, payload)
        except ValidationError as e:
            return _error(400, str(e))
        except E2EConflict as e:
            return JSONResponse({"error": str(e), "code": e.code}, status_code=409)
        return JSONResponse(answer)

    async def changes(request: Request) -> Response:
        space = auth.space(request)
        if space is None:
            return _error(401, "missing or unknown api key", _UNAUTHORIZED)
        q = request.query_params
        try:
            answer = await run_in_threadpool(service.changes, space, q.get("since"), q.get("limit"))
        except ValidationError as e:
            return _error(400, str(e))
        return JSONResponse(answer)

    app: ASGIApp = Starlette(
        routes=[
            Route("/v1/health", health, methods=["GET"]),
            Route("/v1/push", push, methods=["POST"]),
            Route("/v1/changes", changes, methods=["GET"]),
            Route("/v1/e2e", e2e_state, methods=["GET"]),
            Route("/v1/e2e/pending", e2e_pending, methods=["GET"]),
            Route("/v1/e2e/begin", e2e_begin, methods=["POST"]),
            Route("/v1/e2e/rewrite", e2e_rewrite, methods=["POST"]),
            Route("/v1/e2e/commit", e2e_commit, methods=["POST"]),
        ],
        middleware=[
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST", "OPTIONS"],
                allow_headers=["Authorization", "Content-Type"],
                expose_headers=["Retry-After"],
                # a page on a public origin may reach a server on localhost (Chrome's
                # Private Network Access); every data route still needs the key
                allow_private_network=True,
                max_age=600,
            )
        ],
        max_body_size=max_body_bytes,
    )
    if faults is not None:
        app = FaultMiddleware(app, faults)
    return app


class FaultMiddleware:
    """Outermost ASGI layer: inflicts the ``FaultPlan``'s faults (never on OPTIONS)."""

    def __init__(self, app: ASGIApp, plan: FaultPlan):
        self.app = app
        self.plan = plan

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        fault = self.plan.take(scope["path"])
        if fault is None:
            await self.app(scope, receive, send)
            return
        if not fault.after:
            if fault.kind == "delay":
                await self._hold(fault.seconds)
                await self.app(scope, receive, send)
            else:
                await self._inflict(fault, scope, send)
            return
        # serve the request (its effect is durable), then spoil the answer
        captured: list[Message] = []

        async def capture(message: Message) -> None:
            captured.append(message)

        await self.app(scope, receive, capture)
        if fault.kind == "delay":
            await self._hold(fault.seconds)
            for m in captured:
                await send(m)
        else:
            await self._inflict(fault, scope, send)

    async def _hold(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while not self.plan.stopping.is_set() and loop.time() < end:
            await asyncio.sleep(min(0.05, max(0.0, end - loop.time())))

    @staticmethod
    def _cors(scope: Scope) -> list[tuple[bytes, bytes]]:
        for k, v in scope.get("headers", []):
            if k == b"origin":
                return [(b"access-control-allow-origin", v), (b"vary", b"Origin")]
        return []

    async def _inflict(self, fault: Fault, scope: Scope, send: Send) -> None:
        if fault.kind == "drop":
            cycle = getattr(send, "__self__", None)  # uvicorn's RequestResponseCycle
            transport = getattr(cycle, "transport", None)
            if transport is not None:
                transport.abort()
                return
            # another server: start an answer and never finish it
            await send({"type": "http.response.start", "status": 200, "headers": []})
            raise ConnectionAbortedError("fault injection: connection dropped")
        body = json.dumps({"error": f"injected fault: HTTP {fault.status}"}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        headers += self._cors(scope)
        if fault.retry_after is not None:
            headers.append((b"retry-after", fault.retry_after.encode("latin-1")))
            headers.append((b"access-control-expose-headers", b"Retry-After"))
        await send({"type": "http.response.start", "status": fault.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
