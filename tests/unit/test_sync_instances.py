"""Several server processes over one PostgreSQL: the ``create_app`` factory under uvicorn, real processes."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from test_sync_accounts import Stream
from test_sync_server import hlc, sop

from chatmem.server import add_account, issue_token, open_storage, running_server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def request(port: int, method: str, path: str, token: str | None = None, body: Any = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = json.dumps(body).encode() if body is not None else None
    if data:
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def wait_healthy(proc: subprocess.Popen[bytes], port: int) -> None:
    """Poll /v1/health until the process answers (it fails the test if the process dies)."""
    while True:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "exited"
        try:
            if request(port, "GET", "/v1/health")[0] == 200:
                return
        except OSError:
            time.sleep(0.1)


@pytest.fixture
def instances(pg_url: str) -> Iterator[tuple[list[int], dict[str, str]]]:
    """Two `uvicorn --factory chatmem.server:create_app` processes over one database, two tokens."""
    st = open_storage(pg_url)
    add_account(st, "alice")
    add_account(st, "bob")
    tokens = {"alice": issue_token(st, "alice")[1], "bob": issue_token(st, "bob")[1]}
    st.close()
    env = dict(os.environ, CHATMEM_SYNC_DB=pg_url, CHATMEM_SYNC_HEARTBEAT="1", CHATMEM_SYNC_POOL_SIZE="4")
    ports = [free_port(), free_port()]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "chatmem.server:create_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(p),
                "--timeout-graceful-shutdown",
                "2",
                "--log-level",
                "warning",
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for p in ports
    ]
    try:
        for proc, port in zip(procs, ports):
            wait_healthy(proc, port)
        yield ports, tokens
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_factory_instances_share_one_database(instances: tuple[list[int], dict[str, str]]) -> None:
    """A push through one process is pulled through the other; a repeat through it is a duplicate."""
    (a, b), tokens = instances
    op = sop("o1", "s1", {"title": "shared"}, hlc(1))
    status, body = request(a, "POST", "/v1/push", tokens["alice"], {"device_id": "d1", "ops": [op]})
    assert status == 200 and body["results"][0]["status"] == "applied"
    status, body = request(b, "POST", "/v1/push", tokens["alice"], {"device_id": "d1", "ops": [op]})
    assert body["results"][0]["status"] == "duplicate"
    status, body = request(b, "GET", "/v1/changes", tokens["alice"])
    assert [c["data"]["title"] for c in body["changes"]] == ["shared"]
    assert request(b, "GET", "/v1/changes", tokens["bob"])[1]["changes"] == []
    health = request(a, "GET", "/v1/health")[1]
    assert health["database"] == "ok"


def test_a_push_on_one_process_reaches_a_stream_on_the_other(
    instances: tuple[list[int], dict[str, str]],
) -> None:
    """LISTEN/NOTIFY carries the new cursor between processes."""
    (a, b), tokens = instances
    s = Stream(b, tokens["alice"])
    try:
        assert s.cursor_at_least(0) == 0
        request(
            a, "POST", "/v1/push", tokens["alice"], {"device_id": "d1", "ops": [sop("o", "s", {}, hlc(1))]}
        )
        assert s.cursor_at_least(1) == 1
    finally:
        s.close()


def test_health_reports_an_unreachable_database(pg_url: str) -> None:
    """With its database gone, health answers 503 and data routes 503 (retryable), not 500."""
    with running_server(api_keys=["k"], db=pg_url) as srv:
        assert request(srv.port, "GET", "/v1/health")[0] == 200
        name = pg_url.rsplit("/", 1)[1]
        with psycopg.connect(pg_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
        status, body = request(srv.port, "GET", "/v1/health")
        assert status == 503 and body["database"] == "unreachable"
        assert request(srv.port, "GET", "/v1/changes", "k")[0] == 503
