"""The HTTP face of the reference server (Starlette, an ASGI framework).

Routes: ``GET /v1/health`` (public; says whether the database answers),
``POST /v1/push``, ``GET /v1/changes``, ``GET /v1/stream`` (Server-Sent
Events, ``live.py``), the end-to-end encryption routes under ``/v1/e2e``
(``encryption.py``); CORS for pages on other origins; Bearer auth mapping an
account token (or an ``--api-key`` key) to its data space (``accounts.py``).
Storage work runs in a worker thread, never on the event loop. One JSON log
line per request: method, path, status, duration, account and operation
count — never a token, a key or any content.

``create_app()`` without arguments is the factory for ``uvicorn --factory
chatmem.server:create_app``: it reads ``CHATMEM_SYNC_*`` (``settings.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ChatmemError, DatabaseUnavailable, RateLimited, StorageFull, ValidationError
from .accounts import Authenticator, Principal, space_for_key
from .backends import open_storage
from .encryption import CAPABILITY, E2EConflict, E2EService
from .faults import Fault, FaultPlan
from .quotas import Quotas
from .service import MAX_OPS_PER_PUSH, SyncService
from .settings import DEFAULT_MAX_BODY, ServerSettings
from .stream import ChangeHub, sse_events

__all__ = ["create_app", "space_for_key", "BodyLimit", "FaultMiddleware", "AccessLog", "MAX_BODY_BYTES"]

MAX_BODY_BYTES = DEFAULT_MAX_BODY

log = logging.getLogger("chatmem.server")
T = TypeVar("T")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def _db(fn: Callable[..., T], *args: Any) -> T:
    try:
        return await run_in_threadpool(fn, *args)
    except ChatmemError:
        raise
    except Exception as e:
        log.error(json.dumps({"event": "database-error", "error": type(e).__name__}))
        raise DatabaseUnavailable(type(e).__name__) from e


_UNAUTHORIZED = {"WWW-Authenticate": 'Bearer realm="chatmem-sync"'}


def create_app(
    service: SyncService | None = None,
    api_keys: Sequence[str] = (),
    *,
    faults: FaultPlan | None = None,
    cors_origins: Sequence[str] = ("*",),
    quotas: Quotas | None = None,
    max_body: int = MAX_BODY_BYTES,
    heartbeat: float = 15.0,
    hub: ChangeHub | None = None,
    settings: ServerSettings | None = None,
    max_body_bytes: int | None = None,
) -> ASGIApp:
    """The ASGI app over ``service``; without a service, everything comes from ``settings``
    (default: ``ServerSettings.from_env()``) and the app owns (and closes) its storage."""
    owned = service is None
    if service is None:
        settings = settings or ServerSettings.from_env()
        service = SyncService(open_storage(settings.db, pool_size=settings.pool_size))
        api_keys, cors_origins = settings.api_keys, settings.cors_origins
        quotas, max_body, heartbeat = settings.quotas, settings.max_body, settings.heartbeat
        if settings.faults and faults is None:
            faults = FaultPlan.parse(settings.faults)
        logging.getLogger("chatmem.server").setLevel(settings.log_level.upper())
    storage = service.storage
    auth = Authenticator(storage, api_keys, quotas)
    keys = E2EService(storage)
    if max_body_bytes is not None:
        max_body = max_body_bytes
    hub = hub if hub is not None else ChangeHub()
    listen = getattr(storage, "listen", None)
    if callable(listen):
        listen(hub.publish_threadsafe)

    async def principal(request: Request) -> Principal | None:
        who = await _db(auth.authenticate, request.headers.get("authorization"))
        if who is not None:
            request.state.account = who.account
        return who

    async def health(request: Request) -> Response:
        try:
            await _db(storage.ping)
        except DatabaseUnavailable:
            return JSONResponse({"status": "unavailable", "database": "unreachable"}, status_code=503)
        return JSONResponse(
            {"status": "ok", "protocol": 1, "capabilities": [CAPABILITY], "database": "ok", "stream": True}
        )

    async def push(request: Request) -> Response:
        who = await principal(request)
        if who is None:
            return _error(401, "missing, unknown or revoked token", _UNAUTHORIZED)
        try:
            payload = json.loads(await request.body())
        except RecursionError:
            return _error(400, "body is nested too deeply")
        except (ValueError, UnicodeDecodeError):
            return _error(400, "body is not valid JSON")
        ops = payload.get("ops") if isinstance(payload, dict) else None
        if isinstance(ops, list):
            request.state.ops = len(ops)
            if len(ops) > MAX_OPS_PER_PUSH:
                return _error(413, f"at most {MAX_OPS_PER_PUSH} operations per push")
        try:
            service.quotas[who.space] = who.quotas
            answer = await _db(service.push, who.space, payload)
        except ValidationError as e:
            return _error(400, str(e))
        except RateLimited as e:
            return _error(429, str(e), {"Retry-After": str(e.retry_after)})
        except StorageFull as e:
            return _error(413, str(e))
        except E2EConflict as e:
            return JSONResponse({"error": str(e), "code": e.code}, status_code=409)
        hub.publish(who.space, int(answer["cursor"]))
        return JSONResponse(answer)

    async def changes(request: Request) -> Response:
        who = await principal(request)
        if who is None:
            return _error(401, "missing, unknown or revoked token", _UNAUTHORIZED)
        q = request.query_params
        try:
            answer = await _db(service.changes, who.space, q.get("since"), q.get("limit"))
        except ValidationError as e:
            return _error(400, str(e))
        return JSONResponse(answer)

    async def call(request: Request, fn: Any, *args: Any) -> Response:
        who = await principal(request)
        if who is None:
            return _error(401, "missing, unknown or revoked token", _UNAUTHORIZED)
        try:
            answer = await _db(fn, who.space, *args)
        except ValidationError as e:
            return _error(400, str(e))
        except E2EConflict as e:
            return JSONResponse({"error": str(e), "code": e.code}, status_code=409)
        return JSONResponse(answer)

    async def json_body(request: Request) -> Any:
        try:
            return json.loads(await request.body())
        except (ValueError, UnicodeDecodeError, RecursionError):
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

    async def stream(request: Request) -> Response:
        who = await principal(request)
        if who is None:
            return _error(401, "missing, unknown or revoked token", _UNAUTHORIZED)
        sub = hub.subscribe(who.space, 0)
        try:
            sub.cursor = max(sub.cursor, await _db(storage.cursor, who.space))
        except BaseException:
            hub.unsubscribe(sub)
            raise
        header = request.headers.get("authorization")

        async def still_valid() -> bool:
            try:
                return await _db(auth.authenticate, header) is not None
            except DatabaseUnavailable:
                return True  # the database is down, not the token: keep the stream

        return StreamingResponse(
            sse_events(hub, sub, heartbeat, still_valid),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def unavailable(request: Request, exc: Exception) -> Response:
        return _error(503, "the database is unavailable; retry later", {"Retry-After": "1"})

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _error(exc.status_code, exc.detail, dict(exc.headers or {}))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        hub.close()
        if owned:
            await asyncio.to_thread(storage.close)

    app: ASGIApp = Starlette(
        routes=[
            Route("/v1/health", health, methods=["GET"]),
            Route("/v1/push", push, methods=["POST"]),
            Route("/v1/changes", changes, methods=["GET"]),
            Route("/v1/stream", stream, methods=["GET"]),
            Route("/v1/e2e", e2e_state, methods=["GET"]),
            Route("/v1/e2e/pending", e2e_pending, methods=["GET"]),
            Route("/v1/e2e/begin", e2e_begin, methods=["POST"]),
            Route("/v1/e2e/rewrite", e2e_rewrite, methods=["POST"]),
            Route("/v1/e2e/commit", e2e_commit, methods=["POST"]),
        ],
        middleware=[
            Middleware(AccessLog),
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST", "OPTIONS"],
                allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
                expose_headers=["Retry-After"],
                # a page on a public origin may reach a server on localhost (Chrome's
                # Private Network Access); every data route still needs the key
                allow_private_network=True,
                max_age=600,
            ),
            Middleware(BodyLimit, max_body=max_body),
        ],
        exception_handlers={DatabaseUnavailable: unavailable, HTTPException: http_error},
        lifespan=lifespan,
    )
    if faults is not None:
        app = FaultMiddleware(app, faults)
    return app


class BodyLimit:
    """A request body over ``max_body`` bytes is answered 413 with the documented JSON
    error (Starlette's own limit answers plain text): refused from its ``Content-Length``
    before it is read, or as soon as the bytes read pass the bound."""

    def __init__(self, app: ASGIApp, max_body: int):
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = _error(413, f"the body is larger than {self.max_body} bytes")
        length = dict(scope.get("headers", [])).get(b"content-length", b"")
        if length.isdigit() and (len(length) > 18 or int(length) > self.max_body):
            await too_large(scope, receive, send)
            return
        read = 0
        passed = started = False

        async def limited() -> Message:
            # past the bound the app is told the client left: reading the body fails there
            nonlocal read, passed
            if passed:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > self.max_body:
                    passed = True
                    return {"type": "http.disconnect"}
            return message

        async def watch(message: Message) -> None:
            nonlocal started
            if passed and not started:
                return  # the answer is the 413 below
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, watch)
        except Exception:
            if not passed or started:
                raise
        if passed and not started:
            await too_large(scope, receive, send)


class AccessLog:
    """One JSON line per request on the ``chatmem.server`` logger (no tokens, no content)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [0]

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            state = scope.get("state", {})
            log.info(
                json.dumps(
                    {
                        "event": "request",
                        "method": scope["method"],
                        "path": scope["path"],
                        "status": status[0],
                        "ms": round((time.perf_counter() - start) * 1000, 1),
                        "account": state.get("account"),
                        "ops": state.get("ops"),
                    }
                )
            )


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
