"""Hostile input on CPython: every trust boundary refuses bad records with a typed error,
writes nothing, and the next normal operation works (memory and SQLite stores, import,
the reference server, the client's pull), plus the specific attacks met so far."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chatmem
import hostile_checks
from chatmem.errors import (
    ClockSkew,
    ImportLimitExceeded,
    LimitExceeded,
    QueryError,
    QueryTimeout,
    ReadOnlySQLError,
    ValidationError,
)
from chatmem.http import HTTPResponse, MockTransport
from chatmem.records.hlc import HybridLogicalClock
from chatmem.records.validation import Limits
from chatmem.server.runner import SyncServer
from chatmem.sync import SyncConfig
from hostile_checks import EXPLICIT_MESSAGE_CASES, SHAPE_CASES, check_cases, expand
from hostile_strategies import (
    SMALL_LIMITS,
    hostile_export,
    hostile_import,
    hostile_message,
    hostile_op,
    hostile_session_kwargs,
)

KEY = "hostile-key"
BATTERY = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


async def open_store(backend: str, tmp: Path, **kw: Any) -> chatmem.Memory:
    if backend == "sqlite":
        return await chatmem.open(persist=str(tmp / "m.db"), **kw)
    return await chatmem.open(**kw)


# ---------------------------------------------------------------------------- the API and import


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_explicit_hostile_cases_are_refused_and_nothing_is_written(
    backend: str, tmp_path: Path
) -> None:
    """Lone surrogates, 10**30, NaN, 5,000-deep metadata, 5 MB messages, role 'evil', bad imports:
    each a ValidationError (never RecursionError, OverflowError, UnicodeEncodeError), store unchanged."""

    mem = await open_store(backend, tmp_path)
    try:
        names = await check_cases(mem, EXPLICIT_MESSAGE_CASES)
    finally:
        await mem.close()
    assert "LimitExceeded" in names and "ImportLimitExceeded" in names


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_no_shape_escapes_the_error_tree(backend: str, tmp_path: Path) -> None:
    """Nesting 5,000 deep (lists and objects), cycles, non-string keys, 5,000-digit and
    10**30 integers, NaN, Infinity, lone surrogates, sets and bytes, handed to every entry
    point (imports in each format, appends, batches, ids, forks, deletes, exports, queries):
    each a ValidationError, never RecursionError, TypeError or ValueError; store unchanged."""

    mem = await open_store(backend, tmp_path)
    try:
        names = await check_cases(mem, SHAPE_CASES)
    finally:
        await mem.close()
    assert len(names) == len(SHAPE_CASES) and "ImportLimitExceeded" in names


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_hypothesis_battery_api(backend: str, tmp_path: Path) -> None:
    """Generated hostile messages and sessions against the API: refused, nothing written, store usable."""
    cases: list[tuple[str, Any]] = []

    @BATTERY
    @given(
        st.one_of(
            hostile_message().map(lambda m: ("append", m)),
            hostile_session_kwargs().map(lambda k: ("create", k)),
        )
    )
    def collect(case: tuple[str, Any]) -> None:
        cases.append(case)

    collect()

    mem = await open_store(backend, tmp_path, limits=Limits(**SMALL_LIMITS))
    try:
        await check_cases(mem, cases)
    finally:
        await mem.close()
    assert len(cases) >= 20


async def test_hypothesis_battery_import(tmp_path: Path) -> None:
    """Generated hostile exports (as objects and as JSON text): ImportFormatError, nothing imported."""
    cases: list[tuple[str, Any]] = []

    @BATTERY
    @given(st.one_of(hostile_export(), hostile_import()))
    def collect(export: dict[str, Any]) -> None:
        cases.append(("import", export))

    collect()

    mem = await chatmem.open(limits=Limits(**SMALL_LIMITS))
    names = await check_cases(mem, cases)
    assert set(names) <= {"ImportFormatError", "ImportLimitExceeded"}, set(names)
    await mem.close()


async def test_limits_are_configurable() -> None:
    """A smaller max_message_bytes refuses what the default accepts; bad limits are refused."""

    small = await chatmem.open(limits=Limits(max_message_bytes=1000))
    s = await small.sessions.create()
    with pytest.raises(LimitExceeded) as e:
        await small.messages.append(s.session_id, "user", "x" * 2000)
    assert e.value.limit == "max_message_bytes" and e.value.maximum == 1000
    big = await chatmem.open()
    s2 = await big.sessions.create()
    await big.messages.append(s2.session_id, "user", "x" * 2000)
    with pytest.raises(ValidationError):
        Limits(max_depth=0)


async def test_deep_import_text_is_a_typed_error_not_recursion() -> None:
    """JSON text nested 100,000 levels: ImportLimitExceeded (a LimitExceeded), not RecursionError."""

    mem = await chatmem.open()
    with pytest.raises(ImportLimitExceeded) as e:
        await mem.import_sessions("[" * 100_000 + "]" * 100_000)
    assert isinstance(e.value, LimitExceeded) and e.value.limit == "max_depth"


# ---------------------------------------------------------------------------- HLC skew


def test_far_future_hlc_is_refused_and_the_clock_is_unchanged() -> None:
    """update('9999999999999-9999-x') raises ClockSkew and changes nothing; now() still works."""
    now = [1_700_000_000_000]
    clock = HybridLogicalClock("dev-A", lambda: now[0])
    first = clock.now()
    with pytest.raises(ClockSkew):
        clock.update("9999999999999-9999-x")
    assert clock.last == first
    assert clock.now() > first
    # within the bound it is adopted
    ahead = f"{now[0] + 60_000:013d}-0005-dev-B"
    assert clock.update(ahead) > ahead


def test_an_hlc_at_the_top_of_the_range_fails_without_changing_state() -> None:
    """A clock whose next tick would overflow raises and keeps its state (checked before stored)."""
    clock = HybridLogicalClock("dev-A", lambda: 10**13 - 1, max_skew_ms=10**13)
    clock.update("9999999999999-9998-x")
    last = clock.last
    assert last is not None and last.startswith("9999999999999-9999")
    with pytest.raises(ValidationError):
        clock.now()
    with pytest.raises(ValidationError):
        clock.update("9999999999999-9999-y")
    assert clock.last == last


# ---------------------------------------------------------------------------- the reference server


@pytest.fixture
def srv() -> Any:
    s = SyncServer([KEY], limits=Limits(**SMALL_LIMITS, changes_page_bytes=200 * 1024))
    s.start()
    yield s
    s.stop()


def http(srv: SyncServer, method: str, path: str, body: bytes | None = None) -> tuple[int, Any, int]:
    req = urllib.request.Request(
        srv.url + path,
        data=body,
        method=method,
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read()
            return r.status, json.loads(raw), len(raw)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw or b"null"), len(raw)
        except ValueError:
            return e.code, raw.decode("utf-8", "replace"), len(raw)


def push_raw(srv: SyncServer, ops: list[dict[str, Any]]) -> tuple[int, Any]:
    body = json.dumps({"device_id": "dev", "ops": ops}, allow_nan=True, ensure_ascii=True).encode()
    status, answer, _ = http(srv, "POST", "/v1/push", body)
    return status, answer


def good_ops(n: int) -> list[dict[str, Any]]:
    h = f"{1_700_000_000_000 + n:013d}-0001-dev"
    return [
        {
            "op_id": f"s-{n}",
            "type": "create",
            "resource": "session",
            "id": "s-ok",
            "timestamp": 1,
            "attempts": 0,
            "hlc": h,
            "data": {"title": "ok", "createdAt": 1, "updatedAt": 1},
        },
        {
            "op_id": f"m-{n}",
            "type": "create",
            "resource": "message",
            "id": f"m-ok-{n}",
            "timestamp": 1,
            "attempts": 0,
            "hlc": h,
            "data": {"sessionId": "s-ok", "role": "user", "content": "fine", "createdAt": 1},
        },
    ]


def all_changes(srv: SyncServer) -> list[dict[str, Any]]:
    out, since = [], ""
    while True:
        status, page, _ = http(srv, "GET", f"/v1/changes?since={since}&limit=1000")
        assert status == 200, page
        out += page["changes"]
        since = page["cursor"]
        if not page["more"]:
            return out


def test_hypothesis_battery_server(srv: SyncServer) -> None:
    """Generated hostile ops: rejected one by one (the rest of the push applies), the feed stays
    readable from the start, and holds only valid records."""
    ops: list[dict[str, Any]] = []

    @BATTERY
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        ops.append(expand(data.draw(hostile_op(len(ops)))))

    collect()
    from chatmem.sync.quarantine import check_change

    for i, bad in enumerate(ops):
        status, answer = push_raw(srv, [bad, *good_ops(i)])
        assert status == 200, answer
        assert [r["status"] for r in answer["results"]] == ["rejected", "applied", "applied"], answer
        changes = all_changes(srv)
        ids = {c["id"] for c in changes}
        assert bad["id"] not in ids or bad["resource"] == "session"
        for c in changes:
            check_change(c, Limits(**SMALL_LIMITS))
    assert all(c["data"]["title"] == "ok" for c in all_changes(srv) if c["resource"] == "session")


def test_nan_op_is_rejected_and_the_feed_never_500s(srv: SyncServer) -> None:
    """One op whose data holds NaN is rejected; GET /v1/changes from the start answers 200."""
    bad = {
        **good_ops(0)[1],
        "op_id": "nan",
        "id": "m-nan",
        "data": {
            "sessionId": "s-ok",
            "role": "user",
            "content": "x",
            "createdAt": 1,
            "metadata": {"v": float("nan")},
        },
    }
    status, answer = push_raw(srv, [bad])
    assert status == 200 and answer["results"][0]["status"] == "rejected"
    assert http(srv, "GET", "/v1/changes")[0] == 200


def test_far_future_op_is_rejected_by_the_server(srv: SyncServer) -> None:
    """An op with hlc 9999999999999-9999-x is rejected (skew bound), so it cannot win later writes."""
    op = {**good_ops(0)[0], "op_id": "future", "hlc": "9999999999999-9999-x", "data": {"title": "future"}}
    status, answer = push_raw(srv, [op, *good_ops(1)])
    assert [r["status"] for r in answer["results"]] == ["rejected", "applied", "applied"]
    assert "ahead" in answer["results"][0]["reason"]


@pytest.mark.parametrize(
    "data",
    [
        {"sessionId": "s-ok", "role": "user", "content": "no createdAt"},
        {"sessionId": "s-ok", "role": "evil", "content": {"x": 1}, "createdAt": 1},
    ],
)
def test_incomplete_or_wrong_message_ops_are_rejected(srv: SyncServer, data: dict[str, Any]) -> None:
    """A message op without createdAt, or with role 'evil' and content {"x": 1}, is not stored."""
    op = {**good_ops(0)[1], "op_id": "bad", "id": "m-bad", "data": data}
    status, answer = push_raw(srv, [op])
    assert answer["results"][0]["status"] == "rejected"
    assert all(c["id"] != "m-bad" for c in all_changes(srv))


def test_deep_push_body_is_400_not_500(srv: SyncServer) -> None:
    """A body nested 100,000 levels is a 400; one nested 500 levels inside an op is that op's rejection."""
    status, _, _ = http(
        srv, "POST", "/v1/push", b'{"device_id":"dev","ops":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    )
    assert status == 400
    op = {**good_ops(0)[1], "op_id": "deep", "id": "m-deep"}
    op["data"] = dict(op["data"], metadata=hostile_checks.deep(500))
    status, answer = push_raw(srv, [op])
    assert status == 200 and answer["results"][0]["status"] == "rejected"


def test_a_bad_operation_is_rejected_alone_and_never_5xx(srv: SyncServer) -> None:
    """Lone surrogates in an op_id, an id or a sessionId, a timestamp or attempts of 10**30,
    an op that is not an object or has no op_id: each is rejected on its own (a surrogate
    op_id given back as U+FFFD, with its index), the good ops around them apply, and the
    feed holds only those."""
    good = good_ops(0)
    message = good[1]
    bad: list[Any] = [
        {**message, "op_id": "\ud800x", "id": "m-a"},
        {**message, "op_id": "b", "id": "m-\udc00"},
        {**message, "op_id": "c", "id": "m-c", "data": {**message["data"], "sessionId": "s-\ud83d"}},
        {**message, "op_id": "d", "id": "m-d", "timestamp": 10**30},
        {**message, "op_id": "e", "id": "m-e", "attempts": 10**30},
        7,
        {k: v for k, v in message.items() if k != "op_id"},
    ]
    status, answer = push_raw(srv, [good[0], *bad, message])
    assert status == 200, answer
    results = answer["results"]
    assert [r["status"] for r in results] == ["applied", *["rejected"] * len(bad), "applied"], results
    assert results[1]["op_id"] == "\ufffdx" and results[1]["index"] == 1
    assert [r["op_id"] for r in results[6:8]] == ["", ""] and results[6]["index"] == 6
    assert all(r["reason"] for r in results[1:-1])
    assert sorted(c["id"] for c in all_changes(srv)) == ["m-ok-0", "s-ok"]


def test_every_error_body_is_the_documented_json() -> None:
    """413 (a body over the limit, by its length or as read), 404, 405 and a bad cursor or
    limit (a "²" is a digit to str.isdigit, not to int) all answer {"error": ...}, never
    plain text and never 5xx."""
    s = SyncServer([KEY], max_body_bytes=10_000)
    s.start()
    try:
        big = json.dumps({"device_id": "dev", "ops": [], "pad": "x" * 20_000}).encode()
        for method, path, body in [
            ("POST", "/v1/push", big),
            ("GET", "/v1/nowhere", None),
            ("DELETE", "/v1/push", None),
            ("GET", "/v1/changes?since=%C2%B2", None),
            ("GET", "/v1/changes?limit=%C2%B2", None),
            ("GET", "/v1/changes?since=" + "9" * 5000, None),
            ("GET", "/v1/e2e/pending?after=%C2%B2&limit=" + "9" * 5000, None),
        ]:
            status, answer, _ = http(s, method, path, body)
            assert 400 <= status < 500, (path, status, answer)
            assert isinstance(answer, dict) and isinstance(answer["error"], str), (path, answer)
        assert http(s, "POST", "/v1/push", big)[0] == 413
        # a body sent without a length (chunked) is cut off as soon as it passes the bound
        conn = HTTPConnection("127.0.0.1", s.port, timeout=30)
        conn.putrequest("POST", "/v1/push")
        conn.putheader("Authorization", f"Bearer {KEY}")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        for _ in range(4):
            conn.send(b"1000\r\n" + b" " * 4096 + b"\r\n")
        conn.send(b"0\r\n\r\n")
        r = conn.getresponse()
        assert r.status == 413 and "error" in json.loads(r.read())
        conn.close()
    finally:
        s.stop()


async def test_the_server_refuses_malformed_envelopes() -> None:
    """An encrypted record is stored only when every envelope has the format's shape and
    belongs to its operation, and nothing but its plain ids sits beside them: extra or
    missing fields, a key id that is not 16 hex digits, a short IV, a ciphertext that is
    not a padded length or not base64, plain content beside envelopes, a second message
    envelope, a plain id that is not valid Unicode are each rejected."""
    from chatmem.server.encryption import check_op
    from chatmem.sync.cipher import CryptographySuite
    from chatmem.sync.encryption import Passphrase, encrypt_records, new_params

    suite = CryptographySuite()
    _, key = await new_params(Passphrase("correct horse battery", iterations=10_000), suite)
    recs = [
        {
            "op_id": "op-m",
            "resource": "message",
            "id": "m1",
            "hlc": "1700000000000-0000-dev",
            "data": {"id": "m1", "sessionId": "s1", "role": "user", "content": "secret", "createdAt": 1},
        },
        {
            "op_id": "op-s",
            "resource": "session",
            "id": "s1",
            "hlc": "1700000000000-0001-dev",
            "data": {"sessionId": "s1", "title": "secret", "pinned": True},
        },
    ]
    datas = await encrypt_records(recs, key, suite)
    message, session = [
        {
            "op_id": r["op_id"],
            "type": "create",
            "resource": r["resource"],
            "id": r["id"],
            "hlc": r["hlc"],
            "timestamp": 1,
            "attempts": 0,
            "data": d,
        }
        for r, d in zip(recs, datas)
    ]
    assert check_op(message) is None and check_op(session) is None
    env = message["data"]["e2e"]

    def with_env(**changes: Any) -> dict[str, Any]:
        e = {k: v for k, v in {**env, **changes}.items() if v is not None}
        return {**message, "data": {**message["data"], "e2e": e}}

    bad = [
        with_env(extra="x"),
        with_env(iv=None),
        with_env(k="not-a-key-id-hex"),
        with_env(k=7),
        with_env(iv="AAAA"),
        with_env(ct=env["ct"][:-8]),
        with_env(ct="%%%"),
        with_env(op="other"),
        with_env(hlc="1700000000000-0009-dev"),
        with_env(op=None),
        {**message, "data": {**message["data"], "role": "user"}},
        {**message, "data": {**message["data"], "title": env}},
        {**message, "data": {**message["data"], "sessionId": "s-\ud800"}},
        {**session, "data": {**session["data"], "archived": False}},
        {**session, "data": {**session["data"], "pinned": {**session["data"]["pinned"], "k": "ab"}}},
    ]
    for op in bad:
        assert check_op(op), op

    srv_ = SyncServer([KEY])
    srv_.start()
    try:  # through HTTP: the bad envelope is that op's rejection; the plain op beside it applies
        status, answer = push_raw(srv_, [good_ops(0)[0], {**bad[2], "id": "m-bad", "op_id": "x-bad"}])
        assert status == 200 and [r["status"] for r in answer["results"]] == ["applied", "rejected"], answer
        assert "envelope" in answer["results"][1]["reason"]
    finally:
        srv_.stop()


def test_changes_page_is_limited_in_bytes(srv: SyncServer) -> None:
    """Four 60 KB messages with a 200 KB page budget: no page holds them all; every one arrives."""
    for i in range(4):
        op = {**good_ops(i)[1], "op_id": f"big-{i}", "id": f"m-big-{i}"}
        op["data"] = dict(op["data"], content="y" * 60_000)
        assert push_raw(srv, [op])[1]["results"][0]["status"] == "applied"
    status, page, size = http(srv, "GET", "/v1/changes?limit=1000")
    assert status == 200 and page["more"] and len(page["changes"]) < 4 and size < 260_000
    assert {f"m-big-{i}" for i in range(4)} <= {c["id"] for c in all_changes(srv)}


def test_server_max_body_is_configurable() -> None:
    """A push body over max_body_bytes is refused (413) before it is read whole."""
    s = SyncServer([KEY], max_body_bytes=10_000)
    s.start()
    try:
        status, _ = push_raw(
            s, [{**good_ops(0)[1], "data": dict(good_ops(0)[1]["data"], content="z" * 20_000)}]
        )
        assert status == 413
        assert push_raw(s, good_ops(1))[0] == 200
    finally:
        s.stop()


# ---------------------------------------------------------------------------- the client's pull


def feed(pages: list[list[Any]]) -> MockTransport:
    """A fake server whose /v1/changes serves ``pages`` in turn (raw JSON, NaN allowed)."""

    def handler(method: str, url: str, headers: dict[str, str], body: bytes | None) -> HTTPResponse:
        if "/v1/changes" in url:
            q = url.partition("since=")[2].partition("&")[0]
            i = int(q) if q else 0
            text = json.dumps(
                {"changes": pages[i], "cursor": str(i + 1), "more": i + 1 < len(pages)}, allow_nan=True
            )
            return HTTPResponse(200, {}, text.encode())
        return HTTPResponse(
            200,
            {},
            json.dumps(
                {
                    "results": [
                        {"op_id": op["op_id"], "status": "applied"} for op in json.loads(body or b"{}")["ops"]
                    ]
                }
            ).encode(),
        )

    return MockTransport(handler)


def change(resource: str, rid: str, data: Any, hlc: str = "1700000000000-0000-remote") -> dict[str, Any]:
    return {"resource": resource, "id": rid, "data": data, "deleted": data is None, "hlc": hlc}


def good_msg(mid: str) -> dict[str, Any]:
    return change(
        "message",
        mid,
        {
            "id": mid,
            "sessionId": "rs",
            "role": "user",
            "content": f"pulled {mid}",
            "createdAt": 1_700_000_000_000,
            "seq": 0,
        },
    )


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_pull_sets_bad_changes_aside_and_moves_on(backend: str, tmp_path: Path) -> None:
    """Changes with a missing createdAt, role 'evil', NaN, a far-future HLC on a bad record, or no shape
    at all are set aside (kept, counted in status); the good ones apply, the cursor moves, and
    appends keep working."""
    bad = [
        change("message", "b1", {"id": "b1", "sessionId": "rs", "role": "user", "content": "no createdAt"}),
        change(
            "message",
            "b2",
            {"id": "b2", "sessionId": "rs", "role": "evil", "content": {"x": 1}, "createdAt": 1},
        ),
        change(
            "message",
            "b3",
            {
                "id": "b3",
                "sessionId": "rs",
                "role": "user",
                "content": "x",
                "createdAt": 1,
                "metadata": {"v": float("nan")},
            },
        ),
        change("session", "rs", {"sessionId": "rs", "title": 42}),
        {"resource": "message", "id": "b5"},
        "not even an object",
    ]
    pages = [[good_msg("g1"), *bad[:3]], [*bad[3:], good_msg("g2")]]

    mem = await open_store(backend, tmp_path)
    mem.sync.transport = feed(pages)
    await mem.sync.configure(SyncConfig(enabled=True, endpoint="https://sync.example", api_key=KEY))
    report = await mem.sync.pull()
    assert report.state == "idle" and report.cursor == "2"
    st = await mem.sync.status()
    assert st.quarantined == len(bad) and st.to_dict()["quarantined"] == len(bad)
    kept = await mem.sync.quarantined()
    assert len(kept) == len(bad) and all(k["reason"] for k in kept)
    assert "b2" in kept[1]["change"]["json"]
    assert [m.id for m in await mem.messages.list("rs")] == ["g1", "g2"]
    assert await mem.store.kv_get("sync.cursor") == "2"
    m = await mem.messages.append("rs", "user", "still works")
    assert (await mem.messages.get(m.id)).text == "still works"
    assert await mem.sync.clear_quarantine() == len(bad)
    assert (await mem.sync.status()).quarantined == 0
    await mem.close()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_quarantine_with_a_real_server_and_retry(backend: str, tmp_path: Path) -> None:
    """Against the reference server, records it holds that this device cannot use: one of
    a resource this version does not know, one dated an hour ahead of this device's clock
    and one invalid. Each is quarantined alone (the good record of the same page applies,
    the cursor moves on); retry_quarantined applies what became usable (the clock caught
    up, the invalid record was mended) and keeps the rest."""
    from chatmem.server.storage import StoredRecord

    now = [1_800_000_000_000]
    hour_ahead = f"{now[0] + 3_600_000:013d}-0000-elsewhere"
    base = "1799999999000-0000-elsewhere"

    def put(server: SyncServer, resource: str, rid: str, data: dict[str, Any], hlc: str = base) -> None:
        with server.storage.transaction(server.space(KEY)) as txn:
            txn.put(
                StoredRecord(
                    resource=resource,
                    id=rid,
                    data=data,
                    deleted=False,
                    hlc=hlc,
                    birth_hlc=hlc,
                    session_id=data.get("sessionId") if resource == "message" else None,
                )
            )

    def msg(mid: str, **kw: Any) -> dict[str, Any]:
        return {
            "id": mid,
            "sessionId": "rs",
            "role": "user",
            "content": f"text of {mid}",
            "createdAt": 1,
            **kw,
        }

    server = SyncServer([KEY], clock=lambda: now[0] + 7_200_000)
    server.start()
    try:
        put(server, "session", "rs", {"sessionId": "rs", "title": "shared", "createdAt": 1, "updatedAt": 1})
        put(server, "reminder", "r1", {"text": "water the plants"})
        put(server, "message", "m-future", msg("m-future"), hlc=hour_ahead)
        put(server, "message", "m-bad", msg("m-bad", role="evil"))
        put(server, "message", "m-good", msg("m-good"))

        mem = await open_store(backend, tmp_path, clock=lambda: now[0])
        await mem.sync.configure(SyncConfig(enabled=True, endpoint=server.url, api_key=KEY))
        report = await mem.sync.pull()
        st = await mem.sync.status()
        assert report.state == "idle" and st.state == "idle", (report, st)
        assert st.quarantine_reasons == {"unknown-type": 1, "clock-skew": 1, "invalid": 1}
        assert {(x["resource"], x["id"], x["kind"]) for x in await mem.sync.quarantined()} == {
            ("reminder", "r1", "unknown-type"),
            ("message", "m-future", "clock-skew"),
            ("message", "m-bad", "invalid"),
        }
        assert [m.id for m in await mem.messages.list("rs")] == ["m-good"]
        assert await mem.store.kv_get("sync.cursor") == str(server.storage.cursor(server.space(KEY)))
        assert not (await mem.store.kv_get("sync.hlc") or "").startswith(hour_ahead[:13])

        now[0] += 3_600_000  # this device's clock catches up; the sender mends its record
        put(server, "message", "m-bad", msg("m-bad", role="assistant"))
        await mem.sync.retry_quarantined()
        st = await mem.sync.status()
        assert st.quarantine_reasons == {"unknown-type": 1} and st.quarantined == 1
        assert sorted(m.id for m in await mem.messages.list("rs")) == ["m-bad", "m-future", "m-good"]
        await mem.close()
    finally:
        server.stop()


async def test_pulled_far_future_hlc_never_poisons_the_clock(tmp_path: Path) -> None:
    """A pulled change stamped 9999999999999-9999-x is quarantined (applied, it would win
    every later write) and does not move this device's clock: appends, creates and renames
    keep working (before: 'HLC wall time out of range' forever)."""
    future = change(
        "session",
        "rs",
        {"sessionId": "rs", "title": "far", "createdAt": 1, "updatedAt": 1},
        hlc="9999999999999-9999-x",
    )

    mem = await chatmem.open()
    mem.sync.transport = feed([[future]])
    await mem.sync.configure(SyncConfig(enabled=True, endpoint="https://sync.example", api_key=KEY))
    await mem.sync.pull()
    assert not (await mem.store.kv_get("sync.hlc") or "").startswith("9999999999999")
    assert not await mem.sessions.exists("rs")
    assert (await mem.sync.status()).quarantine_reasons == {"clock-skew": 1}
    s = await mem.sessions.create(title="mine")
    await mem.messages.append(s.session_id, "user", "hello")
    await mem.sessions.update(s.session_id, title="renamed")
    ops = await mem.store.outbox_list()
    assert all(not op["hlc"].startswith("9999") for op in ops)
    await mem.close()


# ---------------------------------------------------------------------------- mem.sql


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    p = tmp_path / "notes.csv"
    p.write_text("secret\nTOPSECRET\n")
    return p


@pytest.mark.parametrize(
    "template",
    [
        """FROM "read_csv"('{p}', sep=':')""",
        """SELECT * FROM "read_text"('{p}')""",
        """SELECT * FROM "read_blob"('{p}')""",
        """SELECT * FROM "glob"('{d}/*')""",
        """SELECT * FROM "query"('SELECT 42')""",
        """SELECT * FROM "{p}" """,
        """SUMMARIZE '{p}'""",
        """DESCRIBE '{p}'""",
    ],
)
async def test_sql_cannot_reach_files(template: str, secret_file: Path) -> None:
    """Quoted function names and quoted paths used as tables: ReadOnlySQLError, no data returned."""

    mem = await chatmem.open()
    s = await mem.sessions.create()
    await mem.messages.append(s.session_id, "user", "hello")
    with pytest.raises(ReadOnlySQLError):
        await mem.sql(template.format(p=secret_file, d=secret_file.parent))
    assert (await mem.sql("SELECT count(*) AS n FROM messages"))[0]["n"] == 1
    await mem.close()


async def test_engine_itself_is_locked_down(secret_file: Path) -> None:
    """Below the guard: the engine refuses file access and refuses to change its settings."""
    from chatmem.index.sql_engine import DuckDBEngine

    eng = DuckDBEngine()
    for sql in (
        f"SELECT * FROM read_text('{secret_file}')",
        f"SELECT * FROM '{secret_file}'",
        "SET enable_external_access = true",
        "SET lock_configuration = false",
    ):
        with pytest.raises(QueryError):
            await eng.execute(sql)
    await eng.execute("CREATE TABLE t (a INTEGER)")
    await eng.load_rows("t", ["a"], [(i,) for i in range(1000)])  # the bulk path still works
    assert (await eng.execute("SELECT count(*) AS n FROM t"))[0]["n"] == 1000
    await eng.close()


HEAVY = "SELECT count(*) AS n FROM range(1000000000000) a"


async def test_sql_timeout_interrupts_and_frees_the_index() -> None:
    """mem.sql(..., timeout=) interrupts a heavy query; the next SELECT 1 and search answer at once."""

    mem = await chatmem.open()
    s = await mem.sessions.create()
    await mem.messages.append(s.session_id, "user", "needle")
    with pytest.raises(QueryTimeout):
        await mem.sql(HEAVY, timeout=0.3)
    # would hang for hours if the heavy query still held the index
    assert await asyncio.wait_for(mem.sql("SELECT 1 AS x"), 120) == [{"x": 1}]
    assert len(await asyncio.wait_for(mem.search("needle"), 120)) == 1
    with pytest.raises(ValidationError):
        await mem.sql("SELECT 1", timeout=-1)
    await mem.close()


async def test_cancelled_sql_is_interrupted() -> None:
    """A caller that gives up (asyncio.wait_for) interrupts the query: the index is free again."""

    mem = await chatmem.open()
    await mem.sql("SELECT 1")
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(mem.sql(HEAVY, timeout=None), 0.3)
    assert await asyncio.wait_for(mem.sql("SELECT 2 AS x"), 120) == [{"x": 2}]
    await mem.close()


# ---------------------------------------------------------------------------- SQLite across processes


async def test_sqlite_notices_another_process(tmp_path: Path) -> None:
    """A second process appends to the same file: this process's count, pages and search see it."""
    path = str(tmp_path / "shared.db")
    root = Path(__file__).resolve().parents[2]

    mem = await chatmem.open(persist=path)
    s = await mem.sessions.create(title="shared")
    await mem.messages.append(s.session_id, "user", "one")
    assert await mem.messages.count(s.session_id) == 1
    assert len(await mem.messages.list(s.session_id)) == 1
    assert await mem.search("elsewhere") == []
    code = (
        "import asyncio, chatmem\n"
        "async def main():\n"
        f"    m = await chatmem.open(persist={path!r})\n"
        f"    await m.messages.append({s.session_id!r}, 'user', 'written elsewhere')\n"
        f"    await m.sessions.update({s.session_id!r}, title='renamed elsewhere')\n"
        "    await m.close()\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)
    assert await mem.messages.count(s.session_id) == 2
    assert len(await mem.messages.list(s.session_id)) == 2
    assert (await mem.sessions.get(s.session_id)).title == "renamed elsewhere"
    assert len(await mem.search("elsewhere")) == 1
    await mem.close()


# ---------------------------------------------------------------------------- recursive walks


class CountingStr(str):
    """A node id that counts its equality comparisons (list scans compare; set lookups hash)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        CountingStr.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def chatgpt_chain(n: int) -> dict[str, Any]:
    ids = [CountingStr(f"n{i}") for i in range(n)]

    def other(i: int) -> CountingStr:  # an equal but distinct object, as JSON parsing makes them
        return CountingStr(str(ids[i]))

    mapping = {}
    for i in range(n):
        mapping[ids[i]] = {
            "id": str(ids[i]),
            "parent": other(i - 1) if i else None,
            "children": [other(i + 1)] if i < n - 1 else [],
            "message": {
                "id": str(ids[i]),
                "author": {"role": "user" if i % 2 else "assistant"},
                "create_time": 1_700_000_000 + i,
                "content": {"content_type": "text", "parts": [f"m {i}"]},
            },
        }
    return {"title": "long", "create_time": 1_700_000_000, "mapping": mapping}


def test_chatgpt_import_is_linear_in_the_chain() -> None:
    """A 4,000-node reply chain without current_node: node-id comparisons grow linearly
    (before: a list scan per step, ~8 million comparisons)."""
    from chatmem.transfer.adapters import chatgpt

    counts = []
    for n in (1000, 4000):
        CountingStr.compared = 0
        out = chatgpt.to_normalized([chatgpt_chain(n)])
        assert len(out[0][1]) == n
        counts.append(CountingStr.compared)
    assert counts[1] < 20 * 4000, counts
    assert counts[1] <= 5 * max(counts[0], 1), counts


def test_markdown_renderer_is_depth_limited() -> None:
    """5,000 '>' (and deeply alternating inline markup) render without RecursionError, shallow."""
    from chatmem_app import render

    def depth(nodes: list[Any]) -> int:
        best, stack = 0, [(n, 1) for n in nodes]
        while stack:
            n, d = stack.pop()
            best = max(best, d)
            if isinstance(n, tuple):
                stack.extend((c, d + 1) for c in n[2])
        return best

    tree = render.markdown(">" * 5000 + " deep")
    assert depth(tree) <= 3 * render.MAX_QUOTE_DEPTH
    assert "deep" in json.dumps(tree)
    nested = "".join("**_" for _ in range(2000)) + "x" + "".join("_**" for _ in range(2000))
    assert depth(render.markdown(nested)) <= 3 * render.MAX_INLINE_DEPTH + 2
    assert render.markdown("> a\n> > b") == [
        ("blockquote", {}, [("p", {}, ["a"]), ("blockquote", {}, [("p", {}, ["b"])])])
    ]


@pytest.mark.parametrize(
    "value, ms",
    [
        ("2", 2000),
        ("0.5", 500),
        ("inf", None),
        ("nan", None),
        ("-1", None),
        ("1e400", None),
        ("soon", None),
        ("²", None),
    ],
)
def test_a_model_servers_retry_after_never_escapes(value: str, ms: int | None) -> None:
    """A 429's Retry-After of inf, NaN, 1e400 or a negative number is ignored, not an OverflowError."""
    from chatmem.chat.providers import provider_error

    err = provider_error(
        HTTPResponse(429, {"retry-after": value}, b'{"error": {"message": "slow down"}}'), "u"
    )
    assert isinstance(err, chatmem.errors.ProviderRateLimited) and err.retry_after_ms == ms


def good_fact(fid: str, **changes: Any) -> dict[str, Any]:
    rec = {
        "factId": fid,
        "userId": "local",
        "characterId": None,
        "key": "home",
        "value": "Porto",
        "text": "Lives in Porto",
        "status": "active",
        "validFrom": 1_700_000_000_000,
        "validTo": None,
        "createdAt": 1_700_000_000_000,
        "updatedAt": 1_700_000_000_000,
        "sourceIds": [],
        "origin": "user",
        "importance": 0.8,
        "pinned": False,
        "supersededBy": None,
    }
    rec.update(changes)
    return change("fact", fid, rec)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_a_malformed_pulled_fact_is_quarantined_alone(backend: str, tmp_path: Path) -> None:
    """Facts travel like messages, and so does their quarantine: a pulled fact with a bad
    field, a slot that is not one, an unknown field or an id that differs from its
    record's is set aside with its reason; the good fact of the same page applies and
    the cursor moves on."""
    bad = [
        good_fact("f-bad-status", status="maybe"),
        good_fact("f-bad-key", key="Home Town!"),
        good_fact("f-extra", mood="happy"),
        good_fact("f-importance", importance=7),
        {**good_fact("f-id"), "id": "f-other"},
    ]
    pages = [[good_fact("f-good"), *bad[:2]], [*bad[2:]]]

    mem = await open_store(backend, tmp_path)
    mem.sync.transport = feed(pages)
    await mem.sync.configure(SyncConfig(enabled=True, endpoint="https://sync.example", api_key=KEY))
    report = await mem.sync.pull()
    assert report.state == "idle" and report.cursor == "2"
    assert [f.fact_id for f in await mem.facts.list()] == ["f-good"]
    st = await mem.sync.status()
    assert st.quarantined == len(bad)
    kept = await mem.sync.quarantined()
    assert {k["resource"] for k in kept} == {"fact"} and all(k["reason"] for k in kept)
    assert await mem.store.kv_get("sync.cursor") == "2"
    await mem.close()
