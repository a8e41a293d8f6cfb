"""The reference sync server over real HTTP on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from chatmem.server import FaultPlan, SQLiteSyncStorage, running_server
from chatmem.server.__main__ import main as server_main
from chatmem.server.runner import SyncServer

KEY = "key-one"
KEY2 = "key-two"


def hlc(ms: int, counter: int = 0, device: str = "dev-A") -> str:
    return f"{ms:013d}-{counter:04d}-{device}"


def sop(op_id: str, sid: str, data: dict[str, Any] | None, h: str, type: str = "create") -> dict[str, Any]:
    return {
        "op_id": op_id,
        "type": type,
        "resource": "session",
        "id": sid,
        "data": data,
        "timestamp": 1,
        "hlc": h,
        "attempts": 0,
    }


def mop(op_id: str, mid: str, sid: str, h: str, text: str = "hi", type: str = "create") -> dict[str, Any]:
    data = (
        None
        if type == "delete"
        else {"id": mid, "sessionId": sid, "role": "user", "content": text, "createdAt": 1}
    )
    return {
        "op_id": op_id,
        "type": type,
        "resource": "message",
        "id": mid,
        "data": data,
        "timestamp": 1,
        "hlc": h,
        "attempts": 0,
    }


def call(
    srv: SyncServer,
    method: str,
    path: str,
    body: Any = None,
    *,
    key: str | None = KEY,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
    timeout: float = 5.0,
) -> tuple[int, dict[str, str], Any]:
    """One real HTTP request; returns status, lower-cased headers and the decoded JSON body."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    h = dict(headers or {})
    if key is not None:
        h["Authorization"] = f"Bearer {key}"
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    if data is not None:
        h["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        payload = resp.read()
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()
    try:
        decoded = json.loads(payload) if payload else None
    except ValueError:
        decoded = payload.decode()
    return resp.status, hdrs, decoded


def push(srv: SyncServer, ops: list[dict[str, Any]], key: str = KEY, device: str = "dev-A") -> dict[str, Any]:
    status, _, body = call(srv, "POST", "/v1/push", {"device_id": device, "ops": ops}, key=key)
    assert status == 200, body
    return body


def statuses(answer: dict[str, Any]) -> list[str]:
    return [r["status"] for r in answer["results"]]


def all_changes(srv: SyncServer, key: str = KEY, limit: int = 100) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    since = ""
    while True:
        q = urllib.parse.urlencode({"since": since, "limit": limit})
        status, _, body = call(srv, "GET", f"/v1/changes?{q}", key=key)
        assert status == 200, body
        out += body["changes"]
        since = body["cursor"]
        if not body["more"]:
            return out


def state(srv: SyncServer, key: str = KEY) -> dict[tuple[str, str], dict[str, Any]]:
    return {(c["resource"], c["id"]): c for c in all_changes(srv, key)}


@pytest.fixture
def srv() -> Iterator[SyncServer]:
    with running_server(api_keys=[KEY, KEY2]) as s:
        yield s


def test_health_answers_without_a_key(srv: SyncServer) -> None:
    """Health is public, says ok with the database reachable, and lists end-to-end encryption."""
    status, _, body = call(srv, "GET", "/v1/health", key=None)
    assert status == 200 and body["status"] == "ok" and body["database"] == "ok"
    assert "e2e-v1" in body["capabilities"]


def test_push_applies_and_the_feed_returns_the_record(srv: SyncServer) -> None:
    """A created session is applied once and comes back from the change feed."""
    answer = push(srv, [sop("o1", "s1", {"title": "Trip"}, hlc(10))])
    assert answer["results"] == [{"op_id": "o1", "status": "applied"}]
    assert answer["cursor"] == "1"
    changes = all_changes(srv)
    assert changes == [
        {
            "resource": "session",
            "id": "s1",
            "data": {"sessionId": "s1", "title": "Trip"},
            "deleted": False,
            "hlc": hlc(10),
        }
    ]


def test_repeated_op_id_answers_duplicate_and_applies_once(srv: SyncServer) -> None:
    """An op_id is applied at most once: in the same batch and in a later one."""
    op = sop("o1", "s1", {"title": "A"}, hlc(10))
    assert statuses(push(srv, [op, op])) == ["applied", "duplicate"]
    assert statuses(push(srv, [op])) == ["duplicate"]
    assert isinstance(srv.storage, SQLiteSyncStorage)
    assert srv.storage.applied_op_count(srv.space(KEY)) == 1
    assert len(all_changes(srv)) == 1


@pytest.mark.parametrize(
    "bad, reason_part",
    [
        ({"hlc": "yesterday"}, "hlc"),
        ({"type": "upsert"}, "type"),
        ({"resource": "user"}, "resource"),
        ({"data": None}, "data"),
        ({"id": ""}, "id"),
        ({"timestamp": -1}, "timestamp"),
        ({"data": {"sessionId": "other"}}, "differs"),
    ],
)
def test_a_bad_op_is_rejected_alone(srv: SyncServer, bad: dict[str, Any], reason_part: str) -> None:
    """A malformed op is rejected with a reason; the other ops of its batch are applied."""
    good = sop("ok", "s1", {"title": "A"}, hlc(10))
    wrong = {**sop("bad", "s2", {"title": "B"}, hlc(11)), **bad}
    answer = push(srv, [wrong, good])
    assert statuses(answer) == ["rejected", "applied"]
    assert reason_part in answer["results"][0]["reason"]
    assert set(state(srv)) == {("session", "s1")}


def test_rejected_op_is_judged_again_when_replayed(srv: SyncServer) -> None:
    """Rejections are not remembered: replaying a fixed op with the same op_id applies it."""
    assert statuses(push(srv, [sop("o1", "s1", {"title": "A"}, hlc(10), "update")])) == ["rejected"]
    assert statuses(push(srv, [sop("o1", "s1", {"title": "A"}, hlc(10), "create")])) == ["applied"]


def test_message_update_is_rejected_as_immutable(srv: SyncServer) -> None:
    """Messages cannot be updated; a different create of an existing message is rejected."""
    push(srv, [sop("s", "s1", {"title": "A"}, hlc(1)), mop("m", "m1", "s1", hlc(2), "hello")])
    upd = {**mop("u", "m1", "s1", hlc(3), "changed"), "type": "update"}
    same = mop("again", "m1", "s1", hlc(4), "hello")
    other = mop("other", "m1", "s1", hlc(5), "different")
    answer = push(srv, [upd, same, other])
    assert statuses(answer) == ["rejected", "applied", "rejected"]
    assert "immutable" in answer["results"][0]["reason"]
    assert "immutable" in answer["results"][2]["reason"]
    assert state(srv)[("message", "m1")]["data"]["content"] == "hello"


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"{not json", 400),
        (b"[]", 400),
        (b'{"device_id": "d", "ops": {}}', 400),
        (b'{"ops": []}', 400),
        (b'{"device_id": "d", "ops": [{"type": "create"}]}', 200),  # that op alone is rejected
        (b'{"device_id": "d", "ops": []}', 200),
    ],
)
def test_bad_batch_shape_is_a_400(srv: SyncServer, raw: bytes, expected: int) -> None:
    """Bad JSON or a bad body shape fails the whole request with 400 and an error; a bad
    operation (here, one without an op_id) is only that operation's rejection."""
    status, _, body = call(srv, "POST", "/v1/push", raw=raw)
    assert status == expected
    if expected == 400:
        assert isinstance(body["error"], str) and body["error"]


def test_too_many_ops_is_a_413(srv: SyncServer) -> None:
    """More than 1,000 ops in one push is refused as a whole."""
    ops = [sop(f"o{i}", f"s{i}", {"title": "t"}, hlc(i + 1)) for i in range(1001)]
    status, _, _ = call(srv, "POST", "/v1/push", {"device_id": "d", "ops": ops})
    assert status == 413
    assert all_changes(srv) == []


@pytest.mark.parametrize("key", [None, "wrong-key", ""])
def test_missing_or_unknown_key_is_a_401(srv: SyncServer, key: str | None) -> None:
    """Push and changes need a known key; the answer asks for a Bearer token."""
    for method, path, body in (
        ("POST", "/v1/push", {"device_id": "d", "ops": []}),
        ("GET", "/v1/changes", None),
    ):
        status, headers, _ = call(srv, method, path, body, key=key)
        assert status == 401
        assert headers["www-authenticate"].startswith("Bearer")


def test_changes_feed_pages_with_a_cursor(srv: SyncServer) -> None:
    """25 records in pages of 10: three pages, `more` until the last, each record once."""
    push(srv, [sop(f"o{i}", f"s{i:02d}", {"title": str(i)}, hlc(100 + i)) for i in range(25)])
    pages, since = [], ""
    while True:
        status, _, body = call(srv, "GET", f"/v1/changes?since={since}&limit=10")
        assert status == 200
        pages.append(body)
        since = body["cursor"]
        if not body["more"]:
            break
    assert [len(p["changes"]) for p in pages] == [10, 10, 5]
    assert [p["more"] for p in pages] == [True, True, False]
    ids = [c["id"] for p in pages for c in p["changes"]]
    assert ids == [f"s{i:02d}" for i in range(25)]
    # nothing new after the last cursor; a change afterwards shows up after it
    status, _, body = call(srv, "GET", f"/v1/changes?since={since}")
    assert body == {"changes": [], "cursor": since, "more": False}
    push(srv, [sop("late", "s03", {"title": "late"}, hlc(999), "update")])
    status, _, body = call(srv, "GET", f"/v1/changes?since={since}")
    assert [(c["id"], c["data"]["title"]) for c in body["changes"]] == [("s03", "late")]


@pytest.mark.parametrize("query", ["since=abc", "since=-1", "limit=0", "limit=x", "since=99"])
def test_bad_cursor_or_limit_is_a_400(srv: SyncServer, query: str) -> None:
    """An unreadable cursor, a cursor ahead of the feed, or a bad limit answer 400."""
    push(srv, [sop("o1", "s1", {"title": "A"}, hlc(1))])
    status, _, body = call(srv, "GET", f"/v1/changes?{query}")
    assert status == 400 and body["error"]


def test_session_title_last_writer_wins_by_hlc(srv: SyncServer) -> None:
    """The later HLC wins whatever the arrival order; fields merge independently."""
    push(srv, [sop("c", "s1", {"title": "start", "pinned": False}, hlc(10, device="dev-A"))])
    later = sop("a", "s1", {"title": "from A (later)"}, hlc(30, device="dev-A"), "update")
    earlier = sop("b", "s1", {"title": "from B (earlier)", "pinned": True}, hlc(20, device="dev-B"), "update")
    assert statuses(push(srv, [later], device="dev-A")) == ["applied"]
    answer = push(srv, [earlier], device="dev-B")
    assert statuses(answer) == ["applied"]
    rec = state(srv)[("session", "s1")]
    assert rec["data"]["title"] == "from A (later)"
    assert rec["data"]["pinned"] is True  # B's newer pinned still applies
    assert rec["hlc"] == hlc(30, device="dev-A")
    # an edit older than every field it touches changes nothing and says so
    stale = push(srv, [sop("old", "s1", {"title": "ancient"}, hlc(15, device="dev-B"), "update")])
    assert stale["results"][0]["status"] == "applied"
    assert "superseded" in stale["results"][0]["reason"]
    assert state(srv)[("session", "s1")]["data"]["title"] == "from A (later)"


def test_equal_wall_time_breaks_ties_by_counter_then_device(srv: SyncServer) -> None:
    """Same millisecond: the higher counter wins, then the greater device id."""
    push(srv, [sop("c", "s1", {"title": "0"}, hlc(10))])
    push(srv, [sop("x", "s1", {"title": "B1"}, hlc(50, 1, "dev-B"), "update")])
    push(srv, [sop("y", "s1", {"title": "A0"}, hlc(50, 0, "dev-Z"), "update")])
    assert state(srv)[("session", "s1")]["data"]["title"] == "B1"
    push(srv, [sop("z", "s1", {"title": "Z1"}, hlc(50, 1, "dev-Z"), "update")])
    assert state(srv)[("session", "s1")]["data"]["title"] == "Z1"


def test_session_delete_tombstones_it_and_its_messages(srv: SyncServer) -> None:
    """A session delete leaves tombstones for it and every message; later edits cannot revive it."""
    push(
        srv,
        [sop("c", "s1", {"title": "A"}, hlc(1))]
        + [mop(f"m{i}", f"m{i}", "s1", hlc(2 + i)) for i in range(3)]
        + [sop("c2", "s2", {"title": "other"}, hlc(5)), mop("n", "n1", "s2", hlc(6))],
    )
    assert statuses(push(srv, [sop("d", "s1", None, hlc(10), "delete")])) == ["applied"]
    st = state(srv)
    for rid in ("s1",):
        assert st[("session", rid)]["deleted"] is True and st[("session", rid)]["data"] is None
    for i in range(3):
        assert st[("message", f"m{i}")]["deleted"] is True
    assert st[("session", "s2")]["deleted"] is False and st[("message", "n1")]["deleted"] is False
    # a concurrent edit (even with a later HLC) and a late message do not revive it
    answer = push(
        srv,
        [sop("u", "s1", {"title": "edited"}, hlc(20), "update"), mop("late", "m9", "s1", hlc(21))],
    )
    assert statuses(answer) == ["applied", "applied"]
    assert all("superseded" in r["reason"] for r in answer["results"])
    st = state(srv)
    assert st[("session", "s1")]["deleted"] is True and ("message", "m9") not in st
    # deleting again is acknowledged and changes nothing
    assert push(srv, [sop("d2", "s1", None, hlc(30), "delete")])["results"][0]["reason"] == "already deleted"


def test_create_newer_than_the_tombstone_revives_a_session(srv: SyncServer) -> None:
    """Restoring a backup (create with a later HLC) brings a deleted session back; an older one does not."""
    push(srv, [sop("c", "s1", {"title": "A"}, hlc(1)), sop("d", "s1", None, hlc(10), "delete")])
    old = push(srv, [sop("old", "s1", {"title": "old copy"}, hlc(5))])
    assert "superseded" in old["results"][0]["reason"]
    assert state(srv)[("session", "s1")]["deleted"] is True
    push(srv, [sop("new", "s1", {"title": "restored"}, hlc(40))])
    rec = state(srv)[("session", "s1")]
    assert rec["deleted"] is False and rec["data"]["title"] == "restored"
    # the old delete replayed now is older than the re-creation: ignored
    push(srv, [sop("d-again", "s1", None, hlc(10), "delete")])
    assert state(srv)[("session", "s1")]["deleted"] is False


def test_message_delete_is_a_tombstone(srv: SyncServer) -> None:
    """Deleting one message leaves a tombstone; its session and siblings stay."""
    push(
        srv,
        [
            sop("c", "s1", {"title": "A"}, hlc(1)),
            mop("a", "m1", "s1", hlc(2)),
            mop("b", "m2", "s1", hlc(3)),
        ],
    )
    push(srv, [mop("d", "m1", "s1", hlc(4), type="delete")])
    st = state(srv)
    assert st[("message", "m1")] == {
        "resource": "message",
        "id": "m1",
        "data": None,
        "deleted": True,
        "hlc": hlc(4),
    }
    assert st[("message", "m2")]["deleted"] is False and st[("session", "s1")]["deleted"] is False


def test_update_of_an_unknown_session_is_rejected(srv: SyncServer) -> None:
    """An update needs the session's create first."""
    answer = push(srv, [sop("u", "nope", {"title": "x"}, hlc(1), "update")])
    assert answer["results"][0]["status"] == "rejected"
    assert "does not exist" in answer["results"][0]["reason"]


def test_each_key_has_its_own_data_space(srv: SyncServer) -> None:
    """Data pushed with one key is invisible with another; op_ids do not collide across keys."""
    push(srv, [sop("o1", "s1", {"title": "one"}, hlc(1))], key=KEY)
    assert all_changes(srv, KEY2) == []
    assert statuses(push(srv, [sop("o1", "s1", {"title": "two"}, hlc(1))], key=KEY2)) == ["applied"]
    assert state(srv, KEY)[("session", "s1")]["data"]["title"] == "one"
    assert state(srv, KEY2)[("session", "s1")]["data"]["title"] == "two"


def test_cors_preflight_and_headers_on_answers(srv: SyncServer) -> None:
    """A page on another origin may send Authorization + JSON, and can read 401s and faults."""
    status, headers, _ = call(
        srv,
        "OPTIONS",
        "/v1/push",
        key=None,
        headers={
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert status == 200
    assert headers["access-control-allow-origin"] in ("*", "https://app.example")
    allowed = headers["access-control-allow-headers"].lower()
    assert "authorization" in allowed and "content-type" in allowed
    assert "POST" in headers["access-control-allow-methods"]
    status, headers, _ = call(srv, "GET", "/v1/changes", key="bad", headers={"Origin": "https://app.example"})
    assert status == 401 and headers["access-control-allow-origin"] in ("*", "https://app.example")
    srv.faults.rate_limit(1, retry_after=3)
    status, headers, _ = call(
        srv,
        "POST",
        "/v1/push",
        {"device_id": "d", "ops": []},
        headers={"Origin": "https://app.example"},
    )
    assert status == 429 and headers["access-control-allow-origin"] == "https://app.example"
    assert "retry-after" in headers["access-control-expose-headers"].lower()


def test_fault_plan_fails_then_recovers(srv: SyncServer) -> None:
    """fail(2): two 500s with nothing applied, then the same op applies once."""
    srv.faults.fail(2)
    op = sop("o1", "s1", {"title": "A"}, hlc(1))
    for _ in range(2):
        status, _, body = call(srv, "POST", "/v1/push", {"device_id": "d", "ops": [op]})
        assert status == 500 and "injected" in body["error"]
    assert all_changes(srv) == []
    assert statuses(push(srv, [op])) == ["applied"]
    assert srv.faults.fired == [("/v1/push", "500"), ("/v1/push", "500")]


def test_fault_plan_rate_limit_carries_retry_after(srv: SyncServer) -> None:
    """429 with the Retry-After the test asked for."""
    srv.faults.rate_limit(1, retry_after=7)
    status, headers, _ = call(srv, "POST", "/v1/push", {"device_id": "d", "ops": []})
    assert status == 429 and headers["retry-after"] == "7"


def test_fault_plan_drop_closes_the_connection(srv: SyncServer) -> None:
    """drop: no HTTP answer at all; the push was not applied."""
    srv.faults.drop()
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        call(
            srv,
            "POST",
            "/v1/push",
            {"device_id": "d", "ops": [sop("o1", "s1", {"title": "A"}, hlc(1))]},
        )
    assert all_changes(srv) == []


def test_fault_after_applying_loses_only_the_answer(srv: SyncServer) -> None:
    """after-drop: the push is applied, the answer lost; the retry answers duplicate."""
    srv.faults.drop(after=True)
    op = sop("o1", "s1", {"title": "A"}, hlc(1))
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        call(srv, "POST", "/v1/push", {"device_id": "d", "ops": [op]})
    assert statuses(push(srv, [op])) == ["duplicate"]
    assert len(all_changes(srv)) == 1


def test_fault_delay_outlasts_a_client_timeout(srv: SyncServer) -> None:
    """delay: a client with a shorter timeout gives up; the server still applies the push."""
    srv.faults.delay(0.6)
    op = sop("o1", "s1", {"title": "A"}, hlc(1))
    with pytest.raises((socket.timeout, TimeoutError)):
        call(srv, "POST", "/v1/push", {"device_id": "d", "ops": [op]}, timeout=0.2)
    assert statuses(push(srv, [op])) in (["duplicate"], ["applied"])
    assert len(all_changes(srv)) == 1


def test_faults_touch_only_their_path(srv: SyncServer) -> None:
    """A push fault leaves health and changes alone, and is still queued for the push."""
    srv.faults.fail(1)
    assert call(srv, "GET", "/v1/health", key=None)[0] == 200
    assert call(srv, "GET", "/v1/changes")[0] == 200
    assert srv.faults.pending == 1
    assert call(srv, "POST", "/v1/push", {"device_id": "d", "ops": []})[0] == 500


def test_random_faults_are_reproducible() -> None:
    """The same seed fires the same faults."""

    def run() -> list[str | None]:
        plan = FaultPlan().random(0.5, seed=3)
        return [f.describe() if (f := plan.take("/v1/push")) else None for _ in range(20)]

    first = run()
    assert first == run()
    assert 0 < sum(x is not None for x in first) < 20


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("500x3", ["500", "500", "500"]),
        ("429:2,drop", ["429", "drop"]),
        ("after:drop,delay:1.5x2", ["after:drop", "delay:1.5", "delay:1.5"]),
        ("503", ["503"]),
    ],
)
def test_fault_spec_parsing(spec: str, expected: list[str]) -> None:
    """--faults grammar builds the same queue as the Python API."""
    plan = FaultPlan.parse(spec)
    assert [f.describe() for f in iter(lambda: plan.take("/v1/push"), None)] == expected


@pytest.mark.parametrize("spec", ["boom", "200", "delay:x", "random:2"])
def test_bad_fault_spec_is_refused(spec: str) -> None:
    """An unreadable --faults value is an error, not silently ignored."""
    with pytest.raises(ValueError):
        FaultPlan.parse(spec)


def test_sqlite_file_survives_a_restart(tmp_path: Any) -> None:
    """With a database file, data and applied op_ids outlive the server process."""
    db = str(tmp_path / "sync.db")
    op = sop("o1", "s1", {"title": "kept"}, hlc(1))
    with running_server(api_keys=[KEY], db=db) as s:
        push(s, [op])
    with running_server(api_keys=[KEY], db=db) as s:
        assert statuses(push(s, [op])) == ["duplicate"]
        assert state(s)[("session", "s1")]["data"]["title"] == "kept"
    assert KEY.encode() not in (tmp_path / "sync.db").read_bytes()


def test_command_line_needs_a_key(capsys: Any, monkeypatch: Any) -> None:
    """`python -m chatmem.server` without a key exits with a usage error."""
    monkeypatch.delenv("CHATMEM_SYNC_API_KEYS", raising=False)
    with pytest.raises(SystemExit) as e:
        server_main(["--port", "0", "--db", ":memory:"])
    assert e.value.code == 2
    assert "--api-key" in capsys.readouterr().err


def test_oversized_body_is_a_413(srv: SyncServer) -> None:
    """A body over 16 MiB is refused before it is parsed."""
    raw = b'{"device_id": "d", "ops": [], "pad": "' + b"x" * (16 * 1024 * 1024 + 1) + b'"}'
    status, _, _ = call(srv, "POST", "/v1/push", raw=raw)
    assert status == 413
