"""Accounts, tokens, quotas, the live stream and the access log of the sync server (real HTTP)."""

from __future__ import annotations

import http.client
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from test_sync_server import all_changes, call, hlc, mop, sop, statuses

from chatmem.server import Quotas, running_server
from chatmem.server.__main__ import main as server_main
from chatmem.server.runner import SyncServer


def cli(capsys: Any, *argv: str) -> tuple[int, list[str], str]:
    """Run ``python -m chatmem.server ...`` in-process; exit code, stdout lines, stderr."""
    code = server_main(list(argv))
    out = capsys.readouterr()
    return code, out.out.strip().splitlines(), out.err


def new_token(capsys: Any, db: str, account: str, label: str = "") -> str:
    code, lines, err = cli(
        capsys, "tokens", "issue", account, "--db", db, *(["--label", label] if label else [])
    )
    assert code == 0, err
    return lines[-1]


def push_as(srv: SyncServer, token: str, ops: list[dict[str, Any]]) -> tuple[int, dict[str, str], Any]:
    return call(srv, "POST", "/v1/push", {"device_id": "dev-A", "ops": ops}, key=token)


def make_accounts(db: str, capsys: Any) -> dict[str, str]:
    """Two accounts in a fresh database: alice (two device tokens) and bob (one)."""
    for name in ("alice", "bob"):
        assert cli(capsys, "accounts", "add", name, "--db", db)[0] == 0
    return {
        "db": db,
        "alice1": new_token(capsys, db, "alice", "laptop"),
        "alice2": new_token(capsys, db, "alice", "phone"),
        "bob": new_token(capsys, db, "bob"),
    }


@pytest.fixture
def accounts(sync_db: str, capsys: Any) -> dict[str, str]:
    """Accounts in a SQLite file, then in PostgreSQL."""
    return make_accounts(sync_db, capsys)


@pytest.fixture
def pg_accounts(pg_url: str, capsys: Any) -> dict[str, str]:
    """Accounts in PostgreSQL (several instances over one database)."""
    return make_accounts(pg_url, capsys)


def test_tokens_issue_list_and_revoke_from_the_command_line(accounts: dict[str, str], capsys: Any) -> None:
    """The token is printed once as the last line; list shows ids and labels, never tokens."""
    db = accounts["db"]
    assert accounts["alice1"].startswith("cmt_") and accounts["alice1"] != accounts["alice2"]
    code, lines, _ = cli(capsys, "tokens", "list", "alice", "--db", db)
    assert code == 0 and len(lines) == 2
    assert [line.split("\t")[1] for line in lines] == ["laptop", "phone"]
    listing = "\n".join(lines)
    assert accounts["alice1"] not in listing and accounts["alice1"].split("_")[1] in listing
    token_id = accounts["alice1"].split("_")[1]
    assert cli(capsys, "tokens", "revoke", token_id, "--db", db)[0] == 0
    assert "revoked=" in "\n".join(cli(capsys, "tokens", "list", "alice", "--db", db)[1])


@pytest.mark.parametrize(
    "argv",
    [
        ["accounts", "add", "alice"],  # taken
        ["accounts", "add", "bad name"],  # not a name
        ["tokens", "issue", "nobody"],
        ["tokens", "list", "nobody"],
        ["tokens", "revoke", "0123456789abcdef"],
    ],
)
def test_unknown_or_taken_names_fail_cleanly(accounts: dict[str, str], capsys: Any, argv: list[str]) -> None:
    """Exit 1 with a message, nothing printed as a token."""
    code, lines, err = cli(capsys, *argv, "--db", accounts["db"])
    assert code == 1 and "error:" in err and not any(line.startswith("cmt_") for line in lines)


def test_the_module_entry_point_runs_the_commands(tmp_path: Any) -> None:
    """`python -m chatmem.server accounts add` / `tokens issue` as real processes."""
    db = str(tmp_path / "s.db")
    run = [sys.executable, "-m", "chatmem.server"]
    subprocess.run(run + ["accounts", "add", "carol", "--db", db], check=True, capture_output=True)
    out = subprocess.run(
        run + ["tokens", "issue", "carol", "--db", db], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip().splitlines()[-1].startswith("cmt_")


def test_devices_of_one_account_share_a_space_and_accounts_are_apart(accounts: dict[str, str]) -> None:
    """Two tokens of alice see each other's writes; bob sees nothing of alice's."""
    with running_server(api_keys=[], db=accounts["db"]) as srv:
        status, _, body = push_as(srv, accounts["alice1"], [sop("o1", "s1", {"title": "mine"}, hlc(1))])
        assert status == 200 and statuses(body) == ["applied"]
        assert [c["id"] for c in all_changes(srv, accounts["alice2"])] == ["s1"]
        assert all_changes(srv, accounts["bob"]) == []


@pytest.mark.parametrize("token", ["", "cmt_0123456789abcdef_" + "x" * 43, "not-a-key"])
def test_unknown_tokens_are_401(accounts: dict[str, str], token: str) -> None:
    """A made-up token or key answers 401 on every data route."""
    with running_server(api_keys=["k"], db=accounts["db"]) as srv:
        for method, path in (("GET", "/v1/changes"), ("GET", "/v1/stream"), ("POST", "/v1/push")):
            status, headers, _ = call(srv, method, path, {"device_id": "d", "ops": []}, key=token or None)
            assert status == 401 and "bearer" in headers["www-authenticate"].lower()


def test_a_tampered_secret_is_401(accounts: dict[str, str]) -> None:
    """The right token id with another secret does not authenticate."""
    tid = accounts["alice1"].split("_")[1]
    with running_server(api_keys=[], db=accounts["db"]) as srv:
        assert call(srv, "GET", "/v1/changes", key=f"cmt_{tid}_{'A' * 43}")[0] == 401


def test_revocation_is_immediate_on_every_instance(accounts: dict[str, str], capsys: Any) -> None:
    """Two instances over one database: after `tokens revoke`, both answer 401 to that token only."""
    db = accounts["db"]
    with running_server(api_keys=[], db=db) as a, running_server(api_keys=[], db=db) as b:
        for srv in (a, b):
            assert call(srv, "GET", "/v1/changes", key=accounts["alice1"])[0] == 200
        assert cli(capsys, "tokens", "revoke", accounts["alice1"].split("_")[1], "--db", db)[0] == 0
        for srv in (a, b):
            assert call(srv, "GET", "/v1/changes", key=accounts["alice1"])[0] == 401
            assert call(srv, "GET", "/v1/changes", key=accounts["alice2"])[0] == 200


def test_api_key_shortcut_works_beside_accounts(accounts: dict[str, str]) -> None:
    """An --api-key key keeps its own space next to the accounts."""
    with running_server(api_keys=["legacy"], db=accounts["db"]) as srv:
        assert (
            call(
                srv, "POST", "/v1/push", {"device_id": "d", "ops": [sop("o", "s9", {}, hlc(1))]}, key="legacy"
            )[0]
            == 200
        )
        assert [c["id"] for c in all_changes(srv, "legacy")] == ["s9"]
        assert all_changes(srv, accounts["alice1"]) == []


def test_ops_per_minute_quota_answers_429_with_retry_after(accounts: dict[str, str]) -> None:
    """Once the minute's budget is spent, a push is refused whole with Retry-After."""
    with running_server(api_keys=[], db=accounts["db"], quotas=Quotas(ops_per_minute=3)) as srv:
        t = accounts["alice1"]
        assert push_as(srv, t, [sop("a", "s1", {}, hlc(1)), sop("b", "s2", {}, hlc(2))])[0] == 200
        assert push_as(srv, t, [sop("c", "s3", {}, hlc(3)), sop("d", "s4", {}, hlc(4))])[0] == 200
        status, headers, _ = push_as(srv, t, [sop("e", "s5", {}, hlc(5))])
        assert status == 429 and 1 <= int(headers["retry-after"]) <= 60
        assert "s5" not in {c["id"] for c in all_changes(srv, t)}
        assert push_as(srv, accounts["bob"], [sop("e", "s5", {}, hlc(5))])[0] == 200  # per account


def test_per_account_quota_overrides_the_default(accounts: dict[str, str], capsys: Any) -> None:
    """`accounts quota NAME --ops-per-minute 1` limits that account only."""
    assert cli(capsys, "accounts", "quota", "bob", "--ops-per-minute", "1", "--db", accounts["db"])[0] == 0
    with running_server(api_keys=[], db=accounts["db"]) as srv:
        assert push_as(srv, accounts["bob"], [sop("a", "s1", {}, hlc(1))])[0] == 200
        assert push_as(srv, accounts["bob"], [sop("b", "s2", {}, hlc(2))])[0] == 429
        assert push_as(srv, accounts["alice1"], [sop("b", "s2", {}, hlc(2))])[0] == 200


def test_stored_bytes_quota_answers_413_and_deletes_still_pass(accounts: dict[str, str]) -> None:
    """A push that would overfill the account is refused whole; a delete frees room."""
    with running_server(api_keys=[], db=accounts["db"], quotas=Quotas(max_bytes=600)) as srv:
        t = accounts["alice1"]
        assert push_as(srv, t, [mop("a", "m1", "s1", hlc(1), "x" * 300)])[0] == 200
        status, _, body = push_as(srv, t, [mop("b", "m2", "s1", hlc(2), "y" * 300)])
        assert status == 413 and "quota" in body["error"]
        assert [c["id"] for c in all_changes(srv, t)] == ["m1"]
        assert push_as(srv, t, [mop("c", "m1", "s1", hlc(3), type="delete")])[0] == 200
        assert push_as(srv, t, [mop("b", "m2", "s1", hlc(4), "y" * 300)])[0] == 200


# ---------------------------------------------------------------------------- the stream


class Stream:
    """A real /v1/stream connection read event by event."""

    def __init__(self, port: int, token: str, timeout: float = 30.0):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.conn.request("GET", "/v1/stream", headers={"Authorization": f"Bearer {token}"})
        self.resp = self.conn.getresponse()

    def next(self) -> dict[str, str]:
        """The next event (comments and pings skipped)."""
        fields: dict[str, str] = {}
        while True:
            line = self.resp.readline().decode()
            assert line, "the stream ended"
            line = line.rstrip("\r\n")
            if not line:
                if "event" in fields:
                    return fields
                continue
            if line.startswith(":"):
                continue
            k, _, v = line.partition(":")
            fields[k] = v.lstrip(" ")

    def cursor_at_least(self, n: int) -> int:
        while True:
            ev = self.next()
            if ev["event"] == "cursor" and int(json.loads(ev["data"])["cursor"]) >= n:
                return int(ev["id"])

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def two_instances(pg_accounts: dict[str, str]) -> Iterator[tuple[SyncServer, SyncServer]]:
    """Two servers over one PostgreSQL database, pinging streams every 0.5 s."""
    with (
        running_server(api_keys=[], db=pg_accounts["db"], heartbeat=0.5) as a,
        running_server(api_keys=[], db=pg_accounts["db"], heartbeat=0.5) as b,
    ):
        yield a, b


def test_stream_announces_cursors_of_the_own_space_only(accounts: dict[str, str]) -> None:
    """The stream starts at the current cursor and announces each push of the account."""
    with running_server(api_keys=[], db=accounts["db"]) as srv:
        push_as(srv, accounts["alice1"], [sop("o1", "s1", {}, hlc(1))])
        s = Stream(srv.port, accounts["alice2"])
        try:
            assert s.resp.status == 200 and s.resp.getheader("content-type").startswith("text/event-stream")
            assert s.cursor_at_least(1) == 1
            push_as(srv, accounts["bob"], [sop("b1", "s1", {}, hlc(1))])
            push_as(srv, accounts["alice1"], [sop("o2", "s2", {}, hlc(2))])
            ev = s.next()
            assert ev["event"] == "cursor" and ev["id"] == "2"  # bob's push was not announced here
        finally:
            s.close()


def test_stream_crosses_instances(
    two_instances: tuple[SyncServer, SyncServer], pg_accounts: dict[str, str]
) -> None:
    """A push on one instance reaches a stream on the other (PostgreSQL LISTEN/NOTIFY)."""
    a, b = two_instances
    accounts = pg_accounts
    s = Stream(b.port, accounts["alice2"])
    try:
        assert s.cursor_at_least(0) == 0
        push_as(a, accounts["alice1"], [sop("o1", "s1", {}, hlc(1))])
        assert s.cursor_at_least(1) == 1
    finally:
        s.close()


def test_a_revoked_tokens_stream_ends(
    two_instances: tuple[SyncServer, SyncServer], pg_accounts: dict[str, str], capsys: Any
) -> None:
    """At the next heartbeat after `tokens revoke`, the open stream says so and closes."""
    a, _ = two_instances
    accounts = pg_accounts
    s = Stream(a.port, accounts["alice1"])
    try:
        s.cursor_at_least(0)
        cli(capsys, "tokens", "revoke", accounts["alice1"].split("_")[1], "--db", accounts["db"])
        assert s.next()["event"] == "revoked"
        assert s.resp.readline() == b""
    finally:
        s.close()


def test_access_log_has_no_tokens_or_content(accounts: dict[str, str], caplog: Any) -> None:
    """One JSON line per request with the account's name; no token, no message text."""
    caplog.set_level(logging.INFO, logger="chatmem.server")
    with running_server(api_keys=[], db=accounts["db"]) as srv:
        push_as(srv, accounts["alice1"], [mop("o", "m1", "s1", hlc(1), "very secret words")])
        all_changes(srv, accounts["alice1"])
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "chatmem.server"]
    pushes = [x for x in lines if x.get("path") == "/v1/push"]
    assert pushes and pushes[0]["account"] == "alice" and pushes[0]["ops"] == 1 and pushes[0]["status"] == 200
    text = caplog.text
    assert "secret words" not in text and accounts["alice1"] not in text
    assert accounts["alice1"].split("_", 2)[2] not in text


def test_settings_come_from_the_environment() -> None:
    """CHATMEM_SYNC_* fill the factory's settings; a bad number is a ValidationError naming it."""
    from chatmem.errors import ValidationError
    from chatmem.server import ServerSettings

    s = ServerSettings.from_env(
        {
            "CHATMEM_SYNC_DB": "postgresql://h/db",
            "CHATMEM_SYNC_API_KEYS": "a, b",
            "CHATMEM_SYNC_MAX_BODY": "1000",
            "CHATMEM_SYNC_OPS_PER_MINUTE": "7",
            "CHATMEM_SYNC_MAX_BYTES": "0",
            "CHATMEM_SYNC_CORS_ORIGINS": "https://x.example",
        }
    )
    assert (s.db, s.api_keys, s.max_body, s.cors_origins) == (
        "postgresql://h/db",
        ["a", "b"],
        1000,
        ["https://x.example"],
    )
    assert (s.quotas.ops_per_minute, s.quotas.max_bytes) == (7, 0)
    assert ServerSettings.from_env({}).db == "sync.db"
    with pytest.raises(ValidationError) as e:
        ServerSettings.from_env({"CHATMEM_SYNC_MAX_BODY": "lots"})
    assert e.value.field == "CHATMEM_SYNC_MAX_BODY"


def test_max_body_applies() -> None:
    """A body over --max-body answers 413 before it is parsed; a smaller one is served."""
    from chatmem.server import SyncServer

    srv = SyncServer(["k"], max_body=2_000).start()
    try:
        small = {"device_id": "d", "ops": [sop("o", "s", {"title": "x" * 100}, hlc(1))]}
        assert call(srv, "POST", "/v1/push", small, key="k")[0] == 200
        big = {"device_id": "d", "ops": [sop("o2", "s2", {"title": "x" * 3_000}, hlc(2))]}
        assert call(srv, "POST", "/v1/push", big, key="k")[0] == 413
    finally:
        srv.stop()


def test_the_command_line_reads_plainly(capsys: Any) -> None:
    """--help shows no reStructuredText quotes; the start line counts accounts too, with
    plurals, and never shows a database password."""
    from chatmem.server.__main__ import banner

    with pytest.raises(SystemExit):
        server_main(["--help"])
    assert "``" not in capsys.readouterr().out
    assert (
        banner("http://h:1", 0, 1, "sync.db")
        == "chatmem sync server on http://h:1 (0 API keys, 1 account, db sync.db)"
    )
    assert "secret" not in banner("u", 1, 0, "postgresql://me:secret@db/x") and "1 API key," in banner(
        "u", 1, 0, "x"
    )
