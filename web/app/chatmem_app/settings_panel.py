"""Settings: model provider, token budget, live context, retrieval, retention
(a dry-run preview, apply now, an hourly schedule that can be turned off) and
sync. Saved in the store's kv (durable when "Saved" shows); sync through
``mem.sync.configure``."""

from __future__ import annotations

import asyncio
from typing import Any

import chatmem
from chatmem.errors import WrongPassphrase

from . import dom, settings
from .dom import h, q

__all__ = ["ACTIONS", "read_form", "render"]


def _field(label: str, id_: str, value: Any, type_: str = "text", **attrs: Any) -> Any:
    inp = h("input", {"id": id_, "type": type_, "autocomplete": "off", **attrs})
    if type_ == "checkbox":
        inp.checked = bool(value)
        return h("label", {"class": "field check", "for": id_}, inp, label)
    inp.value = "" if value is None else str(value)
    return h("label", {"class": "field", "for": id_}, label, inp)


def _select(label: str, id_: str, value: str, options: list[tuple[str, str]]) -> Any:
    sel = h("select", {"id": id_}, [h("option", {"value": v}, t) for v, t in options])
    sel.value = value
    return h("label", {"class": "field", "for": id_}, label, sel)


def _schedule_text(app: Any) -> str:
    if not app.mem.retention.scheduled:
        return "Automatic retention is off."
    report = app.mem.retention.last_report
    last = (
        f" Last run: {len(report.archived)} archived, {len(report.deleted)} deleted."
        if report is not None and not report.dry_run
        else ""
    )
    return "Automatic retention is on: the policy is applied every hour." + last


async def render(app: Any, body: Any) -> None:
    s = app.settings
    p, r, ret, sy = s["provider"], s["retrieval"], s["retention"], s["sync"]
    form = h(
        "form",
        {"id": "settings-form", "data-action": "save-settings", "aria-describedby": "settings-errors"},
        h("h3", {}, "Model provider"),
        h(
            "p",
            {"class": "note"},
            "Any OpenAI-compatible endpoint. Leave empty to answer from memory, offline.",
        ),
        _field("Base URL", "set-base-url", p["base_url"], "url", placeholder="https://api.openai.com/v1"),
        _field("API key", "set-api-key", p["api_key"], "password"),
        _field("Model", "set-model", p["model"], placeholder="gpt-4o-mini"),
        _field("System prompt", "set-system", p["system_prompt"]),
        _select(
            "Token budget",
            "set-budget",
            s["budget"],
            [
                (k, f"{k} — {v.max_tokens:,} tokens, {v.reserve_tokens:,} for the answer")
                for k, v in chatmem.PRESETS.items()
            ],
        ),
        _field(
            "Share the local date and time with the model (live context)",
            "set-ctx-datetime",
            s["context"]["datetime"],
            "checkbox",
        ),
        h("h3", {}, "Retrieval"),
        _select(
            "Strategy",
            "set-strategy",
            r["strategy"],
            [("recent", "Recent messages"), ("relevant", "Relevant messages"), ("hybrid", "Hybrid")],
        ),
        _select("Recall from", "set-scope", r["scope"], list(settings.SCOPES.items())),
        h(
            "div",
            {"class": "row"},
            _field("Messages", "set-recent", r["recent_count"], "number", min="1", max="1000"),
            _field(
                "Relevance threshold",
                "set-threshold",
                r["relevance_threshold"],
                "number",
                min="0",
                max="1",
                step="0.05",
            ),
        ),
        h(
            "div",
            {"class": "row"},
            _field(
                "Recency weight",
                "set-w-recency",
                r["weights"]["recency"],
                "number",
                min="0",
                max="1",
                step="0.1",
            ),
            _field(
                "Relevance weight",
                "set-w-relevance",
                r["weights"]["relevance"],
                "number",
                min="0",
                max="1",
                step="0.1",
            ),
        ),
        h("h3", {}, "Retention"),
        h(
            "div",
            {"class": "row"},
            _field(
                "Keep at most (conversations; 0: no limit)",
                "set-max-sessions",
                ret["max_sessions"],
                "number",
                min="0",
            ),
            _field(
                "Archive after (days idle; 0: never)",
                "set-archive-after",
                ret["archive_after_days"],
                "number",
                min="0",
            ),
        ),
        h(
            "div",
            {"class": "row"},
            _field("Max age (days; 0: never)", "set-max-age", ret["max_age_days"], "number", min="0"),
        ),
        h(
            "p",
            {"class": "note"},
            "An imported conversation counts as active from the day it was imported, "
            "not from its original dates.",
        ),
        _field(
            "Delete archived conversations older than the max age",
            "set-delete-archived",
            ret["delete_archived"],
            "checkbox",
        ),
        h(
            "div",
            {"class": "row"},
            h(
                "button",
                {"type": "button", "class": "btn small", "data-action": "retention-preview"},
                "Preview (dry run)",
            ),
            h(
                "button",
                {"type": "button", "class": "btn small", "data-action": "retention-apply"},
                "Apply now",
            ),
        ),
        h("div", {"id": "retention-preview", "aria-live": "polite"}),
        h(
            "label",
            {"class": "field check", "for": "set-retention-auto"},
            _checkbox("set-retention-auto", ret["auto"], "retention-auto"),
            "Apply automatically: now, then every hour",
        ),
        h("p", {"class": "note", "id": "retention-schedule", "role": "status"}, _schedule_text(app)),
        h("h3", {}, "Sync"),
        _field("Sync with a server", "set-sync-enabled", sy["enabled"], "checkbox"),
        _field(
            "Endpoint", "set-sync-endpoint", sy["endpoint"], "url", placeholder="https://sync.example.com"
        ),
        _field("Key", "set-sync-key", sy["api_key"], "password"),
        _field("Interval (seconds)", "set-sync-interval", sy["interval_s"], "number", min="5"),
        _field(
            "Sync automatically (every interval and when back online)",
            "set-sync-auto",
            sy["auto"],
            "checkbox",
        ),
        _field(
            "Encrypt end to end (the server keeps only ciphertext)",
            "set-sync-encrypt",
            sy["encrypt"],
            "checkbox",
        ),
        _field(
            "Passphrase",
            "set-sync-passphrase",
            "",
            "password",
            placeholder="entered — leave empty to keep it" if sy.get("has_passphrase") else "",
            autocomplete="new-password",
            **{"aria-describedby": "set-sync-passphrase-error"},
        ),
        h("p", {"id": "set-sync-passphrase-error", "class": "status-err", "role": "alert"}),
        _field(
            "Remember on this device (keeps the derived key here, never the passphrase)",
            "set-sync-remember",
            sy["remember"],
            "checkbox",
        ),
        h(
            "p",
            {"class": "note", "id": "sync-e2e-warning"},
            "Your conversations are encrypted on this device before they are sent. Nobody can reset or "
            "recover the passphrase: if you lose it, the copy on the server cannot be read by anyone, you "
            "included (this device's own copy stays readable). Use the same passphrase on every device. "
            "Remembering it lets anyone who can open this browser profile sync as you.",
        ),
        h("div", {"id": "settings-errors", "role": "alert"}),
        h(
            "div",
            {"class": "row"},
            h("button", {"type": "submit", "class": "btn primary"}, "Save settings"),
            h("span", {"id": "settings-saved", "class": "note", "role": "status"}),
        ),
    )
    dom.append(body, form)


def _checkbox(id_: str, value: bool, change: str) -> Any:
    inp = h("input", {"id": id_, "type": "checkbox", "data-change": change})
    inp.checked = bool(value)
    return inp


def _num(id_: str, kind: type = int) -> Any:
    raw = str(q(f"#{id_}").value).strip()
    try:
        return kind(raw)
    except ValueError:
        return raw


def read_form() -> dict[str, Any]:
    def v(id_: str) -> str:
        return str(q(f"#{id_}").value).strip()

    def c(id_: str) -> bool:
        return bool(q(f"#{id_}").checked)

    return {
        "provider": {
            "base_url": v("set-base-url"),
            "api_key": v("set-api-key"),
            "model": v("set-model"),
            "system_prompt": v("set-system"),
        },
        "budget": v("set-budget"),
        "context": {"datetime": c("set-ctx-datetime")},
        "retrieval": {
            "strategy": v("set-strategy"),
            "scope": v("set-scope"),
            "recent_count": _num("set-recent"),
            "relevance_threshold": _num("set-threshold", float),
            "weights": {"recency": _num("set-w-recency", float), "relevance": _num("set-w-relevance", float)},
        },
        "retention": {
            "max_sessions": _num("set-max-sessions"),
            "max_age_days": _num("set-max-age"),
            "archive_after_days": _num("set-archive-after"),
            "delete_archived": c("set-delete-archived"),
            "auto": c("set-retention-auto"),
        },
        "sync": {
            "enabled": c("set-sync-enabled"),
            "endpoint": v("set-sync-endpoint"),
            "api_key": v("set-sync-key"),
            "interval_s": _num("set-sync-interval"),
            "auto": c("set-sync-auto"),
            "encrypt": c("set-sync-encrypt"),
            "passphrase": str(q("#set-sync-passphrase").value),
            "remember": c("set-sync-remember"),
        },
    }


def _errors(errs: list[str]) -> None:
    box = q("#settings-errors")
    dom.mount(box, h("ul", {"class": "status-err"}, [h("li", {}, e) for e in errs]) if errs else None)


async def _save(app: Any, el: Any, ev: Any) -> None:
    new = settings.merge(settings.DEFAULTS, read_form())
    new["sync"]["has_passphrase"] = bool(app.settings["sync"].get("has_passphrase"))
    errs = settings.validate(new)
    _errors(errs)
    dom.mount(q("#set-sync-passphrase-error"), None)
    dom.mount(q("#settings-saved"), None)
    if errs:
        return
    box = q("#set-sync-passphrase")  # handed to mem.sync: the form lets go of it
    box.value = ""
    try:
        await app.save_settings(new, sync=True)
    except WrongPassphrase:
        dom.mount(
            q("#set-sync-passphrase-error"),
            "Not accepted: this is not the passphrase this sync space is encrypted with. "
            "Your other settings are kept; sync stays locked until the right one is entered.",
        )
        box.focus()
        return
    box.setAttribute(
        "placeholder",
        "entered — leave empty to keep it" if app.settings["sync"].get("has_passphrase") else "",
    )
    dom.mount(q("#retention-schedule"), _schedule_text(app))
    dom.mount(q("#settings-saved"), "Saved.")


def _ret_from_form() -> dict[str, Any] | None:
    ret = read_form()["retention"]
    errs = settings.validate(settings.merge(settings.DEFAULTS, {"retention": ret}))
    _errors(errs)
    return None if errs else ret


def _names(app: Any, ids: list[str]) -> str:
    titles = {s.session_id: s.title for s in app.sessions}
    shown = [f"“{titles.get(i, i)}”" for i in ids[:8]]
    return ", ".join(shown) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")


async def _preview(app: Any, el: Any, ev: Any) -> None:
    ret = _ret_from_form()
    if ret is None:
        return
    report = await app.mem.retention.apply(settings.retention_policy(ret), dry_run=True)
    out = q("#retention-preview")
    if not report.archived and not report.deleted:
        dom.mount(out, h("p", {"class": "note"}, "Dry run: this policy changes nothing right now."))
        return
    dom.mount(
        out,
        h("p", {"class": "note"}, "Dry run — nothing was changed. Applying would:"),
        h(
            "ul",
            {"class": "note"},
            h("li", {}, f"archive {len(report.archived)}: {_names(app, report.archived)}")
            if report.archived
            else None,
            h("li", {}, f"delete {len(report.deleted)}: {_names(app, report.deleted)}")
            if report.deleted
            else None,
        ),
    )


async def _apply(app: Any, el: Any, ev: Any) -> None:
    ret = _ret_from_form()
    if ret is None:
        return
    report = await app.mem.retention.apply(settings.retention_policy(ret))
    await app.refresh_sessions()
    dom.mount(
        q("#retention-preview"),
        h(
            "p",
            {"class": "note"},
            f"Applied: {len(report.archived)} archived, {len(report.deleted)} deleted.",
        ),
    )


async def _auto(app: Any, el: Any, ev: Any) -> None:
    """The schedule toggle acts at once (and is saved) with the policy shown in the form."""
    ret = _ret_from_form()
    if ret is None:
        el.checked = not el.checked
        return
    new = settings.merge(app.settings, {"retention": ret})
    await app.save_settings(new)
    await asyncio.sleep(0)  # the first scheduled run starts now
    dom.mount(q("#retention-schedule"), _schedule_text(app))


ACTIONS = {
    "save-settings": _save,
    "retention-preview": _preview,
    "retention-apply": _apply,
    "retention-auto": _auto,
}
