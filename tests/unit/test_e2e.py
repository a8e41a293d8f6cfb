"""End-to-end encrypted sync on CPython against the real reference server: the
server's database and every HTTP body hold no plaintext; devices with the
passphrase read each other's changes; a wrong passphrase, tampered or moved
ciphertext and an interrupted passphrase change end in a typed error or a
correct resume, with nothing lost. Parametrized over the server's storages."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import chatmem
from chatmem.errors import DecryptionError, SyncError, ValidationError, WrongPassphrase
from chatmem.http import HTTPResponse, TransportError
from chatmem.runtime import UrllibTransport
from chatmem.sync import SyncConfig, keyring
from chatmem.sync.cipher import CryptographySuite
from chatmem.sync.encryption import (
    DEFAULT_ITERATIONS,
    EncryptionKey,
    KeyParams,
    Passphrase,
    associated_data,
    decrypt_records,
    derive_key,
    encrypt_records,
    new_params,
)
from chatmem.sync.synchronizer import CONFIG_KEY
from e2e_server import STORAGES, e2e_server, stored_bytes

KEY = "k-e2e-space-1"
MARKER = "zebra-quasar-7781"
PASS = "correct horse battery staple"
FAST = 10_000  # PBKDF2 iterations for tests (the default is DEFAULT_ITERATIONS)


@pytest.fixture(params=STORAGES)
def srv(request: Any, tmp_path: Path) -> Iterator[Any]:
    with e2e_server(request, tmp_path, [KEY]) as s:
        yield s


class Capture:
    """A transport that records every request and answer body; can lose the answer of
    the ``lose``-th request to a path (the server applied it, the client never hears)."""

    def __init__(self, lose: tuple[str, int] | None = None):
        self.inner = UrllibTransport()
        self.bodies: list[bytes] = []
        self.answers: list[tuple[str, Any]] = []
        self.lose = lose
        self.calls: dict[str, int] = {}

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float | None = 30.0,
    ) -> HTTPResponse:
        resp = await self.inner.request(method, url, headers=headers, body=body, timeout=timeout)
        path = "/" + url.split("/", 3)[3].split("?")[0]
        self.calls[path] = self.calls.get(path, 0) + 1
        self.bodies += [body or b"", resp.body]
        self.answers.append((path, resp.json() if resp.body else None))
        if self.lose and self.lose == (path, self.calls[path]):
            raise TransportError("connection reset (test)")
        return resp

    def stream_lines(self, *a: Any, **k: Any) -> Any:  # pragma: no cover - not used by sync
        raise NotImplementedError


async def device(
    srv: Any, enc: Any = None, *, persist: str | None = None, transport: Capture | None = None
) -> chatmem.Memory:
    mem = await chatmem.open(persist=persist)
    mem.sync.transport = transport or Capture()
    await mem.sync.configure(
        SyncConfig(
            enabled=True,
            endpoint=srv.url,
            api_key=KEY,
            timeout=5_000,
            backoff_base=0,
            backoff_max=0,
            encryption=enc,
        )
    )
    return mem


def pw(text: str = PASS, **kw: Any) -> Passphrase:
    return Passphrase(text, iterations=FAST, **kw)


async def history(mem: chatmem.Memory, marker: str = MARKER) -> str:
    s = await mem.sessions.create(title=f"title {marker}", tags=["t"])
    await mem.messages.append(s.session_id, "user", f"my secret is {marker}")
    await mem.messages.append(s.session_id, "assistant", "noted")
    await mem.sessions.update(s.session_id, title=f"renamed {marker}")
    return s.session_id


async def texts(mem: chatmem.Memory, sid: str) -> list[str]:
    return [m.content for m in await mem.messages.list(sid)]


# --------------------------------------------------------------------------- format


async def test_format_round_trip_binds_identity_and_pads() -> None:
    """A record decrypts only under the op_id / resource / id / hlc / field it was sealed with."""
    suite = CryptographySuite()

    params, key = await new_params(pw(), suite)
    assert KeyParams.from_dict(params.to_dict()) == params
    assert (await derive_key(pw(), params, suite)).enc == key.enc
    with pytest.raises(WrongPassphrase):
        await derive_key(pw("not it"), params, suite)
    recs = [
        {
            "op_id": "op1",
            "resource": "message",
            "id": "m1",
            "hlc": "h1",
            "data": {"id": "m1", "sessionId": "s1", "role": "user", "content": MARKER},
        },
        {
            "op_id": "op2",
            "resource": "session",
            "id": "s1",
            "hlc": "h2",
            "data": {"sessionId": "s1", "title": MARKER, "pinned": True},
        },
    ]
    sealed = await encrypt_records(recs, key, suite)
    assert MARKER not in json.dumps(sealed)
    assert sealed[0] is not None and set(sealed[0]) == {"sessionId", "e2e"}
    assert sealed[1] is not None and set(sealed[1]) == {"sessionId", "title", "pinned"}
    # booleans and short strings pad to the same 32-byte step: no length leak
    assert len(sealed[1]["pinned"]["ct"]) == len(
        (await encrypt_records([dict(recs[1], data={"pinned": False})], key, suite))[0]["pinned"]["ct"]
    )
    keys = {key.key_id: key}
    opened = await decrypt_records([dict(r, data=d) for r, d in zip(recs, sealed)], keys, suite)
    assert opened == [r["data"] for r in recs]
    moved = [dict(recs[0], id="m2", data=sealed[0])]  # the ciphertext under another record
    with pytest.raises(DecryptionError):
        await decrypt_records(moved, keys, suite)
    env = dict(sealed[1]["title"], op="op-other")  # the envelope claims another op
    with pytest.raises(DecryptionError):
        await decrypt_records([dict(recs[1], data={"sessionId": "s1", "title": env})], keys, suite)
    ct = bytearray(__import__("base64").b64decode(sealed[1]["title"]["ct"]))
    ct[0] ^= 1
    flipped = dict(sealed[1]["title"], ct=__import__("base64").b64encode(bytes(ct)).decode())
    with pytest.raises(DecryptionError):
        await decrypt_records([dict(recs[1], data={"sessionId": "s1", "title": flipped})], keys, suite)
    with pytest.raises(DecryptionError):  # plain content where ciphertext is due
        await decrypt_records([dict(recs[1], data={"sessionId": "s1", "title": "x"})], keys, suite)


async def test_known_vector_pins_the_format() -> None:
    """PBKDF2 + subkeys + check value + AAD layout as the protocol page states them (a third
    party's implementation can be checked against these numbers)."""
    import hashlib
    import hmac

    salt = bytes(range(16))
    master = hashlib.pbkdf2_hmac("sha256", b"pass", salt, 10_000, 32)
    check = hmac.new(master, b"chatmem-e2e-v1 check", hashlib.sha256).digest()
    params = KeyParams(
        "pbkdf2-sha256",
        __import__("base64").b64encode(salt).decode(),
        10_000,
        check[:8].hex(),
        __import__("base64").b64encode(check).decode(),
    )
    key = await derive_key(Passphrase("pass", iterations=10_000), params, CryptographySuite())
    assert key.enc == hmac.new(master, b"chatmem-e2e-v1 enc", hashlib.sha256).digest()
    assert associated_data("k", "o", "session", "s", "h", "title") == (
        b"chatmem-e2e-v1"
        + b"".join(len(p).to_bytes(4, "big") + p for p in (b"k", b"o", b"session", b"s", b"h", b"title"))
    )
    assert DEFAULT_ITERATIONS == 600_000


def test_secrets_stay_out_of_repr_dicts_and_the_store(tmp_path: Path) -> None:
    """The passphrase is never in repr or a config dict; remember keeps the derived key only."""
    cfg = SyncConfig(enabled=True, endpoint="http://127.0.0.1:1", api_key="k", encryption=pw(remember=True))
    for text in (repr(cfg), json.dumps(cfg.to_public_dict()), json.dumps(cfg.to_storage_dict())):
        assert PASS not in text
    assert cfg.to_public_dict()["encryption"] == {"kind": "passphrase", "remember": True, "locked": False}
    back = SyncConfig.from_dict(cfg.to_storage_dict())
    assert back.encryption is not None and back.encryption.is_locked
    with pytest.raises(ValidationError):
        SyncConfig(enabled=True, endpoint="http://127.0.0.1:1", api_key="k", encryption="plain")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        EncryptionKey(b"short")


# --------------------------------------------------------------------------- through the server


async def test_two_devices_read_each_other_and_the_server_sees_no_plaintext(srv: Any, tmp_path: Path) -> None:
    """A and B share a passphrase: B reads A's history, A reads B's reply; neither the
    server's database files nor any HTTP body contain the marker; health advertises e2e."""

    ta, tb = Capture(), Capture()
    a = await device(srv, pw(), transport=ta)
    sid = await history(a)
    fact = await a.facts.add(f"Keeps the word {MARKER}", key="secret", value=MARKER)
    await a.sync.run()
    b = await device(srv, pw(), transport=tb)
    await b.sync.run()
    assert [(f.fact_id, f.value) for f in await b.facts.list()] == [(fact.fact_id, MARKER)]
    got_b = await texts(b, sid)
    await b.messages.append(sid, "user", f"reply {MARKER}-b")
    await b.sync.run()
    await a.sync.run()
    caps = await a.sync._client.capabilities()  # type: ignore[union-attr]
    title = (await b.sessions.get(sid)).title
    got_a = await texts(a, sid)
    assert got_b == [f"my secret is {MARKER}", "noted"]
    assert got_a == [f"my secret is {MARKER}", "noted", f"reply {MARKER}-b"]
    assert title == f"renamed {MARKER}"
    assert "e2e-v1" in caps
    assert all(MARKER.encode() not in b for b in ta.bodies + tb.bodies)
    assert any(b'"e2e"' in b for b in ta.bodies)  # envelopes did travel
    assert MARKER.encode() not in stored_bytes(srv)


async def test_wrong_passphrase_is_typed_before_anything_is_sent_or_applied(srv: Any) -> None:
    """B with the wrong passphrase: WrongPassphrase from push and pull, status says so,
    its outbox is untouched and nothing of A's is applied; the right one then syncs all."""

    a = await device(srv, pw())
    sid = await history(a)
    await a.sync.run()
    tb = Capture()
    b = await device(srv, pw("wrong horse"), transport=tb)
    mine = await b.sessions.create(title="b's own")
    before = await b.store.outbox_list()
    for call in (b.sync.push, b.sync.pull, b.sync.run):
        with pytest.raises(WrongPassphrase) as e:
            await call()
        assert isinstance(e.value, SyncError)
    assert (await b.sync.status()).state == "wrong-passphrase"
    assert await b.store.outbox_list() == before
    assert [s.session_id for s in await b.sessions.list()] == [mine.session_id]
    assert "/v1/push" not in tb.calls and "/v1/changes" not in tb.calls
    cfg = b.sync.config
    assert cfg is not None
    await b.sync.configure(cfg.replace(encryption=pw()))
    await b.sync.run()
    assert (await b.sync.status()).state == "idle"
    assert await texts(b, sid) == [f"my secret is {MARKER}", "noted"]
    assert (await b.store.outbox_counts())[0] == 0


async def test_a_device_without_encryption_is_refused_and_keeps_its_ops(srv: Any) -> None:
    """An unencrypted device on an encrypted space: 409 -> WrongPassphrase, 'locked', no op lost."""

    a = await device(srv, pw())
    await history(a)
    await a.sync.run()
    old = await device(srv, None)
    await old.sessions.create(title=f"plain {MARKER}")
    with pytest.raises(WrongPassphrase):
        await old.sync.push()
    assert (await old.sync.status()).state == "locked"
    assert (await old.store.outbox_counts()) == (1, 0)
    with pytest.raises(WrongPassphrase):
        await old.sync.pull()
    assert MARKER.encode() not in stored_bytes(srv)


async def test_remember_keeps_the_derived_key_not_the_passphrase(srv: Any, tmp_path: Path) -> None:
    """After a restart a remembering device syncs with no passphrase; one that did not
    remember is 'locked'; the SQLite file never holds the passphrase."""
    keep, forget = str(tmp_path / "keep.db"), str(tmp_path / "forget.db")

    for path, remember in ((keep, True), (forget, False)):
        m = await device(srv, pw(remember=remember), persist=path)
        await history(m, MARKER + path[-7:-3])
        await m.sync.run()
        await m.close()
    states = []
    for path in (keep, forget):
        m = await chatmem.open(persist=path)
        m.sync.transport = Capture()
        await m.sessions.create(title="after restart")
        try:
            await m.sync.run()
        except WrongPassphrase:
            pass
        states.append((await m.sync.status()).state)
        assert json.dumps(await m.store.kv_get(CONFIG_KEY)).find(PASS) == -1
        await m.close()
    kept, forgot = states[0], states[1]
    assert (kept, forgot) == ("idle", "locked")
    for path in (keep, forget):
        assert PASS.encode() not in Path(path).read_bytes()
    raw = sqlite3.connect(keep).execute("SELECT value FROM kv WHERE key = 'sync.e2e.key'").fetchone()
    assert raw and "master" in raw[0]
    raw = sqlite3.connect(forget).execute("SELECT value FROM kv WHERE key = 'sync.e2e.key'").fetchone()
    assert raw is None or json.loads(raw[0]) is None


async def test_swapped_op_id_is_rejected_and_tampered_storage_fails_typed(srv: Any) -> None:
    """An envelope pushed under another op's op_id is rejected (dead letter, typed reason);
    a ciphertext or envelope altered on the server fails the pull with DecryptionError and
    applies nothing (the cursor stays); restored, the pull goes through."""

    a = await device(srv, pw())
    sid = await history(a)
    await a.sync.run()
    # swapped op_id: replay A's sealed message under a fresh op_id
    client = a.sync._client
    assert client is not None
    s2 = await a.sessions.create(title="second")
    (op,) = [o for o in await a.store.outbox_list() if o["resource"] == "session"]
    wire = await a.sync.keyring.seal([op])
    swapped = dict(wire[0], op_id="forged-op-1")
    resp = await client.push([swapped])
    assert resp.results[0].status == "rejected" and "another operation" in (resp.results[0].reason or "")
    await a.sync.push()
    assert s2.session_id
    # tamper the stored ciphertext of one message (through the storage: any database)
    space = srv.space(KEY)
    target, other = [
        r for r in srv.storage.changes(space, 0, 10**6) if r.resource == "message" and not r.deleted
    ][:2]

    def store_data(data: dict[str, Any]) -> None:
        with srv.storage.transaction(space) as txn:
            cur = txn.get("message", target.id)
            cur.data = data
            txn.put(cur)

    good = target.data["e2e"]["ct"]
    flipped = ("B" if good[0] == "A" else "A") + good[1:]
    store_data({**target.data, "e2e": {**target.data["e2e"], "ct": flipped}})
    b = await device(srv, pw())
    await b.sync.pull()  # the tampered message is quarantined alone; the rest applies
    st = await b.sync.status()
    assert st.state == "idle" and st.quarantined == 1 and st.quarantine_reasons == {"decryption": 1}
    (item,) = await b.sync.quarantined()
    assert item["id"] == target.id and item["kind"] == "decryption" and "authentication" in item["reason"]
    assert {s.title for s in await b.sessions.list()} == {
        "second",
        *[s.title for s in await a.sessions.list()],
    }
    assert len(await texts(b, sid)) == 1
    # another message's envelope under this message's id is quarantined the same way
    store_data({**other.data, "id": target.id})
    await b.sync.pull()
    assert [x["id"] for x in await b.sync.quarantined()] == [target.id]
    # mended on the server: tried again, it is applied and leaves the quarantine
    store_data(target.data)
    await b.sync.retry_quarantined()
    assert await texts(b, sid) == [f"my secret is {MARKER}", "noted"]
    assert (await b.sync.status()).quarantined == 0


async def test_turning_encryption_on_uploads_history_encrypted_and_drops_plain_copies(srv: Any) -> None:
    """A plain space with history: configuring a passphrase re-encrypts every record on the
    server (the plain copies are gone from the database files) and a new device reads it."""

    a = await device(srv, None)
    sid = await history(a)
    await a.facts.add(f"Keeps the word {MARKER}-fact")
    await a.sync.run()
    assert f"{MARKER}-fact".encode() in stored_bytes(srv)
    cfg = a.sync.config
    assert cfg is not None
    await a.sync.configure(cfg.replace(encryption=pw()))
    await a.messages.append(sid, "user", f"after {MARKER}")
    await a.sync.run()
    b = await device(srv, pw())
    await b.sync.run()
    assert await texts(b, sid) == [f"my secret is {MARKER}", "noted", f"after {MARKER}"]
    assert [f.text for f in await b.facts.list()] == [f"Keeps the word {MARKER}-fact"]
    assert MARKER.encode() not in stored_bytes(srv)


@pytest.mark.parametrize("lose", [1, 2], ids=["first-batch-answer-lost", "second-batch-answer-lost"])
async def test_interrupted_passphrase_change_resumes_and_rewrites_each_record_once(
    srv: Any, lose: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A passphrase change cut off after a rewrite was applied but not acknowledged:
    WrongPassphrase for the new passphrase and the old still works meanwhile; calling the
    change again finishes it; every record was rewritten exactly once; other devices then
    need the new passphrase and lose nothing."""
    monkeypatch.setattr(keyring, "REWRITE_BATCH", 3)

    t = Capture(lose=("/v1/e2e/rewrite", lose))
    a = await device(srv, pw(), transport=t)
    sids = [await history(a, f"{MARKER}-{i}") for i in range(3)]
    await a.sync.run()
    b = await device(srv, pw())
    await b.sync.run()
    with pytest.raises(SyncError):
        await a.sync.change_passphrase(pw("new passphrase"))
    # half-way: the old passphrase still opens the space; the new one does not yet
    c = await device(srv, pw("new passphrase"))
    with pytest.raises(WrongPassphrase):
        await c.sync.pull()
    # meanwhile B pushes as usual; its pull stops at the first re-encrypted record
    await b.messages.append(sids[0], "user", "while changing")
    with pytest.raises(WrongPassphrase, match="in progress"):
        await b.sync.run()
    assert (await b.store.outbox_counts())[0] == 0
    # a different new passphrase cannot start over the pending change
    with pytest.raises(WrongPassphrase):
        await a.sync.change_passphrase(pw("yet another"))
    await a.sync.change_passphrase(pw("new passphrase"))
    await a.sync.run()
    rewrites: dict[tuple[str, str], int] = {}
    for path, answer in t.answers:
        if path == "/v1/e2e/rewrite":
            for r in answer["results"]:
                if r["status"] == "rewritten":
                    rewrites[(r["resource"], r["id"])] = rewrites.get((r["resource"], r["id"]), 0) + 1
    live = [r for r in srv.storage.changes(srv.space(KEY), 0, 10**6) if not r.deleted]
    assert sorted(rewrites) == sorted((r.resource, r.id) for r in live if (r.resource, r.id) in rewrites)
    assert set(rewrites.values()) == {1}
    # B (old passphrase) is now refused, nothing of its outbox is lost
    await b.messages.append(sids[1], "user", "b after the change")
    with pytest.raises(WrongPassphrase):
        await b.sync.run()
    assert (await b.sync.status()).state == "wrong-passphrase"
    cfg = b.sync.config
    assert cfg is not None
    await b.sync.configure(cfg.replace(encryption=pw("new passphrase")))
    await b.sync.run()
    await c.sync.run()
    assert await texts(c, sids[0]) == [f"my secret is {MARKER}-0", "noted", "while changing"]
    assert await texts(c, sids[1]) == [f"my secret is {MARKER}-1", "noted", "b after the change"]


async def test_raw_key_and_concurrent_devices_converge(srv: Any) -> None:
    """EncryptionKey(32 bytes) works like a passphrase; per-field LWW by HLC still merges
    two devices' concurrent edits of one session although the server cannot read them."""
    raw = bytes(range(32))

    a = await device(srv, EncryptionKey(raw))
    sid = await history(a)
    await a.sync.run()
    b = await device(srv, EncryptionKey(raw))
    await b.sync.run()
    await a.sessions.update(sid, title="from a")
    await b.sessions.update(sid, pinned=True)
    await a.sync.run()
    await b.sync.run()
    await a.sync.run()
    sa, sb = await a.sessions.get(sid), await b.sessions.get(sid)
    assert (sa.title, sa.pinned) == (sb.title, sb.pinned) == ("from a", True)
    with pytest.raises(ValidationError):
        Passphrase("")


async def test_server_routes_answer_each_state_with_its_code(srv: Any) -> None:
    """/v1/e2e as a third-party client sees it: begin is idempotent and guarded, rewrite says
    rewritten / already / changed / gone / rejected, commit waits for the last record, and
    then plain content answers 409 e2e-required, another key 409 e2e-key-changed."""
    from chatmem.errors import SyncPermanentError

    suite = CryptographySuite()

    a = await device(srv, None)
    sid = await history(a)
    await a.sync.run()
    c = a.sync._client
    assert c is not None
    assert await c.call("GET", "/v1/e2e") == {"current": None, "pending": None}
    params, key = await new_params(pw(), suite)
    other, _ = await new_params(pw("other"), suite)
    body = {"params": params.to_dict(), "from": None}
    st = await c.call("POST", "/v1/e2e/begin", body=body)
    assert st["pending"]["key_id"] == key.key_id
    assert await c.call("POST", "/v1/e2e/begin", body=body) == st  # resume
    with pytest.raises(WrongPassphrase):  # 409 e2e-change-in-progress
        await c.call("POST", "/v1/e2e/begin", body={"params": other.to_dict(), "from": None})
    page = await c.call("GET", "/v1/e2e/pending", {"limit": "1000"})
    recs = page["records"]
    assert not page["more"] and {r["resource"] for r in recs} == {"session", "message"}
    sealed = await encrypt_records([dict(r, op_id="rk1") for r in recs], key, suite)
    rewrite = [dict(r, data=d) for r, d in zip(recs, sealed)]
    bad = dict(rewrite[0], data={"sessionId": sid})  # drops the session's fields
    stale = dict(rewrite[1], hlc="0000000000001-0000-x")
    res = await c.call(
        "POST",
        "/v1/e2e/rewrite",
        body={
            "key_id": key.key_id,
            "records": [bad, stale, {"resource": "message", "id": "nope", "hlc": "h", "data": {}}],
        },
    )
    assert [r["status"] for r in res["results"]] == ["rejected", "changed", "gone"]
    with pytest.raises(SyncPermanentError) as e:
        await c.call("POST", "/v1/e2e/commit", body={"key_id": key.key_id})
    assert e.value.status == 409 and "e2e-not-done" in (e.value.response or "")
    res = await c.call("POST", "/v1/e2e/rewrite", body={"key_id": key.key_id, "records": rewrite})
    assert {r["status"] for r in res["results"]} == {"rewritten"}
    res = await c.call("POST", "/v1/e2e/rewrite", body={"key_id": key.key_id, "records": rewrite})
    assert {r["status"] for r in res["results"]} == {"already"}
    st = await c.call("POST", "/v1/e2e/commit", body={"key_id": key.key_id})
    assert st == {"current": params.to_dict(), "pending": None}
    await a.sessions.update(sid, title=f"plain again {MARKER}")
    with pytest.raises(WrongPassphrase, match="e2e|encrypted"):
        await a.sync.push()
    assert (await a.store.outbox_counts()) == (1, 0)
    (op,) = await a.store.outbox_list()
    _, other_key = await new_params(pw("other"), suite)
    (data,) = await encrypt_records([op], other_key, suite)
    with pytest.raises(WrongPassphrase, match="key changed"):
        await c.push([dict(op, data=data)])
    assert MARKER.encode() not in stored_bytes(srv)


async def test_unlock_checks_the_passphrase_at_once_and_a_remembered_key_just_works(
    srv: Any, tmp_path: Path
) -> None:
    """A device whose encryption waits for the passphrase is not unlocked; unlock() with a
    wrong one raises WrongPassphrase at once and keeps nothing (still locked, nothing
    pulled); with the right one (remembered) sync goes on, and after a reopen the
    remembered key is enough: unlocked() with no passphrase entered."""

    a = await device(srv, pw())
    s = await a.sessions.create(title="written on a")
    await a.messages.append(s.session_id, "user", "kept secret")
    await a.sync.run()
    path = str(tmp_path / "b.db")
    b = await device(srv, Passphrase.locked(remember=True), persist=path)
    assert not await b.sync.unlocked()
    with pytest.raises(WrongPassphrase):
        await b.sync.unlock(pw("not it", remember=True))
    assert not await b.sync.unlocked() and (await b.sync.status()).state == "locked"
    assert await b.sessions.list() == []
    cfg = await b.sync.unlock(pw(remember=True))
    assert cfg.encryption is not None and not cfg.encryption.is_locked
    assert await b.sync.unlocked() and (await b.sync.status()).state == "idle"
    await b.sync.run()
    assert await texts(b, s.session_id) == ["kept secret"]
    await b.close()
    again = await chatmem.open(persist=path)
    again.sync.transport = Capture()
    assert await again.sync.unlocked()  # the stored config is locked; the remembered key opens it
    await a.messages.append(s.session_id, "assistant", "and a reply")
    await a.sync.run()
    await again.sync.run()
    assert await texts(again, s.session_id) == ["kept secret", "and a reply"]
    await again.close()
