"""``SyncClient``: the client half of the sync protocol (``/v1/push``, ``/v1/changes``).

Stateless and store-free: it sends what it is given over an injected
``chatmem.http.Transport`` and turns every answer into either a typed result
or a typed ``SyncError``. Retrying, leasing and dead-lettering belong to the
outbox drain loop, which decides from the error class:

====================================  ==========================  ================================
what happened                         raised                      drain loop should
====================================  ==========================  ================================
no connection (refused, DNS, offline) ``SyncOffline``             wait; not a failed attempt
timeout, reset, 5xx, 429, bad answer  ``SyncTransientError``      count an attempt, back off
                                                                  (``retry_after_ms`` if set)
401, 403                              ``SyncAuthError``           pause; dead-letter nothing
409 with an ``e2e-*`` code             ``WrongPassphrase``         pause; keep the ops (encryption
                                                                  key changed, or required)
400, 404, 409, 413, 422, other 4xx    ``SyncPermanentError``      dead-letter the batch's ops
200                                   ``PushResponse``            per op: applied / duplicate ->
                                                                  remove; rejected -> dead letter;
                                                                  ``missing`` -> keep, resend
====================================  ==========================  ================================

The api key travels only in the ``Authorization`` header: never in a URL,
never in an error message (any echo of it is replaced by ``***``).
"""

from __future__ import annotations

import errno
import json
import socket
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import (
    SyncAuthError,
    SyncError,
    SyncOffline,
    SyncPermanentError,
    SyncTransientError,
    TransportError,
    TransportTimeout,
    ValidationError,
    WrongPassphrase,
    shown,
)
from ..http import HTTPResponse, Transport
from ..records.hlc import is_hlc, validate_device_id
from ..records.ids import Clock, system_clock
from .backoff import parse_retry_after
from .config import SyncConfig
from .ops import RESOURCES

__all__ = [
    "OpStatus",
    "OpResult",
    "PushResponse",
    "Change",
    "ChangesPage",
    "SyncClient",
    "error_for_status",
    "error_for_transport",
    "MAX_CHANGES_LIMIT",
]

OpStatus = Literal["applied", "duplicate", "rejected"]
_OP_STATUSES = frozenset({"applied", "duplicate", "rejected"})
MAX_CHANGES_LIMIT = 1000
#: seconds a live stream may stay silent (the server pings every 15 s; in the page, fetch
#: ends the request after this long and the stream reconnects)
STREAM_TIMEOUT = 60.0
_EXCERPT = 2000
#: 409 codes meaning "this device's key does not fit the space" (see ``chatmem.server.encryption``)
_KEY_CODES = frozenset({"e2e-required", "e2e-key-changed", "e2e-change-in-progress"})
_UNREACHABLE_ERRNOS = frozenset(
    {errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EADDRNOTAVAIL}
)


@dataclass(frozen=True)
class OpResult:
    op_id: str
    status: OpStatus
    reason: str | None = None

    @property
    def delivered(self) -> bool:
        """The server holds this operation's effect (now or from an earlier attempt)."""
        return self.status in ("applied", "duplicate")


@dataclass(frozen=True)
class PushResponse:
    #: one per sent operation the server answered for, in the order sent
    results: list[OpResult]
    #: op_ids sent but absent from the answer: not acknowledged, keep and resend them
    missing: list[str]
    #: the server's latest change-feed cursor after this push (informational)
    cursor: str | None

    def by_op_id(self) -> dict[str, OpResult]:
        return {r.op_id: r for r in self.results}


@dataclass(frozen=True)
class Change:
    resource: Literal["session", "message", "fact"]
    id: str
    #: the record as the server holds it (merged); None for a tombstone
    data: dict[str, Any] | None
    deleted: bool
    hlc: str


@dataclass(frozen=True)
class ChangesPage:
    changes: list[Change]
    #: pass as ``since`` next time (store it only after applying ``changes``)
    cursor: str
    #: more changes wait after ``cursor``: ask again at once
    more: bool
    #: entries of the page that are not changes at all: ``{"change": <as received>, "reason": ...}``
    #: (the page is still good: the caller sets these aside and moves on)
    malformed: list[dict[str, Any]] = field(default_factory=list)


def _redact(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret else text


def _excerpt(resp: HTTPResponse, secret: str) -> str:
    return _redact(resp.text[:_EXCERPT], secret)


def error_for_status(resp: HTTPResponse, *, what: str, secret: str = "", now_ms: int = 0) -> SyncError | None:
    """The typed error for a non-2xx sync answer (None for 2xx): the one HTTP-status map."""
    status = resp.status
    if 200 <= status < 300:
        return None
    body = _excerpt(resp, secret)
    detail = code = ""
    try:
        parsed = json.loads(body) if body else None
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
            detail = ": " + parsed["error"]
        if isinstance(parsed, dict) and isinstance(parsed.get("code"), str):
            code = parsed["code"]
    except ValueError:
        pass
    msg = f"{what}: HTTP {status}{detail}"
    if status == 409 and code in _KEY_CODES:
        return WrongPassphrase(msg, status=status, response=body)
    if status in (401, 403):
        return SyncAuthError(
            f"{msg} (the server refused the api key: check your key)", status=status, response=body
        )
    if status == 429 or status >= 500 or status == 408:
        wait = parse_retry_after(resp.header("Retry-After"), now_ms)
        return SyncTransientError(msg, status=status, response=body, retry_after_ms=wait)
    return SyncPermanentError(msg, status=status, response=body)


def _urlencode(params: dict[str, Any]) -> str:
    import urllib.parse  # here, not at import: it loads ipaddress (costly at a page's start-up)

    return urllib.parse.urlencode(params)


def _reached_server(exc: BaseException) -> bool | None:
    """True if the cause chain shows a connection was made, False if it never was, None if unknown."""
    import http.client  # here, not at import: it loads email and more (costly at a page's start-up)

    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, (ConnectionResetError, BrokenPipeError, http.client.HTTPException)):
            return True
        if isinstance(cur, (ConnectionRefusedError, socket.gaierror)):
            return False
        if isinstance(cur, OSError) and cur.errno in _UNREACHABLE_ERRNOS:
            return False
        reason = getattr(cur, "reason", None)
        if isinstance(reason, BaseException) and id(reason) not in seen:
            cur = reason
            continue
        cur = cur.__cause__ or cur.__context__
    return None


def error_for_transport(
    exc: TransportError, *, what: str, secret: str = "", online: Callable[[], bool] | None = None
) -> SyncError:
    """The typed error for a request that got no HTTP answer.

    Timeout -> transient. Otherwise offline, unless the cause shows the server
    was reached and then dropped the connection (reset) -> transient. With no
    detail at all (a browser's ``fetch`` TypeError) it is offline: a guess that
    never dead-letters anything.
    """
    msg = _redact(f"{what}: {exc}", secret)
    if isinstance(exc, TransportTimeout):
        return SyncTransientError(msg)
    if online is not None and not online():
        return SyncOffline(f"{what}: offline")
    if _reached_server(exc):
        return SyncTransientError(msg)
    return SyncOffline(msg)


class SyncClient:
    """Talks to one sync server with one key, as one device."""

    def __init__(
        self,
        config: SyncConfig,
        transport: Transport | None = None,
        *,
        device_id: str,
        clock: Clock = system_clock,
        online: Callable[[], bool] | None = None,
    ):
        config.validate()
        if not config.endpoint or not config.api_key:
            raise ValidationError("sync needs an endpoint and an api_key", field="endpoint")
        self.config = config
        if transport is None:
            from ..runtime import default_transport

            transport = default_transport()
        self.transport = transport
        self.device_id = validate_device_id(device_id)
        self._clock = clock
        self._online = online

    def __repr__(self) -> str:
        return f"SyncClient(endpoint={self.config.endpoint!r}, device_id={self.device_id!r})"

    def _headers(self, with_body: bool) -> dict[str, str]:
        h = {"Authorization": f"Bearer {self.config.api_key}", "Accept": "application/json"}
        if with_body:
            h["Content-Type"] = "application/json"
        return h

    async def _call(self, method: str, path: str, query: str, body: bytes | None) -> Any:
        import http.client

        url = self.config.url(path) + (f"?{query}" if query else "")
        what = f"{method} {self.config.url(path)}"
        secret = self.config.api_key
        if self._online is not None and not self._online():
            raise SyncOffline(f"{what}: offline")
        try:
            resp = await self.transport.request(
                method,
                url,
                headers=self._headers(body is not None),
                body=body,
                timeout=self.config.timeout_seconds,
            )
        except TransportError as e:
            raise error_for_transport(e, what=what, secret=secret, online=self._online) from e
        except http.client.HTTPException as e:  # e.g. IncompleteRead: the answer was cut off
            raise SyncTransientError(_redact(f"{what}: answer cut off: {e!r}", secret)) from e
        err = error_for_status(resp, what=what, secret=secret, now_ms=self._clock())
        if err is not None:
            raise err
        try:
            return resp.json()
        except (ValueError, UnicodeDecodeError) as e:
            raise SyncTransientError(
                f"{what}: the answer is not JSON",
                status=resp.status,
                response=_excerpt(resp, secret),
            ) from e

    async def push(self, ops: Sequence[Mapping[str, Any]]) -> PushResponse:
        """Send one batch of operations; nothing is retried here.

        ``ValidationError`` if ``ops`` cannot be encoded as JSON (nothing is sent).
        """
        if not ops:
            return PushResponse([], [], None)
        try:
            body = json.dumps(
                {"device_id": self.device_id, "ops": [dict(op) for op in ops]},
                ensure_ascii=False,
                allow_nan=False,
                separators=(",", ":"),
            ).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise ValidationError(f"operations are not JSON-serialisable: {e}", field="ops") from e
        answer = await self._call("POST", "/v1/push", "", body)
        return self._parse_push(answer, [str(op.get("op_id")) for op in ops])

    def _malformed(self, path: str, why: str, answer: Any) -> SyncTransientError:
        text = _redact(json.dumps(answer, default=str)[:_EXCERPT], self.config.api_key)
        return SyncTransientError(f"{path}: malformed answer ({why})", status=200, response=text)

    def _parse_push(self, answer: Any, sent: list[str]) -> PushResponse:
        if not isinstance(answer, dict) or not isinstance(answer.get("results"), list):
            raise self._malformed("/v1/push", "no results list", answer)
        wanted = set(sent)
        got: dict[str, OpResult] = {}
        for r in answer["results"]:
            if not isinstance(r, dict):
                raise self._malformed("/v1/push", "a result is not an object", answer)
            op_id, status, reason = r.get("op_id"), r.get("status"), r.get("reason")
            if not isinstance(op_id, str) or status not in _OP_STATUSES:
                raise self._malformed("/v1/push", "a result lacks op_id or a known status", answer)
            if op_id in wanted and op_id not in got:
                got[op_id] = OpResult(op_id, status, reason if isinstance(reason, str) else None)
        results = [got[i] for i in dict.fromkeys(sent) if i in got]
        missing = [i for i in dict.fromkeys(sent) if i not in got]
        cursor = answer.get("cursor")
        return PushResponse(results, missing, cursor if isinstance(cursor, str) else None)

    async def changes(self, since: str | None = None, limit: int = 100) -> ChangesPage:
        """One page of the change feed after ``since`` (None: from the beginning)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CHANGES_LIMIT:
            raise ValidationError(f"limit must be an int in 1..{MAX_CHANGES_LIMIT}", field="limit")
        if since is not None and not isinstance(since, str):
            raise ValidationError("since must be a cursor string or None", field="since")
        params = {"limit": str(limit)}
        if since:
            params["since"] = since
        answer = await self._call("GET", "/v1/changes", _urlencode(params), None)
        return self._parse_changes(answer)

    def _parse_changes(self, answer: Any) -> ChangesPage:
        path = "/v1/changes"
        if not isinstance(answer, dict) or not isinstance(answer.get("changes"), list):
            raise self._malformed(path, "no changes list", answer)
        if not isinstance(answer.get("cursor"), str) or not isinstance(answer.get("more"), bool):
            raise self._malformed(path, "no cursor or more", answer)
        out: list[Change] = []
        malformed: list[dict[str, Any]] = []
        for c in answer["changes"]:
            if isinstance(c, dict) and isinstance(c.get("resource"), str) and c["resource"] not in RESOURCES:
                malformed.append(
                    {
                        "change": c,
                        "kind": "unknown-type",
                        "reason": f"a {shown(c['resource'])} record, which this version does not know",
                    }
                )
                continue
            if (
                not isinstance(c, dict)
                or c.get("resource") not in RESOURCES
                or not isinstance(c.get("id"), str)
                or not isinstance(c.get("deleted"), bool)
                or not is_hlc(c.get("hlc"))
                or not (c.get("data") is None or isinstance(c.get("data"), dict))
                or (c["data"] is None) != c["deleted"]
            ):
                malformed.append({"change": c, "reason": "not a well-formed change"})
                continue
            out.append(Change(c["resource"], c["id"], c["data"], c["deleted"], c["hlc"]))
        return ChangesPage(out, answer["cursor"], answer["more"], malformed)

    async def call(
        self, method: str, path: str, params: Mapping[str, str | None] | None = None, body: Any = None
    ) -> Any:
        """One request to another route of the server (e.g. ``/v1/e2e``): the JSON answer,
        or the typed ``SyncError`` of the table above."""
        raw = None
        if body is not None:
            raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        query = _urlencode({k: v for k, v in (params or {}).items() if v is not None})
        return await self._call(method, path, query, raw)

    async def capabilities(self) -> list[str]:
        """The server's ``GET /v1/health`` capabilities (empty for a server that lists none)."""
        try:
            resp = await self.transport.request(
                "GET", self.config.url("/v1/health"), timeout=self.config.timeout_seconds
            )
            answer = resp.json() if 200 <= resp.status < 300 else {}
        except (TransportError, ValueError, UnicodeDecodeError):
            return []
        caps = answer.get("capabilities") if isinstance(answer, dict) else None
        return [c for c in caps if isinstance(c, str)] if isinstance(caps, list) else []

    async def stream(self) -> AsyncIterator[str]:
        """Follow ``GET /v1/stream`` (Server-Sent Events): yield each announced cursor.

        Raises like ``_call`` for an error status (``SyncPermanentError`` with status 404
        when the server has no stream), ``SyncAuthError`` when the server ends the stream
        because the key was revoked, ``SyncTransientError``/``SyncOffline`` when the
        connection breaks. Returns when the server closes the stream.
        """
        url, secret = self.config.url("/v1/stream"), self.config.api_key
        what = f"GET {url}"
        if self._online is not None and not self._online():
            raise SyncOffline(f"{what}: offline")
        headers = {"Authorization": f"Bearer {secret}", "Accept": "text/event-stream"}
        fields: dict[str, str] = {}
        try:
            async for item in self.transport.stream_lines(
                "GET", url, headers=headers, timeout=max(self.config.timeout_seconds, STREAM_TIMEOUT)
            ):
                if isinstance(item, HTTPResponse):
                    err = error_for_status(item, what=what, secret=secret, now_ms=self._clock())
                    if err is not None:
                        raise err
                    if not (item.header("content-type") or "").startswith("text/event-stream"):
                        raise SyncPermanentError(f"{what}: not an event stream")
                    continue
                if item:
                    if not item.startswith(":"):
                        name, _, value = item.partition(":")
                        fields[name] = value[1:] if value.startswith(" ") else value
                    continue
                event, data = fields.get("event", "message"), fields.get("data", "")
                fields = {}
                if event == "revoked":
                    raise SyncAuthError(f"{what}: the key was revoked", status=401)
                if event == "cursor":
                    try:
                        cursor = json.loads(data).get("cursor")
                    except (ValueError, AttributeError):
                        cursor = None
                    if isinstance(cursor, str):
                        yield cursor
        except TransportError as e:
            raise error_for_transport(e, what=what, secret=secret, online=self._online) from e

    async def health(self) -> bool:
        """True if ``GET /v1/health`` answers 2xx (no key is sent)."""
        try:
            resp = await self.transport.request(
                "GET", self.config.url("/v1/health"), timeout=self.config.timeout_seconds
            )
        except TransportError:
            return False
        return 200 <= resp.status < 300
