"""The app controller: state, event dispatch, toasts and panels.

Screens and panels are modules (``sidebar``, ``conversation``, ``search``,
``context_panel``, ``settings_panel``, ``data_panel``, ``sync_panel``,
``insights``); each exposes ``ACTIONS`` (``data-action`` / ``data-change`` /
``data-key`` name -> ``async handler(app, el, ev)``) and render functions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from chatmem.errors import SessionNotFound
from chatmem.memory import CHANGED_ELSEWHERE

from . import (
    background,
    context_panel,
    conversation,
    data_panel,
    dom,
    insights,
    learn_import,
    memory_panel,
    search,
    settings,
    settings_apply,
    settings_panel,
    sidebar,
    sync_panel,
)
from .dom import h, js, q

__all__ = ["App"]

Handler = Callable[[Any, Any, Any], Awaitable[Any]]

#: ``mem.on_change`` kinds of what arrives from elsewhere: a pull, another tab or process
ARRIVALS = frozenset({"session-synced", CHANGED_ELSEWHERE})

PANELS: dict[str, tuple[str, Any]] = {
    "context": ("Context", context_panel),
    "settings": ("Settings", settings_panel),
    "data": ("Your data", data_panel),
    "sync": ("Sync", sync_panel),
    "insights": ("Insights", insights),
    "memory": ("What I know about you", memory_panel),
}


class App:
    #: ms a deleted session can be restored before it is deleted for good
    #: how long a deleted conversation can be brought back (Undo, Ctrl+Z)
    undo_ms = 12_000

    def __init__(self, mem: Any, prefs: dict[str, Any]):
        self.mem = mem
        self.settings = prefs
        settings_apply.apply_memory(mem, prefs)
        self.current: str | None = None
        self.view_archived = False
        self.tag_filter = ""
        self.sessions: list[Any] = []
        self.panel: str | None = None
        self.pending_deletes: dict[str, int] = {}
        #: conversation id -> the task streaming its reply (Stop cancels it)
        self.streaming: dict[str, asyncio.Task[Any]] = {}
        self.actions: dict[str, Handler] = {}
        self.keys: dict[str, Callable[[Any, Any, Any], None]] = {}
        for mod in (
            sidebar,
            conversation,
            search,
            context_panel,
            memory_panel,
            learn_import,
            settings_panel,
            data_panel,
            sync_panel,
            insights,
        ):
            self.actions.update(getattr(mod, "ACTIONS", {}))
            self.keys.update(getattr(mod, "KEYS", {}))
        self.actions.update(
            {
                "panel": _open_panel,
                "close-panel": _close_panel,
                "toggle-sidebar": _toggle_sidebar,
                "apply-update": _apply_update,
                "reload-page": _reload_page,
            }
        )
        self._sync_timer: int | None = None
        #: sessions changed elsewhere, not yet shown ("" stands for any); and the timer that shows them
        self._arrived: set[str] = set()
        self._arrival_timer: int | None = None
        self._recount_timer: int | None = None
        self._panel_gen = 0
        self.datetime_provider: Any = None
        #: learning about the person from the last import (offered, running, done...)
        self.learning: learn_import.Learning | None = None
        context_panel.share_datetime(self)

    @property
    def busy(self) -> bool:
        """A reply streams somewhere (what arrives from elsewhere is shown after it)."""
        return bool(self.streaming)

    # ------------------------------------------------------------------ events
    def bind(self) -> None:
        root = q("#app")
        dom.on(root, "click", lambda ev: self._dispatch(ev, "data-action", click=True))
        dom.on(root, "submit", lambda ev: self._dispatch(ev, "data-action"))
        dom.on(root, "change", lambda ev: self._dispatch(ev, "data-change"))
        dom.on(root, "keydown", self._keydown)
        dom.on(root, "input", self._input)
        dom.on(root, "dragover", self._drag)
        dom.on(root, "dragleave", self._drag)
        dom.on(root, "drop", lambda ev: self._dispatch(ev, "data-drop"))
        dom.on(q("#toasts"), "click", lambda ev: self._dispatch(ev, "data-action", click=True))
        self.mem.on_change(self._on_change)
        dom.on(
            js.window,
            "chatmem:update-ready",
            lambda ev: self.toast(
                "A new version of chatmem is ready.", action="apply-update", label="Reload", ms=60_000
            ),
        )
        dom.on(js.window, "chatmem:versionchange", self._version_changed)

    def _version_changed(self, ev: Any) -> None:
        """Another tab upgraded the database: this tab's connection is closed; say so and offer a reload."""
        if dom.nil(ev.detail) or str(ev.detail.name) != self.mem.name or q("#reload-notice"):
            return
        notice = h(
            "div",
            {"id": "reload-notice", "class": "reload-notice", "role": "alert"},
            h(
                "p",
                {},
                h("strong", {}, "chatmem was updated in another tab. "),
                "This tab can no longer read or save your conversations. Reload it to continue.",
            ),
            h("button", {"type": "button", "class": "btn primary", "data-action": "reload-page"}, "Reload"),
        )
        js.document.body.prepend(notice)
        dom.on(notice, "click", lambda e: self._dispatch(e, "data-action", click=True))
        q("#composer-input").disabled = True
        q("#send-btn").disabled = True
        q("button", notice).focus()

    def _dispatch(self, ev: Any, attr: str, click: bool = False) -> None:
        el = dom.closest(ev.target, f"[{attr}]")
        if el is None:
            return
        if click and el.tagName == "FORM":
            return  # clicks inside a form: its submit is the action
        name = str(el.getAttribute(attr))
        fn = self.actions.get(name)
        if fn is None:
            return
        if ev.type in ("submit", "drop") or (click and el.tagName in ("A", "BUTTON")):
            ev.preventDefault()
        self.run(fn(self, el, ev))

    def _keydown(self, ev: Any) -> None:
        # data-key handlers are synchronous: they must be able to preventDefault
        el = dom.closest(ev.target, "[data-key]")
        if el is not None:
            fn = self.keys.get(str(el.getAttribute("data-key")))
            if fn is not None:
                fn(self, el, ev)
        if ev.defaultPrevented:
            return
        if (
            str(ev.key).lower() == "z"
            and (ev.ctrlKey or ev.metaKey)
            and not ev.shiftKey
            and str(ev.target.tagName) not in ("INPUT", "TEXTAREA")
            and sidebar.undo_last_delete(self)
        ):
            ev.preventDefault()
            return
        if ev.key == "Escape":
            if self.panel:
                self.run(_close_panel(self, None, ev))
                return
            if conversation.stop(self):
                return
            if "sidebar-open" in str(q("#app").className):
                q("#app").classList.remove("sidebar-open")

    def _input(self, ev: Any) -> None:
        t = ev.target
        if t.id == "composer-input":
            t.style.height = "auto"
            t.style.height = f"{min(int(t.scrollHeight) + 2, 192)}px"

    def _drag(self, ev: Any) -> None:
        zone = dom.closest(ev.target, ".drop-zone")
        if zone is None:
            return
        ev.preventDefault()
        if ev.type == "dragover":
            zone.classList.add("over")
        else:
            zone.classList.remove("over")

    def run(self, coro: Awaitable[Any]) -> Any:
        return dom.spawn(coro, on_error=lambda e: self.toast(f"Something went wrong: {e}", error=True))

    # ------------------------------------------------------------------ toasts
    def toast(
        self,
        text: str,
        *,
        action: str | None = None,
        label: str | None = None,
        data: dict[str, str] | None = None,
        error: bool = False,
        ms: int = 5000,
    ) -> Any:
        attrs = {f"data-{k}": v for k, v in (data or {}).items()}
        btn = (
            h("button", {"type": "button", "class": "btn small", "data-action": action, **attrs}, label)
            if action
            else None
        )
        el = h("div", {"class": "toast error" if error else "toast"}, h("span", {}, text), btn)
        q("#toasts").appendChild(el)
        dom.set_timeout(lambda: el.remove(), ms)
        return el

    # ------------------------------------------------------------------ state changes
    async def refresh_sessions(self) -> None:
        self.sessions = await self.mem.sessions.list(limit=None, archived=None)
        sidebar.render(self)

    async def open_session(self, session_id: str | None, *, focus_message: str | None = None) -> None:
        self.current = session_id
        if session_id is not None and session_id != await self.mem.sessions.active():
            try:
                await self.mem.sessions.set_active(session_id)  # reopened after a reload
            except SessionNotFound:
                pass
        q("#app").classList.remove("sidebar-open")
        sidebar.render(self)
        conversation.composer_state(self)
        await conversation.render(self)
        if focus_message:
            conversation.jump_to(focus_message)
        if self.panel == "context":
            await self.render_panel()

    def current_meta(self) -> Any:
        return next((s for s in self.sessions if s.session_id == self.current), None)

    async def render_panel(self) -> None:
        """Draw the open panel off-screen, then swap it in (the newest of overlapping renders wins)."""
        if not self.panel:
            return
        self._panel_gen += 1
        gen, name = self._panel_gen, self.panel
        title, mod = PANELS[name]
        body = js.document.createDocumentFragment()
        await mod.render(self, body)
        if gen != self._panel_gen or self.panel != name:
            return
        dom.mount(q("#panel-title"), title)
        dom.mount(q("#panel-body"), body)

    def _on_change(self, kind: str, session_id: str, payload: Any) -> None:
        """Every write refreshes the sync chip; what arrives from elsewhere (a pull, another
        tab, another process) is shown: the list, the open conversation, the open panel."""
        self.schedule_sync_refresh()
        self._schedule_recount()
        if kind == "facts-synced" and self.panel == "memory":
            self.run(self.render_panel())
        if kind not in ARRIVALS:
            return
        self._arrived.add(session_id)
        if self._arrival_timer is not None:
            dom.clear_timeout(self._arrival_timer)
        self._arrival_timer = dom.set_timeout(lambda: self.run(self._show_arrivals()), 150)

    async def _show_arrivals(self) -> None:
        """Show the sessions that changed elsewhere; while a reply streams, wait for it."""
        self._arrival_timer = None
        if self.busy:
            self._arrival_timer = dom.set_timeout(lambda: self.run(self._show_arrivals()), 500)
            return
        arrived, self._arrived = self._arrived, set()
        await self.refresh_sessions()
        if self.current is not None and self.current not in {s.session_id for s in self.sessions}:
            await self.open_session(None)  # deleted elsewhere
        elif self.current is not None and (self.current in arrived or "" in arrived):
            await conversation.refresh(self)
        if self.panel == "data":  # the sync panel follows the chip
            data_panel.update_counts(self)

    def _schedule_recount(self) -> None:
        """Once writes settle, the status line counts what semantic search holds again."""
        if self._recount_timer is not None:
            dom.clear_timeout(self._recount_timer)

        def recount() -> None:
            self._recount_timer = None
            if background.Status().state == "ready":  # not while the first run still works
                self.run(background.embed(self, background.Status(), quiet=True))

        self._recount_timer = dom.set_timeout(recount, 1000)

    def schedule_sync_refresh(self) -> None:
        if self._sync_timer is not None:
            dom.clear_timeout(self._sync_timer)
        self._sync_timer = dom.set_timeout(lambda: self.run(sync_panel.refresh_chip(self)), 150)

    async def save_settings(self, new: dict[str, Any], *, sync: bool = False) -> None:
        """Store the settings (durable when this returns) and apply them: the live context,
        the retention schedule and, with ``sync``, ``mem.sync``'s config (``WrongPassphrase``
        when a passphrase was entered that the sync space refuses: the rest is applied)."""
        await settings.save(self.mem, new)
        self.settings = new
        context_panel.share_datetime(self)
        conversation.render_mode_note(self)
        settings_apply.apply_memory(self.mem, new)
        try:
            if sync:
                await settings_apply.apply_sync(self.mem, new)
        finally:
            if sync:
                await sync_panel.refresh_chip(self)
            settings_apply.apply_retention_schedule(self.mem, new, self._retention_ran)

    async def start_background(self) -> None:
        """After the first paint: resume auto-sync and the retention schedule, poll the sync status."""
        settings_apply.resume(self.mem, self.settings, self._retention_ran)
        await sync_panel.start_polling(self)

    async def _retention_ran(self, report: Any) -> None:
        """A scheduled retention run changed something: show the list as it now is."""
        try:
            await self.refresh_sessions()
            if self.current not in {s.session_id for s in self.sessions}:
                await self.open_session(None)
        except Exception as e:  # noqa: BLE001 - the schedule keeps running; the page says why
            self.toast(f"Could not refresh the list: {e}", error=True)


async def _open_panel(app: App, el: Any, ev: Any) -> None:
    name = str(el.getAttribute("data-panel"))
    if app.panel == name and dom.closest(el, ".tools"):
        await _close_panel(app, el, ev)
        return
    app.panel = name
    panel = q("#panel")
    panel.removeAttribute("hidden")
    q("#app").classList.add("with-panel")
    for b in js.document.querySelectorAll("[data-panel]"):
        b.setAttribute("aria-pressed", "true" if str(b.getAttribute("data-panel")) == name else "false")
    await app.render_panel()
    q("#panel-title").setAttribute("tabindex", "-1")
    q("#panel-title").focus()


async def _close_panel(app: App, el: Any, ev: Any) -> None:
    name = app.panel
    app.panel = None
    panel = q("#panel")
    # focus goes back to the opener only from the panel (or from nowhere): someone who
    # already went on typing in the composer keeps typing there
    active = js.document.activeElement
    give_back = dom.nil(active) or active == js.document.body or panel.contains(active)
    panel.setAttribute("hidden", "")
    q("#app").classList.remove("with-panel")
    for b in js.document.querySelectorAll("[data-panel]"):
        b.setAttribute("aria-pressed", "false")
    opener = q(f'.tools [data-panel="{name}"]') or q("#composer-input")
    if opener and give_back:
        opener.focus()


async def _toggle_sidebar(app: App, el: Any, ev: Any) -> None:
    open_ = q("#app").classList.toggle("sidebar-open")
    el.setAttribute("aria-expanded", "true" if open_ else "false")
    if open_:
        q("#new-session").focus()


async def _apply_update(app: App, el: Any, ev: Any) -> None:
    js.window.chatmem.applyUpdate()


async def _reload_page(app: App, el: Any, ev: Any) -> None:
    js.location.reload()
