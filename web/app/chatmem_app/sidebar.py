"""The session sidebar: newest first, pinned on top, active/archived views,
tag filter; opening, creating and (undoable) deleting sessions."""

from __future__ import annotations

import time
from typing import Any

from . import dom, search
from .dom import h, q

__all__ = ["ACTIONS", "relative_time", "render", "visible_sessions"]


def relative_time(ms: int, now_ms: int | None = None) -> str:
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    d = max(0, now_ms - ms) // 1000
    if d < 60:
        return "just now"
    if d < 3600:
        return f"{d // 60} min ago"
    if d < 86400:
        return f"{d // 3600} h ago"
    if d < 2 * 86400:
        return "yesterday"
    if d < 7 * 86400:
        return f"{d // 86400} days ago"
    return str(dom.js.Date.new(ms).toLocaleDateString())


def visible_sessions(app: Any) -> list[Any]:
    """The sessions the sidebar shows, in the store's order (pinned first, newest first)."""
    return [
        s
        for s in app.sessions
        if s.archived == app.view_archived
        and s.session_id not in app.pending_deletes
        and (not app.tag_filter or app.tag_filter in s.tags)
    ]


def _row(app: Any, s: Any) -> Any:
    meta = [relative_time(s.updated_at), f"{s.message_count} message{'s' if s.message_count != 1 else ''}"]
    return h(
        "li",
        {},
        h(
            "button",
            {
                "type": "button",
                "class": "session",
                "data-action": "open",
                "data-id": s.session_id,
                "aria-current": "true" if s.session_id == app.current else None,
            },
            h(
                "span",
                {"class": "t"},
                dom.svg(
                    "svg",
                    {"class": "pin-icon", "viewBox": "0 0 16 16", "role": "img", "aria-label": "pinned"},
                    dom.svg("path", {"d": "M5 1h6l-1 5 3 3H9l-1 6-1-6H3l3-3z"}),
                )
                if s.pinned
                else None,
                h("span", {"class": "title"}, s.title or "Untitled"),
            ),
            h(
                "span",
                {"class": "meta"},
                " · ".join(meta),
                [h("span", {"class": "tag static"}, t) for t in s.tags],
            ),
        ),
    )


def render(app: Any) -> None:
    # tag filter options: every tag in use
    tags = sorted({t for s in app.sessions if s.session_id not in app.pending_deletes for t in s.tags})
    if app.tag_filter and app.tag_filter not in tags:
        app.tag_filter = ""
    dom.mount(
        q("#tag-filter"),
        h("option", {"value": ""}, "All tags"),
        [h("option", {"value": t, "selected": t == app.tag_filter}, t) for t in tags],
    )
    q("#tag-filter").value = app.tag_filter
    q("#view-active").setAttribute("aria-pressed", "false" if app.view_archived else "true")
    q("#view-archived").setAttribute("aria-pressed", "true" if app.view_archived else "false")
    shown = visible_sessions(app)
    pinned = [s for s in shown if s.pinned]
    rest = [s for s in shown if not s.pinned]
    parts: list[Any] = []
    if not shown:
        what = "archived conversations" if app.view_archived else "conversations"
        parts.append(
            h(
                "p",
                {"class": "empty"},
                f"No {what}{' tagged ' + app.tag_filter if app.tag_filter else ''} yet.",
            )
        )
    if pinned:
        parts += [h("h2", {"class": "group-label"}, "Pinned"), h("ul", {}, [_row(app, s) for s in pinned])]
    if rest:
        if pinned:
            parts.append(h("h2", {"class": "group-label"}, "Recent"))
        parts.append(h("ul", {}, [_row(app, s) for s in rest]))
    dom.mount(q("#session-list"), parts)
    search.render_characters(app)


async def _open(app: Any, el: Any, ev: Any) -> None:
    msg = el.getAttribute("data-message")
    await app.open_session(str(el.getAttribute("data-id")), focus_message=None if dom.nil(msg) else str(msg))


async def _new(app: Any, el: Any, ev: Any) -> None:
    s = await app.mem.sessions.create()
    app.view_archived = False
    await app.refresh_sessions()
    await app.open_session(s.session_id)
    q("#composer-input").focus()


async def _view(app: Any, archived: bool) -> None:
    app.view_archived = archived
    render(app)


async def _view_active(app: Any, el: Any, ev: Any) -> None:
    await _view(app, False)


async def _view_archived(app: Any, el: Any, ev: Any) -> None:
    await _view(app, True)


async def _tag_filter(app: Any, el: Any, ev: Any) -> None:
    app.tag_filter = str(el.value)
    render(app)


async def _delete(app: Any, el: Any, ev: Any) -> None:
    """Hide the session now; delete it for good when the undo window closes."""
    sid = app.current
    meta = app.current_meta()
    if not sid or meta is None:
        return

    def commit() -> None:
        if app.pending_deletes.pop(sid, None) is not None:
            app.run(_really_delete(app, sid))

    app.pending_deletes[sid] = dom.set_timeout(commit, app.undo_ms)
    app.toast(
        f"Deleted “{meta.title}”. Ctrl+Z or Undo brings it back.",
        action="undo-delete",
        label="Undo",
        data={"id": sid},
        ms=app.undo_ms,
    )
    nxt = next((s.session_id for s in visible_sessions(app)), None)
    await app.open_session(nxt)
    # the keyboard stays in the list: on the conversation now open, or the list itself
    target = q(f'#session-list .session[data-id="{nxt}"]') if nxt else None
    (target or q("#new-session")).focus()


def undo_last_delete(app: Any) -> bool:
    """Undo the newest delete still in its undo window (Ctrl+Z / Cmd+Z); whether there was one."""
    if not app.pending_deletes:
        return False
    sid = list(app.pending_deletes)[-1]
    button = q(f'#toasts [data-action="undo-delete"][data-id="{sid}"]')
    if button is not None:
        button.click()
        return True
    return False


async def _really_delete(app: Any, sid: str) -> None:
    await app.mem.sessions.delete(sid)
    await app.refresh_sessions()


async def _undo_delete(app: Any, el: Any, ev: Any) -> None:
    sid = str(el.getAttribute("data-id"))
    handle = app.pending_deletes.pop(sid, None)
    if handle is None:
        return
    dom.clear_timeout(handle)
    toast = dom.closest(el, ".toast")
    if toast:
        toast.remove()
    await app.refresh_sessions()
    await app.open_session(sid)
    app.toast("Restored.")


ACTIONS = {
    "open": _open,
    "new-session": _new,
    "view-active": _view_active,
    "view-archived": _view_archived,
    "tag-filter": _tag_filter,
    "delete-session": _delete,
    "undo-delete": _undo_delete,
}
