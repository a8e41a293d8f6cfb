"""Sync status (the chip in the sidebar and its panel): pending changes, dead
letters with replay/discard, last sync, errors; plus the page's background
jobs (periodic sync, hourly retention when turned on).

Uses ``mem.sync`` when this build has it. Without it, the outbox is still
real (every change queues its operation in the same transaction), so the
panel shows its true counts and says that nothing is being sent.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

from . import dom
from .dom import h, q

__all__ = ["refresh_chip", "render", "apply_sync_settings", "start_background", "status", "ACTIONS"]

HOUR_MS = 3_600_000


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def status(app: Any) -> dict[str, Any]:
    """A plain dict: state, pending, dead, last_success, last_error, available."""
    s = app.settings["sync"]
    if app.features["sync"]:
        st = await _maybe(app.mem.sync.status())
        get = (lambda k: st.get(k)) if isinstance(st, dict) else (lambda k: getattr(st, k, None))
        return {"state": get("state") or "idle", "pending": get("pending") or 0,
                "dead": get("dead_letters") or 0, "last_success": get("last_success"),
                "last_error": get("last_error"), "available": True, "enabled": s["enabled"]}
    pending, dead = await app.mem.store.outbox_counts()
    return {"state": "off", "pending": pending, "dead": dead, "last_success": None, "last_error": None,
            "available": False, "enabled": False}


def chip_text(st: dict[str, Any]) -> tuple[str, str]:
    """(data-state, label) for the sidebar chip."""
    if not st["available"] or not st["enabled"]:
        return "off", "Sync off"
    state = st["state"]
    if state == "syncing":
        return "syncing", "Syncing…"
    if state == "offline":
        return "pending", f"Offline · {st['pending']} waiting"
    if state in ("error", "paused-auth"):
        return state, "Sync error" if state == "error" else "Sync key rejected"
    if st["dead"]:
        return "error", f"{st['dead']} failed"
    if st["pending"]:
        return "pending", f"{st['pending']} to sync"
    return "synced", "Synced"


async def refresh_chip(app: Any) -> None:
    st = await status(app)
    state, label = chip_text(st)
    chip = q("#sync-chip")
    chip.setAttribute("data-state", state)
    chip.setAttribute("aria-label", f"Sync status: {label}")
    dom.mount(q("#sync-text"), label)
    if app.panel == "sync":
        await app.render_panel()


def _when(ms: Any) -> str:
    return "never" if not ms else str(dom.js.Date.new(ms).toLocaleString())


async def render(app: Any, body: Any) -> None:
    st = await status(app)
    _, label = chip_text(st)
    if st["available"]:
        dead = await _maybe(app.mem.sync.dead_letters())
    else:
        dead = await app.mem.store.dead_list()
    rows = []
    for d in dead[:50]:
        get = (lambda k: d.get(k)) if isinstance(d, dict) else (lambda k: getattr(d, k, None))
        op_id = get("op_id")
        rows.append(h("li", {},
                      h("span", {"class": "r"}, f"{get('type')} {get('resource')}"),
                      h("span", {"class": "x", "title": str(get("reason") or "")}, str(get("reason") or "failed")),
                      h("span", {"class": "n"},
                        h("button", {"type": "button", "class": "btn small", "data-action": "dead-replay",
                                     "data-op": op_id}, "Replay"),
                        h("button", {"type": "button", "class": "btn small", "data-action": "dead-discard",
                                     "data-op": op_id}, "Discard"))))
    dom.append(body,
               h("dl", {"class": "kv"},
                 h("dt", {}, "Status"), h("dd", {"id": "sync-state"}, label),
                 h("dt", {}, "Waiting to send"), h("dd", {"id": "sync-pending"}, f"{st['pending']} changes"),
                 h("dt", {}, "Failed for good"), h("dd", {"id": "sync-dead"}, f"{st['dead']}"),
                 h("dt", {}, "Last sync"), h("dd", {}, _when(st["last_success"])),
                 h("dt", {}, "Last error"), h("dd", {}, str(st["last_error"] or "none"))),
               h("button", {"type": "button", "class": "btn small", "data-action": "sync-now",
                            "disabled": not (st["available"] and st["enabled"])}, "Sync now"),
               h("button", {"type": "button", "class": "btn small ghost", "data-action": "panel",
                            "data-panel": "settings"}, "Sync settings…"),
               None if st["available"] else h("p", {"class": "note placeholder"},
                                               "This build has no sync client (mem.sync). Every change is recorded in "
                                               "the outbox on this device and will be sent once sync is available "
                                               "and turned on."),
               h("h3", {}, "Failed changes"),
               h("ul", {"class": "ctx-list"}, rows) if rows else h("p", {"class": "note"}, "None."),
               h("div", {"class": "row"},
                 h("button", {"type": "button", "class": "btn small", "data-action": "dead-replay", "data-op": "*"},
                   "Replay all"),
                 h("button", {"type": "button", "class": "btn small danger", "data-action": "dead-discard",
                              "data-op": "*"}, "Discard all")) if rows else None)


async def _dead(app: Any, el: Any, replay: bool) -> None:
    op = str(el.getAttribute("data-op"))
    if app.features["sync"]:
        fn = app.mem.sync.replay if replay else app.mem.sync.discard
        await _maybe(fn("all" if op == "*" else op))
    else:
        ids = None if op == "*" else [op]
        await (app.mem.store.dead_replay(ids) if replay else app.mem.store.dead_discard(ids))
    await refresh_chip(app)
    if app.panel == "sync":
        await app.render_panel()


async def _replay(app: Any, el: Any, ev: Any) -> None:
    await _dead(app, el, True)


async def _discard(app: Any, el: Any, ev: Any) -> None:
    await _dead(app, el, False)


async def sync_now(app: Any) -> None:
    if app.features["sync"] and app.settings["sync"]["enabled"]:
        chip = q("#sync-chip")
        chip.setAttribute("data-state", "syncing")
        dom.mount(q("#sync-text"), "Syncing…")
        try:
            await _maybe(app.mem.sync.run())
        finally:
            await refresh_chip(app)


async def _sync_now(app: Any, el: Any, ev: Any) -> None:
    await sync_now(app)


async def apply_sync_settings(app: Any) -> None:
    """Hand the sync settings to ``mem.sync`` (when present) and restart the timer."""
    s = app.settings["sync"]
    if app.features["sync"]:
        from chatmem.sync.config import SyncConfig

        await _maybe(app.mem.sync.configure(SyncConfig(enabled=s["enabled"], endpoint=s["endpoint"],
                                                       api_key=s["api_key"], auto_sync=s["enabled"],
                                                       sync_interval=s["interval_s"] * 1000)))
    _schedule_sync(app)
    await refresh_chip(app)


def _schedule_sync(app: Any) -> None:
    if getattr(app, "_sync_loop", None) is not None:
        dom.clear_timeout(app._sync_loop)
        app._sync_loop = None
    s = app.settings["sync"]
    if not (app.features["sync"] and s["enabled"]):
        return

    def tick() -> None:
        app._sync_loop = None
        app.run(_tick(app))

    app._sync_loop = dom.set_timeout(tick, s["interval_s"] * 1000)


async def _tick(app: Any) -> None:
    try:
        await sync_now(app)
    finally:
        _schedule_sync(app)


async def _retention_tick(app: Any) -> None:
    from .settings_panel import apply_retention

    ret = app.settings["retention"]
    last = await app.mem.store.kv_get("app:retention-last") or 0
    now = int(time.time() * 1000)
    if ret["auto"] and now - last >= HOUR_MS:
        archived, deleted = await apply_retention(app, ret)
        await app.mem.store.kv_set("app:retention-last", now)
        if archived or deleted:
            await app.refresh_sessions()
    dom.set_timeout(lambda: app.run(_retention_tick(app)), HOUR_MS)


async def start_background(app: Any) -> None:
    await apply_sync_settings(app)
    await _retention_tick(app)


ACTIONS = {"sync-now": _sync_now, "dead-replay": _replay, "dead-discard": _discard}
