"""Sync through the interface against the reference server (another loopback
origin, with CORS): the chip and the panel show pending, then synced; a
rejected key, being offline and auto-sync are shown as they are."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from app.conftest import AppPage, shot
from chatmem.server import running_server
from conftest import run, unique_name
from sync_checks import server_snapshot

KEY = "k"


@pytest.fixture
def ctx(browser: Any) -> Iterator[Any]:
    """Its own browser context: the sync server is a second origin (and it goes offline)."""
    c = browser.new_context()
    yield c
    c.close()


@pytest.fixture
def srv() -> Iterator[Any]:
    with running_server(api_keys=[KEY], db=":memory:") as s:
        yield s


def chip(app: AppPage) -> tuple[str, str]:
    c = app.page.locator("#sync-chip")
    return c.get_attribute("data-state") or "", app.page.locator("#sync-text").inner_text()


def wait_chip(app: AppPage, state: str, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    while chip(app)[0] != state:
        assert time.monotonic() < deadline, f"chip shows {chip(app)}, expected {state}"
        app.page.wait_for_timeout(50)
    return chip(app)[1]


def wait_error(page: Any, *words: str) -> None:
    """Wait until the panel's "Last error" names one of ``words``: the panel
    re-renders after the chip (both from the same status), so the chip alone
    does not say the panel has caught up."""
    page.wait_for_function(
        "words => words.some(w => (document.querySelector('#sync-error')?.textContent || '').includes(w))",
        arg=list(words),
        timeout=15_000,
    )


def settings(app: AppPage, endpoint: str, key: str, auto: bool = False, interval: int = 60) -> None:
    p = app.page
    p.click(".tools [data-panel=settings]")
    p.check("#set-sync-enabled")
    p.fill("#set-sync-endpoint", endpoint)
    p.fill("#set-sync-key", key)
    p.fill("#set-sync-interval", str(interval))
    p.set_checked("#set-sync-auto", auto)
    p.click("#settings-form button[type=submit]")
    p.wait_for_selector("#settings-saved:has-text('Saved')")


def sync_now(app: AppPage) -> None:
    p = app.page
    if p.locator("#panel:not([hidden]) #panel-title:text-is('Sync')").count() == 0:
        p.click("#sync-chip")
    p.wait_for_selector("#panel [data-action=sync-now]:not([disabled])")
    p.click("#panel [data-action=sync-now]")


def test_sync_status_shows_pending_then_synced(ctx: Any, site: str, srv: Any) -> None:
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    app = AppPage(page, site, unique_name("sync"))
    app.new_session()
    app.send("Remember the blue flowerpot")
    assert chip(app) == ("off", "Sync off")

    # sync on, by hand: the history waits as pending (the session and its two messages),
    # nothing claims "synced"
    settings(app, srv.url, "wrong-key")
    pending = int(wait_chip(app, "pending").split()[0])
    assert pending >= 3
    # a rejected key pauses sync and says so; nothing reached the server
    sync_now(app)
    assert wait_chip(app, "paused-auth") == "Sync key rejected"
    wait_error(page, "401", "key")
    assert server_snapshot(srv, KEY)["sessions"] == {}

    settings(app, srv.url, KEY)
    assert wait_chip(app, "pending") == f"{pending} to sync"
    sync_now(app)
    assert wait_chip(app, "synced") == "Synced"
    page.wait_for_selector("#sync-pending:text-is('0 changes')")
    assert page.locator("#sync-last").inner_text() != "never"
    snap = server_snapshot(srv, KEY)
    assert [s["title"] for s in snap["sessions"].values()] == ["Remember the blue flowerpot"]
    assert sorted(m[1] for m in snap["messages"].values())[1] == "Remember the blue flowerpot"

    # offline: the change waits, and the chip says so (not "failed")
    ctx.set_offline(True)
    page.click("[data-action=close-panel]")
    app.send("Written on the train")
    sync_now(app)
    assert wait_chip(app, "offline").startswith("Offline ·")
    assert page.locator("#sync-dead").inner_text() == "0"
    ctx.set_offline(False)
    sync_now(app)
    assert wait_chip(app, "synced") == "Synced"
    assert len(server_snapshot(srv, KEY)["messages"]) == 4

    # auto-sync: a new message goes out by itself within the interval
    settings(app, srv.url, KEY, auto=True, interval=5)
    page.click("[data-action=close-panel]")
    app.send("Sent without asking")
    wait_chip(app, "synced", timeout=20)
    deadline = time.monotonic() + 10
    while len(server_snapshot(srv, KEY)["messages"]) < 6:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert not app.errors, app.errors


def encrypted_settings(
    app: AppPage, endpoint: str, passphrase: str, remember: bool = False, accepted: bool = True
) -> None:
    p = app.page
    p.click(".tools [data-panel=settings]")
    p.check("#set-sync-enabled")
    p.fill("#set-sync-endpoint", endpoint)
    p.fill("#set-sync-key", KEY)
    p.set_checked("#set-sync-auto", False)
    p.check("#set-sync-encrypt")
    p.fill("#set-sync-passphrase", passphrase)
    p.set_checked("#set-sync-remember", remember)
    assert "cannot be read by anyone" in p.locator("#sync-e2e-warning").inner_text()
    p.click("#settings-form button[type=submit]")
    if accepted:
        p.wait_for_selector("#settings-saved:has-text('Saved')")
    else:  # refused at once, in place, and nothing says "Saved."
        p.wait_for_selector("#set-sync-passphrase-error:has-text('Not accepted')")
        assert "Saved" not in p.locator("#settings-saved").inner_text()


def test_encrypted_sync_from_the_settings(ctx: Any, site: str, tmp_path: Any) -> None:
    """Settings with a passphrase: the server's database never holds the message, a
    CPython device with the passphrase reads it, the page's store never holds the
    passphrase, and a second profile with a wrong one shows "Wrong passphrase"."""
    import chatmem
    from chatmem.server import SQLiteSyncStorage

    secret = "tulip-marmalade-5521"
    passphrase = "a long and honest passphrase"
    db = tmp_path / "server.db"
    with running_server(api_keys=[KEY], storage=SQLiteSyncStorage(str(db))) as srv:
        page = ctx.new_page()
        page.set_default_timeout(60_000)
        app = AppPage(page, site, unique_name("e2e"))
        app.new_session()
        app.send(f"Remember {secret}")
        encrypted_settings(app, srv.url, passphrase, remember=True)
        # the form lets go of the passphrase once saved; the store holds only the derived key
        assert page.locator("#set-sync-passphrase").input_value() == ""
        sync_now(app)
        assert wait_chip(app, "synced") == "Synced"
        stored = app.py(
            "import json, chatmem_app\nfrom chatmem.sync.keyring import KEY_KV\n"
            "mem = chatmem_app.app.mem\n"
            "json.dumps([await mem.store.kv_get(k) for k in ('sync.config', KEY_KV, 'app:settings')])"
        )
        assert passphrase not in stored and '"master"' in stored

        async def cpython() -> list[str]:
            mem = await chatmem.open()
            await mem.sync.configure(
                chatmem.SyncConfig(
                    enabled=True, endpoint=srv.url, api_key=KEY, encryption=chatmem.Passphrase(passphrase)
                )
            )
            await mem.sync.run()
            return [
                m.content for s in await mem.sessions.list() for m in await mem.messages.list(s.session_id)
            ]

        assert f"Remember {secret}" in run(cpython())
        assert secret.encode() not in db.read_bytes()

        # change the passphrase from the sync panel: the old one stops working
        page.fill("#sync-new-passphrase", "the second passphrase")
        page.click("#panel [data-action=change-passphrase]")
        page.wait_for_selector("text=Passphrase changed")
        assert page.locator("#sync-new-passphrase").input_value() == ""
        passphrase = "the second passphrase"
        assert f"Remember {secret}" in run(cpython())

        other = ctx.new_page()
        other.set_default_timeout(60_000)
        app2 = AppPage(other, site, unique_name("e2e-wrong"))
        encrypted_settings(app2, srv.url, "not the passphrase", accepted=False)
        assert wait_chip(app2, "locked") == "Unlock sync"
        assert not app.errors and not app2.errors, app.errors + app2.errors


def test_a_record_this_device_cannot_use_is_shown_and_tried_again(ctx: Any, site: str, srv: Any) -> None:
    """A record the server holds but this device cannot use (written past the server's
    checks, here a message with role 'evil') is quarantined: the chip says so, the panel
    counts it with its reason and lists it; mended on the server, "Try again" applies it."""
    from chatmem.server.storage import StoredRecord

    page = ctx.new_page()
    page.set_default_timeout(60_000)
    app = AppPage(page, site, unique_name("quarantine"))
    app.new_session()
    app.send("The first words")
    settings(app, srv.url, KEY)
    sync_now(app)
    assert wait_chip(app, "synced") == "Synced"
    sid = app.py("import chatmem_app\n(await chatmem_app.app.mem.sessions.list())[0].session_id")
    space = srv.space(KEY)
    record = {
        "id": "m-from-elsewhere",
        "sessionId": sid,
        "seq": 50,
        "role": "evil",
        "content": "a stranger",
        "createdAt": 1_700_000_000_000,
    }

    def store(data: dict[str, Any]) -> None:
        with srv.storage.transaction(space) as txn:
            txn.put(
                StoredRecord(
                    resource="message",
                    id=data["id"],
                    data=data,
                    deleted=False,
                    hlc="1700000000000-0000-elsewhere",
                    birth_hlc="1700000000000-0000-elsewhere",
                    session_id=sid,
                )
            )

    store(record)
    sync_now(app)
    assert wait_chip(app, "error") == "1 unreadable"
    page.wait_for_selector("#sync-quarantined:has-text('1 (1 not a valid record)')")
    assert "role" in page.locator("#sync-quarantine-list").inner_text()

    store(dict(record, role="assistant"))
    page.click("#panel [data-action=quarantine-retry]")
    page.wait_for_selector("text=1 of 1 could be read now.")
    assert wait_chip(app, "synced") == "Synced"
    texts = app.py(
        f"import chatmem_app\n[m.content for m in await chatmem_app.app.mem.messages.list({sid!r})]"
    )
    assert "a stranger" in texts
    assert not app.errors, app.errors


def test_locked_and_unlocked(browser: Any, site: str, tmp_path: Any) -> None:
    """After a reload a remembered key just works and other settings save; on a second
    device a wrong passphrase is refused in place (nothing says "Saved."), the chip says
    "Unlock sync" and opens one field that refuses a wrong passphrase in place and, with
    the right one, syncs: the first device's conversation appears."""
    from chatmem.server import SQLiteSyncStorage

    passphrase = "correct horse battery staple"
    with running_server(api_keys=[KEY], storage=SQLiteSyncStorage(str(tmp_path / "server.db"))) as srv:
        ctx1, ctx2 = browser.new_context(), browser.new_context()
        try:
            page = ctx1.new_page()
            page.set_default_timeout(60_000)
            app = AppPage(page, site, unique_name("unlock-a"))
            app.new_session()
            app.send("Remember the okapi")
            encrypted_settings(app, srv.url, passphrase, remember=True)
            sync_now(app)
            assert wait_chip(app, "synced") == "Synced"

            page.reload()
            app.ready()
            assert wait_chip(app, "synced") == "Synced"  # the remembered key: no passphrase asked
            page.click(".tools [data-panel=settings]")
            page.fill("#set-sync-interval", "30")
            page.click("#settings-form button[type=submit]")
            page.wait_for_selector("#settings-saved:has-text('Saved')")
            assert page.locator("#settings-errors").inner_text() == ""
            assert wait_chip(app, "synced") == "Synced"

            other = ctx2.new_page()
            other.set_default_timeout(60_000)
            app2 = AppPage(other, site, unique_name("unlock-b"))
            p = other
            p.click(".tools [data-panel=settings]")
            p.check("#set-sync-enabled")
            p.fill("#set-sync-endpoint", srv.url)
            p.fill("#set-sync-key", KEY)
            p.set_checked("#set-sync-auto", False)
            p.check("#set-sync-encrypt")
            p.fill("#set-sync-passphrase", "not the passphrase")
            p.click("#settings-form button[type=submit]")
            p.wait_for_selector("#set-sync-passphrase-error:has-text('Not accepted')")
            assert "Saved" not in p.locator("#settings-saved").inner_text()
            assert wait_chip(app2, "locked") == "Unlock sync"

            p.click("#sync-chip")
            p.wait_for_selector("#sync-unlock-passphrase")
            p.fill("#sync-unlock-passphrase", "still not it")
            p.click(".e2e-unlock button[type=submit]")
            p.wait_for_selector("#sync-unlock-error:has-text('not this sync space')")
            assert wait_chip(app2, "locked") == "Unlock sync"
            shot(p, "unlock-box")
            p.fill("#sync-unlock-passphrase", passphrase)
            p.click(".e2e-unlock button[type=submit]")
            p.wait_for_selector("text=Sync unlocked.")
            assert wait_chip(app2, "synced") == "Synced"
            app2.expect_titles(["Remember the okapi"])
            assert p.locator("#sync-unlock-passphrase").count() == 0
            assert not app.errors and not app2.errors, app.errors + app2.errors
        finally:
            ctx1.close()
            ctx2.close()
