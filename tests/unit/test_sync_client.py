"""The pure client side of sync: backoff, HLC, config, status, ops and the
protocol client (against the real reference server on 127.0.0.1)."""

from __future__ import annotations

import email.utils
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatmem.errors import (
    SyncAuthError,
    SyncError,
    SyncOffline,
    SyncPermanentError,
    SyncTransientError,
    ValidationError,
)
from chatmem.http import HTTPResponse, MockTransport
from chatmem.runtime import UrllibTransport
from chatmem.server import running_server
from chatmem.server.runner import SyncServer
from chatmem.sync import (
    BackoffPolicy,
    HybridLogicalClock,
    SyncClient,
    SyncConfig,
    SyncStatus,
    compare_hlc,
    format_hlc,
    make_op,
    op_session_id,
    parse_hlc,
    parse_retry_after,
    validate_op,
)

KEY = "s3cret-Key-123"


# --------------------------------------------------------------------------- backoff


@pytest.mark.parametrize(
    "retry, ceiling", [(0, 1000), (1, 2000), (2, 4000), (5, 32000), (6, 60000), (60, 60000)]
)
def test_backoff_doubles_with_equal_jitter_up_to_the_cap(retry: int, ceiling: int) -> None:
    """The delay lies in [ceiling/2, ceiling] with ceiling = min(max, base * 2**retry)."""
    p = BackoffPolicy(base_ms=1000, max_ms=60000)
    assert p.backoff(retry, rand=lambda: 0.0) == ceiling // 2
    assert p.backoff(retry, rand=lambda: 0.999999) in (ceiling - 1, ceiling)


def test_backoff_jitter_spreads_delays() -> None:
    """Real randomness gives different delays, all within bounds."""
    p = BackoffPolicy()
    delays = {p.backoff(3) for _ in range(50)}
    assert len(delays) > 5 and all(4000 <= d <= 8000 for d in delays)


def test_retry_after_seconds_and_http_date() -> None:
    """Retry-After as seconds or as an HTTP-date (past dates mean now); garbage is ignored."""
    now = 1_800_000_000_000
    assert parse_retry_after("120", now) == 120_000
    future = email.utils.formatdate((now + 90_000) / 1000, usegmt=True)
    assert parse_retry_after(future, now) == 90_000
    past = email.utils.formatdate((now - 5_000) / 1000, usegmt=True)
    assert parse_retry_after(past, now) == 0
    for junk in (None, "", "soon", "-3", "1.5", "²", "9" * 5000):
        assert parse_retry_after(junk, now) is None


def test_delay_prefers_retry_after_and_caps_it() -> None:
    """A server's Retry-After wins over backoff; absurd values are capped."""
    p = BackoffPolicy(base_ms=1000, max_ms=8000, retry_after_cap_ms=600_000)
    assert p.delay(0, "30", now_ms=0) == 30_000
    assert p.delay(0, 2500) == 2500
    assert p.delay(4, "99999999", now_ms=0) == 600_000
    assert p.delay(2, None, rand=lambda: 0.0) == 2000


# --------------------------------------------------------------------------- HLC


def test_hlc_is_monotonic_when_the_wall_clock_stalls_or_goes_back() -> None:
    """now() always grows, even if the clock repeats or runs backwards."""
    times = iter([100, 100, 100, 90, 50, 101, 101])
    c = HybridLogicalClock("dev-A", lambda: next(times))
    stamps = [c.now() for _ in range(7)]
    assert stamps == sorted(stamps) and len(set(stamps)) == 7
    assert stamps[0] == "0000000000100-0000-dev-A"
    assert stamps[4] == "0000000000100-0004-dev-A"
    assert stamps[5] == "0000000000101-0000-dev-A"


def test_hlc_update_moves_past_a_remote_clock() -> None:
    """After receiving a remote HLC ahead of us, every new HLC is after it."""
    c = HybridLogicalClock("dev-A", lambda: 1000)
    local = c.now()
    remote = format_hlc(5000, 7, "dev-B")
    merged = c.update(remote)
    assert merged > remote > local
    assert parse_hlc(merged)[:2] == (5000, 8)
    assert c.now() > merged
    # a remote HLC behind us does not move the clock back
    before = c.now()
    assert c.update(format_hlc(10, 0, "dev-C")) > before


@pytest.mark.parametrize("local, remote, expected", [(3, 7, 8), (9, 2, 10), (5, 5, 6)])
def test_hlc_update_in_the_same_millisecond_counts_past_both(local: int, remote: int, expected: int) -> None:
    """Local and remote at the same wall time: the counter goes past the larger of the two."""
    c = HybridLogicalClock("dev-A", lambda: 5000, last=format_hlc(5000, local, "dev-A"))
    merged = c.update(format_hlc(5000, remote, "dev-B"))
    assert parse_hlc(merged)[:2] == (5000, expected)


def test_hlc_counter_overflow_borrows_the_next_millisecond() -> None:
    """More than 10,000 events in one ms stay ordered and fixed-width."""
    c = HybridLogicalClock("d", lambda: 7, last=format_hlc(7, 9999, "d"))
    nxt = c.now()
    assert nxt == "0000000000008-0000-d" and nxt > format_hlc(7, 9999, "d")


def test_hlc_last_restores_monotonicity_across_restarts() -> None:
    """A clock rebuilt with last= never issues an HLC at or before it."""
    first = HybridLogicalClock("dev", lambda: 500)
    for _ in range(3):
        first.now()
    again = HybridLogicalClock("dev", lambda: 400, last=first.last)
    assert again.now() > str(first.last)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "123-0000-d",
        "0000000000001-00-d",
        "0000000000001-0000-",
        "0000000000001-0000-a b",
        None,
        5,
    ],
)
def test_bad_hlc_strings_are_refused(bad: Any) -> None:
    """Malformed HLCs raise ValidationError naming the hlc field; update() leaves the clock alone."""
    with pytest.raises(ValidationError) as e:
        parse_hlc(bad)
    assert e.value.field == "hlc"
    c = HybridLogicalClock("d", lambda: 1)
    before = c.now()
    with pytest.raises(ValidationError):
        c.update(bad)
    assert c.last == before


@pytest.mark.parametrize("device", ["", "has space", "x" * 129, "naïve"])
def test_bad_device_ids_are_refused(device: str) -> None:
    """Device ids are 1-128 printable ASCII characters without spaces."""
    with pytest.raises(ValidationError):
        HybridLogicalClock(device)


@given(
    st.tuples(
        st.integers(0, 10**13 - 1),
        st.integers(0, 9999),
        st.from_regex(r"[a-z0-9-]{1,8}", fullmatch=True),
    ),
    st.tuples(
        st.integers(0, 10**13 - 1),
        st.integers(0, 9999),
        st.from_regex(r"[a-z0-9-]{1,8}", fullmatch=True),
    ),
)
def test_hlc_string_order_is_hlc_order(a: tuple[int, int, str], b: tuple[int, int, str]) -> None:
    """Comparing the strings orders by wall time, then counter (then device id)."""
    ha, hb = format_hlc(*a), format_hlc(*b)
    assert parse_hlc(ha) == a
    if a[:2] != b[:2]:
        assert (ha < hb) == (a[:2] < b[:2])
    assert compare_hlc(ha, hb) == ((ha > hb) - (ha < hb))


# --------------------------------------------------------------------------- config


def test_config_defaults_match_the_original() -> None:
    """Disabled by default, 60 s interval, 3 retries, 100 ops per batch."""
    c = SyncConfig()
    assert (c.enabled, c.endpoint, c.api_key, c.auto_sync) == (False, "", "", False)
    assert (c.sync_interval, c.max_retries, c.batch_size) == (60_000, 3, 100)


@pytest.mark.parametrize(
    "endpoint, ok",
    [
        ("https://sync.example.com", True),
        ("https://sync.example.com/base/", True),
        ("http://localhost:8787", True),
        ("http://127.0.0.1:8787/", True),
        ("http://[::1]:8787", True),
        ("http://sync.example.com", False),
        ("ftp://sync.example.com", False),
        ("https://user:pw@sync.example.com", False),
        ("https://sync.example.com/?key=abc", False),
        ("https://sync.example.com/#x", False),
        ("sync.example.com", False),
        ("https://host:notaport", False),
    ],
)
def test_endpoint_must_be_https_except_localhost(endpoint: str, ok: bool) -> None:
    """http only to loopback; no credentials, query or fragment in the URL."""
    if ok:
        c = SyncConfig(enabled=True, endpoint=endpoint, api_key=KEY)
        assert not c.endpoint.endswith("/")
        assert c.url("/v1/push").endswith("/v1/push") and "//v1" not in c.url("/v1/push")
    else:
        with pytest.raises(ValidationError) as e:
            SyncConfig(enabled=True, endpoint=endpoint, api_key=KEY)
        assert e.value.field == "endpoint"


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"enabled": True, "endpoint": "https://x.example"}, "api_key"),
        ({"enabled": True, "api_key": KEY}, "endpoint"),
        ({"api_key": "has space"}, "api_key"),
        ({"max_retries": -1}, "max_retries"),
        ({"batch_size": 0}, "batch_size"),
        ({"sync_interval": 10}, "sync_interval"),
        ({"timeout": True}, "timeout"),
        ({"enabled": "yes"}, "enabled"),
        ({"backoff_base": 5000, "backoff_max": 100}, "backoff_max"),
    ],
)
def test_bad_config_names_the_field(kwargs: dict[str, Any], field: str) -> None:
    """Every invalid setting raises ValidationError naming its field."""
    with pytest.raises(ValidationError) as e:
        SyncConfig(**kwargs)
    assert e.value.field == field


def test_the_key_never_shows_in_public_dict_or_repr() -> None:
    """to_public_dict and repr hide the key; to_storage_dict keeps it for the local store."""
    c = SyncConfig(enabled=True, endpoint="https://x.example", api_key=KEY, auto_sync=True)
    public = c.to_public_dict()
    assert KEY not in repr(public) and KEY not in repr(c) and KEY not in str(c)
    assert public["hasApiKey"] is True and public["autoSync"] is True and "apiKey" not in public
    assert SyncConfig.from_dict(c.to_storage_dict()) == c
    assert SyncConfig.from_dict({**public, "enabled": False}).api_key == ""
    with pytest.raises(ValidationError) as e:  # an enabled config needs its key back
        SyncConfig.from_dict(public)
    assert e.value.field == "api_key"


def test_config_from_the_originals_camel_case() -> None:
    """The original's SyncConfig keys are accepted; unknown keys are refused."""
    c = SyncConfig.from_dict(
        {
            "enabled": True,
            "endpoint": "https://x.example",
            "apiKey": KEY,
            "autoSync": True,
            "syncInterval": 5000,
        }
    )
    assert (c.api_key, c.auto_sync, c.sync_interval) == (KEY, True, 5000)
    assert c.replace(syncInterval=9000).sync_interval == 9000
    with pytest.raises(ValidationError) as e:
        SyncConfig.from_dict({"endpont": "https://x.example"})
    assert e.value.field == "endpont"


# --------------------------------------------------------------------------- status and ops


def test_status_states_and_round_trip() -> None:
    """Only the five states are allowed; to_dict/from_dict round-trips."""
    s = SyncStatus("paused-auth", pending=3, dead_letters=1, last_success=5, last_error="check your key")
    assert SyncStatus.from_dict(s.to_dict()) == s
    assert s.to_dict()["deadLetters"] == 1
    with pytest.raises(ValidationError):
        SyncStatus("sleeping")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        SyncStatus(pending=-1)


def test_make_op_validates_and_names_the_session() -> None:
    """make_op builds a checked op; op_session_id finds the session for per-session FIFO."""
    h = format_hlc(1, 0, "d")
    op = make_op(
        op_id="o",
        type="create",
        resource="message",
        id="m",
        data={"sessionId": "s"},
        timestamp=1,
        hlc=h,
    )
    assert op["attempts"] == 0 and op_session_id(op) == "s"
    assert (
        op_session_id(
            make_op(op_id="o", type="delete", resource="session", id="s9", data=None, timestamp=1, hlc=h)
        )
        == "s9"
    )
    with pytest.raises(ValidationError) as e:
        make_op(
            op_id="o",
            type="update",
            resource="message",
            id="m",
            data={"sessionId": "s"},
            timestamp=1,
            hlc=h,
        )
    assert e.value.field == "type"
    with pytest.raises(ValidationError) as e:
        validate_op(
            {
                "op_id": "o",
                "type": "create",
                "resource": "message",
                "id": "m",
                "data": {},
                "timestamp": 1,
                "hlc": h,
            }
        )
    assert e.value.field == "data.sessionId"


# --------------------------------------------------------------------------- SyncClient, real server


def op(n: int, title: str = "t", device: str = "dev-A") -> dict[str, Any]:
    return make_op(
        op_id=f"op-{n}",
        type="create",
        resource="session",
        id=f"s{n}",
        data={"title": title},
        timestamp=n,
        hlc=format_hlc(1000 + n, 0, device),
    )


class RecordingTransport(UrllibTransport):
    """The real urllib transport, remembering every URL and header it sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict[str, str]]] = []

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float | None = 30.0,
    ) -> HTTPResponse:
        self.sent.append((method, url, dict(headers or {})))
        return await super().request(method, url, headers=headers, body=body, timeout=timeout)


@pytest.fixture
def srv() -> Iterator[SyncServer]:
    with running_server(api_keys=[KEY]) as s:
        yield s


def client(srv_url: str, transport: Any = None, key: str = KEY, timeout: int = 5000) -> SyncClient:
    cfg = SyncConfig(enabled=True, endpoint=srv_url, api_key=key, timeout=timeout)
    return SyncClient(cfg, transport if transport is not None else UrllibTransport(), device_id="dev-A")


async def test_client_push_and_pull_round_trip(srv: SyncServer) -> None:
    """Pushed ops are applied, duplicates say so, and the feed pages back every record."""
    c = client(srv.url)

    async def run() -> None:
        r = await c.push([op(i) for i in range(5)])
        assert [x.status for x in r.results] == ["applied"] * 5 and r.missing == []
        assert all(x.delivered for x in r.results) and r.cursor == "5"
        again = await c.push([op(0)])
        assert again.results[0].status == "duplicate" and again.results[0].delivered
        pages, since = [], None
        while True:
            page = await c.changes(since, limit=2)
            pages.append(page)
            since = page.cursor
            if not page.more:
                break
        assert [len(p.changes) for p in pages] == [2, 2, 1]
        assert [ch.id for p in pages for ch in p.changes] == [f"s{i}" for i in range(5)]
        assert pages[0].changes[0].data == {"sessionId": "s0", "title": "t"}

    await run()


async def test_client_reports_rejections_per_op(srv: SyncServer) -> None:
    """A rejected op comes back as such, with the reason; the others are delivered."""
    c = client(srv.url)
    bad = {**op(1), "hlc": "nope"}
    r = await c.push([op(0), bad])
    assert [(x.op_id, x.status) for x in r.results] == [("op-0", "applied"), ("op-1", "rejected")]
    assert not r.results[1].delivered and "hlc" in (r.results[1].reason or "")


async def test_500_then_200_applies_once_with_the_same_op_id(srv: SyncServer) -> None:
    """Three 500s are transient errors; the fourth try of the same op applies it once."""
    c = client(srv.url)
    srv.faults.fail(3)

    async def run() -> list[str]:
        errors = []
        for _ in range(3):
            with pytest.raises(SyncTransientError) as e:
                await c.push([op(1)])
            assert e.value.status == 500
            errors.append(str(e.value))
        r = await c.push([op(1)])
        assert r.results[0].status == "applied"
        return errors

    errors = await run()
    assert all("HTTP 500" in e for e in errors)
    assert srv.storage.applied_op_count(srv.space(KEY)) == 1  # type: ignore[attr-defined]


async def test_429_retry_after_is_reported(srv: SyncServer) -> None:
    """429 is transient and carries the server's Retry-After in ms."""
    c = client(srv.url)
    srv.faults.rate_limit(1, retry_after=2)
    with pytest.raises(SyncTransientError) as e:
        await c.push([op(1)])
    assert (e.value.status, e.value.retry_after_ms) == (429, 2000)
    assert BackoffPolicy().delay(0, e.value.retry_after_ms) == 2000
    assert (await c.push([op(1)])).results[0].status == "applied"


async def test_wrong_key_pauses_and_never_leaks_the_key(srv: SyncServer, caplog: Any) -> None:
    """401 is an auth error whose message says to check the key and never contains it."""
    wrong = "Wrong-Key-987"
    t = RecordingTransport()
    c = client(srv.url, t, key=wrong)
    caplog.set_level(logging.DEBUG)
    for call in (c.push([op(1)]), c.changes()):
        with pytest.raises(SyncAuthError) as e:
            await call
        assert e.value.status == 401 and "check your key" in str(e.value)
        assert wrong not in str(e.value) and wrong not in (e.value.response or "")
    assert all(wrong not in url for _, url, _ in t.sent)
    assert all(h["Authorization"] == f"Bearer {wrong}" for _, _, h in t.sent)
    assert wrong not in caplog.text


async def test_the_key_travels_only_in_the_header(srv: SyncServer) -> None:
    """Push, changes and health never put the key in the URL; health sends no key."""
    t = RecordingTransport()
    c = client(srv.url, t)
    await c.push([op(1)])
    await c.changes("0", 10)
    assert (await c.health()) is True
    assert len(t.sent) == 3 and all(KEY not in url for _, url, _ in t.sent)
    assert "Authorization" not in t.sent[2][2]
    assert KEY not in repr(c)


async def test_bad_request_is_permanent(srv: SyncServer) -> None:
    """A 400 (here: a bad cursor) is a permanent error with the server's message."""
    c = client(srv.url)
    with pytest.raises(SyncPermanentError) as e:
        await c.changes("not-a-cursor")
    assert e.value.status == 400 and "cursor" in str(e.value)


async def test_dropped_connection_is_transient_and_retry_is_a_duplicate(srv: SyncServer) -> None:
    """The server applied the push but dropped the answer: transient, then duplicate."""
    c = client(srv.url)
    srv.faults.drop(after=True)
    with pytest.raises(SyncTransientError):
        await c.push([op(1)])
    assert (await c.push([op(1)])).results[0].status == "duplicate"


async def test_timeout_is_transient(srv: SyncServer) -> None:
    """A server slower than the timeout is a transient failure; the op is applied once."""
    c = client(srv.url, timeout=200)
    srv.faults.delay(0.6, after=True)
    with pytest.raises(SyncTransientError):
        await c.push([op(1)])
    assert (await c.push([op(1)])).results[0].status == "duplicate"


async def test_unreachable_server_is_offline_not_a_failure() -> None:
    """Connection refused means offline (wait), not a failed attempt."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    c = client(f"http://127.0.0.1:{port}")
    with pytest.raises(SyncOffline) as e:
        await c.push([op(1)])
    assert not isinstance(e.value, SyncTransientError) and KEY not in str(e.value)
    assert (await c.health()) is False


async def test_online_probe_short_circuits_when_offline() -> None:
    """With online() False no request is made and the error is SyncOffline."""
    t = MockTransport(lambda *a: HTTPResponse(200, body=b"{}"))
    cfg = SyncConfig(enabled=True, endpoint="https://x.example", api_key=KEY)
    c = SyncClient(cfg, t, device_id="d", online=lambda: False)
    with pytest.raises(SyncOffline):
        await c.push([op(1)])
    assert t.calls == []


# --------------------------------------------------------------------------- SyncClient, odd answers


def mock_client(status: int, body: bytes, headers: dict[str, str] | None = None) -> SyncClient:
    t = MockTransport(lambda *a: HTTPResponse(status, headers or {}, body))
    cfg = SyncConfig(enabled=True, endpoint="https://x.example", api_key=KEY)
    return SyncClient(cfg, t, device_id="d", clock=lambda: 0)


@pytest.mark.parametrize(
    "status, body, error",
    [
        (200, b"<html>captive portal</html>", SyncTransientError),
        (200, b'{"results": "no"}', SyncTransientError),
        (200, b'{"results": [{"op_id": "op-1", "status": "maybe"}]}', SyncTransientError),
        (503, b"", SyncTransientError),
        (403, b'{"error": "revoked"}', SyncAuthError),
        (404, b"", SyncPermanentError),
        (409, b"", SyncPermanentError),
        (413, b"", SyncPermanentError),
        (422, b"", SyncPermanentError),
    ],
)
async def test_answers_are_classified(status: int, body: bytes, error: type[SyncError]) -> None:
    """Every kind of answer maps to exactly one error class."""
    with pytest.raises(error) as e:
        await mock_client(status, body).push([op(1)])
    assert type(e.value) is error


async def test_ops_missing_from_the_answer_are_not_acknowledged() -> None:
    """An op the server did not answer for is listed as missing (keep it, resend)."""
    body = b'{"results": [{"op_id": "op-1", "status": "applied"}, {"op_id": "stranger", "status": "applied"}], "cursor": "9"}'
    r = await mock_client(200, body).push([op(1), op(2)])
    assert [x.op_id for x in r.results] == ["op-1"] and r.missing == ["op-2"] and r.cursor == "9"


async def test_503_retry_after_date_and_echoed_key_is_redacted() -> None:
    """Retry-After as an HTTP-date is honoured; a server echoing the key has it masked."""
    date = email.utils.formatdate(30, usegmt=True)  # 30 s after the epoch; the client clock says 0
    c = mock_client(503, f'{{"error": "bad key {KEY}"}}'.encode(), {"Retry-After": date})
    with pytest.raises(SyncTransientError) as e:
        await c.push([op(1)])
    assert e.value.retry_after_ms == 30_000
    assert KEY not in str(e.value) and KEY not in (e.value.response or "") and "***" in str(e.value)


async def test_malformed_change_is_set_aside_not_the_page() -> None:
    """A change whose data and deleted flag disagree is reported apart; the page (and its cursor) stays good."""
    body = b'{"changes": [{"resource": "session", "id": "s", "data": null, "deleted": false, "hlc": "0000000000001-0000-d"}], "cursor": "1", "more": false}'
    page = await mock_client(200, body).changes()
    assert page.changes == [] and page.cursor == "1"
    assert [m["change"]["id"] for m in page.malformed] == ["s"]


@pytest.mark.parametrize("limit", [0, 1001, True, "10"])
async def test_changes_limit_is_checked_before_sending(limit: Any) -> None:
    """A bad limit raises ValidationError and sends nothing."""
    c = mock_client(200, b"{}")
    with pytest.raises(ValidationError):
        await c.changes(None, limit)
    assert c.transport.calls == []  # type: ignore[attr-defined]


def test_client_needs_endpoint_and_key() -> None:
    """A disabled, empty config cannot build a client."""
    with pytest.raises(ValidationError):
        SyncClient(SyncConfig(), MockTransport(lambda *a: HTTPResponse(200)), device_id="d")
