"""Sync status — the chip in the sidebar and its panel — from ``mem.sync``:
pending changes, dead letters with replay/discard, records this device could
not use (quarantined) with "Try again" and "Forget", last sync, errors, and
"Sync now". The chip shows the engine's own state (idle, syncing, offline,
paused-auth, locked, wrong-passphrase, error) with the outbox counts; it never claims "synced" while
anything waits. Auto-sync itself is ``mem.sync``'s loop; the page only
re-reads the status every few seconds while sync is on.
"""

from __future__ import annotations

from typing import Any

from chatmem.errors import ChatmemError, WrongPassphrase

from . import dom
from .dom import h, q

__all__ = ["ACTIONS", "chip_text", "refresh_chip", "render", "start_polling", "sync_now"]

#: ms between status reads while sync is on (the drain runs in mem.sync's own loop)
POLL_MS = 2000


def _enabled(app: Any) -> bool:
    cfg = app.mem.sync.config
    return cfg is not None and cfg.enabled


def chip_text(st: Any, enabled: bool, busy: bool = False, locked: bool = False) -> tuple[str, str]:
    """(data-state, label) for the sidebar chip, from a ``SyncStatus``; ``locked``: this
    device has no key for its encrypted sync (``mem.sync.unlocked()`` is false)."""
    if not enabled:
        return "off", "Sync off"
    if busy or st.state == "syncing":
        return "syncing", "Syncing…"
    if locked or st.state == "locked":
        return "locked", "Unlock sync"
    if st.state == "offline":
        return "offline", f"Offline · {st.pending} waiting" if st.pending else "Offline"
    if st.state == "paused-auth":
        return "paused-auth", "Sync key rejected"
    if st.state == "wrong-passphrase":
        return "wrong-passphrase", "Wrong passphrase"
    if st.state == "error":
        return "error", "Sync error" + (f" · {st.pending} waiting" if st.pending else "")
    if st.dead_letters:
        return "error", f"{st.dead_letters} failed"
    if st.quarantined:
        return "error", f"{st.quarantined} unreadable"
    if st.pending:
        return "pending", f"{st.pending} to sync"
    if st.last_success is None:
        return "pending", "Not synced yet"
    return "synced", "Synced"


async def refresh_chip(app: Any, busy: bool = False) -> Any:
    st = await app.mem.sync.status()
    state, label = chip_text(st, _enabled(app), busy, not await app.mem.sync.unlocked())
    chip = q("#sync-chip")
    chip.setAttribute("data-state", state)
    chip.setAttribute("aria-label", f"Sync status: {label}")
    dom.mount(q("#sync-text"), label)
    seen = (st, _enabled(app))
    if app.panel == "sync" and not busy and seen != getattr(app, "sync_seen", None):
        await app.render_panel()  # only on a change: a re-render would take the keyboard focus away
    app.sync_seen = seen
    return st


def _when(ms: Any) -> str:
    return "never" if not ms else str(dom.js.Date.new(ms).toLocaleString())


async def render(app: Any, body: Any) -> None:
    st = await app.mem.sync.status()
    enabled = _enabled(app)
    _, label = chip_text(st, enabled, locked=not await app.mem.sync.unlocked())
    dead = await app.mem.sync.dead_letters()
    rows = []
    for d in dead[:50]:
        op_id = d.get("op_id")
        reason = str(d.get("reason") or "failed")
        rows.append(
            h(
                "li",
                {},
                h("span", {"class": "r"}, f"{d.get('type')} {d.get('resource')}"),
                h("span", {"class": "x", "title": reason}, reason),
                h(
                    "span",
                    {"class": "n"},
                    h(
                        "button",
                        {
                            "type": "button",
                            "class": "btn small",
                            "data-action": "dead-replay",
                            "data-op": op_id,
                        },
                        "Replay",
                    ),
                    h(
                        "button",
                        {
                            "type": "button",
                            "class": "btn small",
                            "data-action": "dead-discard",
                            "data-op": op_id,
                        },
                        "Discard",
                    ),
                ),
            )
        )
    cfg = app.mem.sync.config
    locked = (
        cfg is not None
        and cfg.encryption is not None
        and (st.state in ("locked", "wrong-passphrase") or not await app.mem.sync.unlocked())
    )
    kept = await app.mem.sync.quarantined()
    unreadable = [
        h(
            "li",
            {},
            h(
                "span",
                {"class": "r"},
                f"{x.get('resource') or 'record'} · {_KINDS.get(str(x.get('kind')), 'unusable')}",
            ),
            h("span", {"class": "x", "title": str(x.get("reason") or "")}, str(x.get("reason") or "")),
        )
        for x in kept[-50:]
    ]
    dom.append(
        body,
        _unlock_box(cfg, st) if locked else None,
        h(
            "dl",
            {"class": "kv"},
            h("dt", {}, "Status"),
            h("dd", {"id": "sync-state"}, label),
            h("dt", {}, "Server"),
            h("dd", {}, cfg.endpoint if cfg and cfg.endpoint else "none"),
            h("dt", {}, "Waiting to send"),
            h("dd", {"id": "sync-pending"}, f"{st.pending} changes"),
            h("dt", {}, "Failed for good"),
            h("dd", {"id": "sync-dead"}, f"{st.dead_letters}"),
            h("dt", {}, "Could not be read"),
            h("dd", {"id": "sync-quarantined"}, _reasons(st)),
            h("dt", {}, "Last sync"),
            h("dd", {"id": "sync-last"}, _when(st.last_success)),
            h("dt", {}, "Last error"),
            h("dd", {"id": "sync-error"}, str(st.last_error or "none")),
        ),
        h(
            "button",
            {"type": "button", "class": "btn small", "data-action": "sync-now", "disabled": not enabled},
            "Sync now",
        ),
        h(
            "button",
            {"type": "button", "class": "btn small ghost", "data-action": "panel", "data-panel": "settings"},
            "Sync settings…",
        ),
        None
        if enabled
        else h(
            "p",
            {"class": "note"},
            "Sync is off. Every change is kept in the outbox on this device and is sent "
            "once you turn sync on in Settings.",
        ),
        None if locked else _passphrase_box(cfg),
        h("h3", {}, "Failed changes"),
        h("ul", {"class": "ctx-list", "id": "sync-dead-list"}, rows)
        if rows
        else h("p", {"class": "note"}, "None."),
        h(
            "div",
            {"class": "row"},
            h(
                "button",
                {"type": "button", "class": "btn small", "data-action": "dead-replay", "data-op": "all"},
                "Replay all",
            ),
            h(
                "button",
                {
                    "type": "button",
                    "class": "btn small danger",
                    "data-action": "dead-discard",
                    "data-op": "all",
                },
                "Discard all",
            ),
        )
        if rows
        else None,
        h("h3", {}, "Records this device could not read"),
        h(
            "p",
            {"class": "note"},
            "Changes from other devices that could not be used here are kept aside, never applied, and "
            "never stop the rest from syncing. Try them again after entering the right passphrase, or once "
            "the device that wrote them is updated.",
        )
        if unreadable
        else None,
        h("ul", {"class": "ctx-list", "id": "sync-quarantine-list"}, unreadable)
        if unreadable
        else h("p", {"class": "note"}, "None."),
        h(
            "div",
            {"class": "row"},
            h(
                "button",
                {
                    "type": "button",
                    "class": "btn small",
                    "data-action": "quarantine-retry",
                    "disabled": not enabled,
                },
                "Try again",
            ),
            h(
                "button",
                {"type": "button", "class": "btn small danger", "data-action": "quarantine-clear"},
                "Forget them",
            ),
        )
        if unreadable
        else None,
    )


#: what each quarantine reason means, in the panel's words
_KINDS = {
    "decryption": "could not be decrypted",
    "invalid": "not a valid record",
    "unknown-type": "of a kind this version does not know",
    "clock-skew": "dated in the future",
    "malformed": "not a change",
}


def _reasons(st: Any) -> str:
    """ "0", or the count and its reasons: "2 (1 could not be decrypted, 1 not a valid record)"."""
    if not st.quarantined:
        return "0"
    parts = [f"{n} {_KINDS.get(kind, kind)}" for kind, n in sorted(st.quarantine_reasons.items())]
    return f"{st.quarantined} ({', '.join(parts)})" if parts else str(st.quarantined)


def _unlock_box(cfg: Any, st: Any) -> Any:
    """ "Unlock sync": the one field a device that needs the passphrase asks for, first in the panel."""
    wrong = st.state == "wrong-passphrase"
    return h(
        "form",
        {"class": "e2e-unlock", "data-action": "unlock-sync", "aria-labelledby": "sync-unlock-title"},
        h("h3", {"id": "sync-unlock-title"}, "Unlock sync"),
        h(
            "p",
            {"class": "note"},
            "The passphrase was changed on another device: enter the new one."
            if wrong
            else "Sync is end-to-end encrypted. Enter its passphrase on this device to send and receive changes. "
            "Your conversations here stay readable meanwhile.",
        ),
        h(
            "label",
            {"class": "field", "for": "sync-unlock-passphrase"},
            "Passphrase",
            h(
                "input",
                {
                    "id": "sync-unlock-passphrase",
                    "type": "password",
                    "autocomplete": "current-password",
                    "aria-describedby": "sync-unlock-error",
                },
            ),
        ),
        _check("sync-unlock-remember", "Remember on this device", bool(cfg.encryption.remember)),
        h("p", {"id": "sync-unlock-error", "class": "status-err", "role": "alert"}),
        h("button", {"type": "submit", "class": "btn small primary"}, "Unlock"),
    )


def _check(id_: str, label: str, checked: bool) -> Any:
    box = h("input", {"id": id_, "type": "checkbox"})
    box.checked = checked
    return h("label", {"class": "field check", "for": id_}, box, label)


async def _unlock(app: Any, el: Any, ev: Any) -> None:
    """Check the passphrase at once: refused in place when wrong; sync goes on when right."""
    import chatmem

    field = q("#sync-unlock-passphrase")
    typed, field.value = str(field.value), ""  # the field lets go of it at once
    error = q("#sync-unlock-error")
    if not typed:
        dom.mount(error, "Enter the passphrase first.")
        field.focus()
        return
    try:
        await app.mem.sync.unlock(
            chatmem.Passphrase(typed, remember=bool(q("#sync-unlock-remember").checked))
        )
    except WrongPassphrase:
        dom.mount(error, "That is not this sync space's passphrase. Nothing was changed; try again.")
        field.focus()
        return
    except ChatmemError as e:
        dom.mount(error, f"It cannot be checked right now ({e}). Try again when the server can be reached.")
        return
    app.settings["sync"]["has_passphrase"] = True
    app.toast("Sync unlocked.")
    await sync_now(app)
    await app.render_panel()


def _passphrase_box(cfg: Any) -> Any:
    """Change the end-to-end passphrase (shown only when sync is encrypted and unlocked)."""
    if cfg is None or cfg.encryption is None:
        return None
    return h(
        "div",
        {"class": "e2e-change"},
        h("h3", {}, "Change the passphrase"),
        h(
            "p",
            {"class": "note"},
            "Changing it re-encrypts everything on the server. Other devices then need the new one. "
            "If it is interrupted, enter the same new passphrase again: it goes on where it stopped.",
        ),
        h(
            "label",
            {"class": "field", "for": "sync-new-passphrase"},
            "New passphrase",
            h("input", {"id": "sync-new-passphrase", "type": "password", "autocomplete": "new-password"}),
        ),
        h(
            "button",
            {"type": "button", "class": "btn small", "data-action": "change-passphrase"},
            "Change passphrase",
        ),
    )


async def _change_passphrase(app: Any, el: Any, ev: Any) -> None:
    import chatmem

    box = q("#sync-new-passphrase")
    new, box.value = str(box.value), ""  # the field lets go of it at once
    cfg = app.mem.sync.config
    if not new or cfg is None or cfg.encryption is None:
        app.toast("Enter the new passphrase first.", error=True)
        return
    await refresh_chip(app, busy=True)
    try:
        await app.mem.sync.change_passphrase(chatmem.Passphrase(new, remember=cfg.encryption.remember))
    except ChatmemError as e:
        app.toast(f"The passphrase was not changed: {e}", error=True)
    else:
        app.toast("Passphrase changed: everything on the server is encrypted with the new one.")
    finally:
        await refresh_chip(app)


async def _quarantine_retry(app: Any, el: Any, ev: Any) -> None:
    """Pull the quarantined records again; say how many could now be used."""
    before = (await app.mem.sync.status()).quarantined
    await refresh_chip(app, busy=True)
    try:
        await app.mem.sync.retry_quarantined()
    except ChatmemError as e:
        app.toast(f"Could not try them again: {e}", error=True)
    else:
        left = (await app.mem.sync.status()).quarantined
        used = max(0, before - left)
        app.toast(
            f"{used} of {before} could be read now."
            if used
            else f"Still none of the {before} could be read.",
            error=not used,
        )
    finally:
        await refresh_chip(app)
    await app.refresh_sessions()


async def _quarantine_clear(app: Any, el: Any, ev: Any) -> None:
    n = await app.mem.sync.clear_quarantine()
    app.toast(f"{n} unreadable record{'s' if n != 1 else ''} forgotten.")
    await refresh_chip(app)


async def _dead(app: Any, el: Any, replay: bool) -> None:
    op = str(el.getAttribute("data-op"))
    n = await (app.mem.sync.replay(op) if replay else app.mem.sync.discard(op))
    app.toast(f"{n} change{'s' if n != 1 else ''} {'queued again' if replay else 'discarded'}.")
    await refresh_chip(app)


async def _replay(app: Any, el: Any, ev: Any) -> None:
    await _dead(app, el, True)


async def _discard(app: Any, el: Any, ev: Any) -> None:
    await _dead(app, el, False)


async def sync_now(app: Any) -> None:
    """Push then pull now (``mem.sync.run``); the chip shows "Syncing…" meanwhile."""
    if not _enabled(app):
        return
    await refresh_chip(app, busy=True)
    try:
        await app.mem.sync.run()
    except ChatmemError as e:
        app.toast(f"Sync failed: {e}", error=True)
    finally:
        await refresh_chip(app)
    await app.refresh_sessions()  # pulled changes


async def _sync_now(app: Any, el: Any, ev: Any) -> None:
    await sync_now(app)


def _poll(app: Any) -> None:
    def tick() -> None:
        app.run(_tick(app))

    dom.set_timeout(tick, POLL_MS)


async def _tick(app: Any) -> None:
    try:
        if _enabled(app):
            await refresh_chip(app)
    finally:
        _poll(app)


async def start_polling(app: Any) -> None:
    """Show the status now, then re-read it every ``POLL_MS`` while sync is on."""
    await refresh_chip(app)
    _poll(app)


ACTIONS = {
    "sync-now": _sync_now,
    "dead-replay": _replay,
    "dead-discard": _discard,
    "change-passphrase": _change_passphrase,
    "unlock-sync": _unlock,
    "quarantine-retry": _quarantine_retry,
    "quarantine-clear": _quarantine_clear,
}
