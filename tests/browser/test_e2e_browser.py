"""End-to-end encrypted sync between the page (WebCrypto through the bridge) and
CPython (the ``cryptography`` package), through the reference server: each reads
the other's changes, the server's database and every pushed body hold no
plaintext, a wrong passphrase in the page is typed and applies nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import chatmem
from chatmem.sync import SyncConfig
from chatmem.sync.encryption import Passphrase
from conftest import Page, run, unique_name
from e2e_server import STORAGES, e2e_server, stored_bytes

pytestmark = pytest.mark.browser

KEY = "browser-e2e-Key-3"
MARKER = "okapi-nebula-4417"
PASS = "page and python agree"


@pytest.fixture(params=STORAGES)
def srv(request: Any, tmp_path: Path) -> Iterator[Any]:
    with e2e_server(request, tmp_path, [KEY]) as s:
        yield s


def page_device(srv: Any, db: str, passphrase: str) -> str:
    return f"""
import chatmem
from chatmem.sync import SyncConfig
from chatmem.sync.encryption import Passphrase
mem = await chatmem.open({db!r})
await mem.sync.configure(SyncConfig(enabled=True, endpoint={srv.url!r}, api_key={KEY!r},
    backoff_base=20, backoff_max=200, encryption=Passphrase({passphrase!r}, iterations=10_000)))
"""


def test_page_and_cpython_read_each_others_encrypted_changes(page: Page, srv: Any) -> None:
    """Page writes and pushes; CPython pulls and reads it, replies; the page pulls the
    reply. Nothing the server stored or received contains the marker."""
    db = unique_name("e2e")
    sid = page.py(
        page_device(srv, db, PASS)
        + f"""
s = await mem.sessions.create(title="page {MARKER}")
await mem.messages.append(s.session_id, "user", "from the page {MARKER} ünï ✓")
await mem.sync.pull()  # sets the space's key up
report = await mem.sync.push()  # right after: the tab takes its own Web Lock again
assert report.drained and report.acknowledged == 2, report
st = await mem.sync.status()
assert st.state == "idle" and st.pending == 0, st
s.session_id
"""
    )

    async def cpython() -> tuple[list[str], str]:
        mem = await chatmem.open()
        await mem.sync.configure(
            SyncConfig(
                enabled=True, endpoint=srv.url, api_key=KEY, encryption=Passphrase(PASS, iterations=10_000)
            )
        )
        await mem.sync.run()
        got = [m.content for m in await mem.messages.list(sid)]
        title = (await mem.sessions.get(sid)).title
        await mem.messages.append(sid, "assistant", f"from python {MARKER}")
        await mem.sync.run()
        return got, title

    got, title = run(cpython())
    assert got == [f"from the page {MARKER} ünï ✓"] and title == f"page {MARKER}"
    back = page.py(
        page_device(srv, db, PASS)
        + f"""
await mem.sync.run()
[m.content for m in await mem.messages.list({sid!r})]
"""
    )
    assert back == [f"from the page {MARKER} ünï ✓", f"from python {MARKER}"]
    assert srv.pushed and all(MARKER not in body for body in srv.pushed)
    assert MARKER.encode() not in stored_bytes(srv)


def test_facts_travel_encrypted_between_the_page_and_cpython(page: Page, srv: Any) -> None:
    """The page learns a fact and is told one; CPython reads both, deletes one, pins the
    other; the page (IndexedDB) follows, also after a reload. The server holds no fact's
    text."""
    db = unique_name("e2efacts")
    page.py(
        page_device(srv, db, PASS)
        + f"""
s = await mem.sessions.create()
await mem.messages.append(s.session_id, "user", "I live in Tromsø.")
await mem.facts.extract()
await mem.facts.add("Keeps the word {MARKER}", key="secret", value="{MARKER}")
await mem.sync.run()
st = await mem.sync.status()
assert st.pending == 0, st
"""
    )

    async def cpython() -> list[tuple[str, str]]:
        mem = await chatmem.open()
        await mem.sync.configure(
            SyncConfig(
                enabled=True, endpoint=srv.url, api_key=KEY, encryption=Passphrase(PASS, iterations=10_000)
            )
        )
        await mem.sync.run()
        got = sorted((f.key, f.value) for f in await mem.facts.list())
        (home,) = await mem.facts.list(key="home")
        (secret,) = await mem.facts.list(key="secret")
        await mem.facts.delete(home.fact_id)
        await mem.facts.update(secret.fact_id, pinned=True)
        await mem.sync.run()
        await mem.close()
        return got

    assert run(cpython()) == [("home", "Tromsø"), ("secret", MARKER)]
    listing = """
await mem.sync.run()
[(f.key, f.pinned) for f in await mem.facts.list(status=None)]
"""
    assert page.py(page_device(srv, db, PASS) + listing) == [["secret", True]]
    page.reload()
    assert page.py(
        f"import chatmem\nmem = await chatmem.open({db!r})\n" + listing.replace("await mem.sync.run()", "")
    ) == [["secret", True]]
    assert srv.pushed and all(MARKER not in body for body in srv.pushed)
    assert MARKER.encode() not in stored_bytes(srv)
    assert "Tromsø".encode() not in stored_bytes(srv)


def test_wrong_passphrase_in_the_page_is_typed_and_applies_nothing(page: Page, srv: Any) -> None:
    """A CPython device encrypts the space; the page with another passphrase gets
    WrongPassphrase from run(), status 'wrong-passphrase', keeps its outbox, applies nothing."""

    async def cpython() -> None:
        mem = await chatmem.open()
        await mem.sync.configure(
            SyncConfig(
                enabled=True, endpoint=srv.url, api_key=KEY, encryption=Passphrase(PASS, iterations=10_000)
            )
        )
        s = await mem.sessions.create(title=f"cpython {MARKER}")
        await mem.messages.append(s.session_id, "user", MARKER)
        await mem.sync.run()

    run(cpython())
    db = unique_name("e2e-wrong")
    out = page.py(
        page_device(srv, db, "not the passphrase")
        + """
from chatmem.errors import WrongPassphrase
await mem.sessions.create(title="mine")
try:
    await mem.sync.run()
    err = None
except WrongPassphrase as e:
    err = type(e).__name__
st = await mem.sync.status()
[err, st.state, st.pending, len(await mem.sessions.list())]
"""
    )
    assert out == ["WrongPassphrase", "wrong-passphrase", 1, 1]


def test_a_tampered_record_is_quarantined_alone_in_the_page(page: Page, srv: Any) -> None:
    """One message's ciphertext altered on the server: the page applies the rest of the
    page (the session, the other message), moves its cursor, counts the message as
    quarantined for decryption; mended on the server, retry_quarantined applies it."""

    async def cpython() -> str:
        mem = await chatmem.open()
        await mem.sync.configure(
            SyncConfig(
                enabled=True, endpoint=srv.url, api_key=KEY, encryption=Passphrase(PASS, iterations=10_000)
            )
        )
        s = await mem.sessions.create(title="shared")
        await mem.messages.append(s.session_id, "user", f"first {MARKER}")
        await mem.messages.append(s.session_id, "assistant", "second")
        await mem.sync.run()
        return s.session_id

    sid = run(cpython())
    space = srv.space(KEY)
    target = next(
        r for r in srv.storage.changes(space, 0, 10**6) if r.resource == "message" and not r.deleted
    )
    good = dict(target.data)

    def store_data(data: dict[str, Any]) -> None:
        with srv.storage.transaction(space) as txn:
            cur = txn.get("message", target.id)
            cur.data = data
            txn.put(cur)

    ct = good["e2e"]["ct"]
    store_data({**good, "e2e": {**good["e2e"], "ct": ("B" if ct[0] == "A" else "A") + ct[1:]}})
    db = unique_name("e2e-quarantine")
    out = page.py(
        page_device(srv, db, PASS)
        + f"""
report = await mem.sync.pull()
st = await mem.sync.status()
items = await mem.sync.quarantined()
[report.state, st.quarantined, st.quarantine_reasons, [x["id"] for x in items],
 len(await mem.messages.list({sid!r})), (await mem.sessions.get({sid!r})).title]
"""
    )
    assert out == ["idle", 1, {"decryption": 1}, [target.id], 1, "shared"]
    store_data(good)
    out = page.py(
        page_device(srv, db, PASS)
        + f"""
await mem.sync.retry_quarantined()
[(await mem.sync.status()).quarantined, len(await mem.messages.list({sid!r}))]
"""
    )
    assert out == [0, 2]
