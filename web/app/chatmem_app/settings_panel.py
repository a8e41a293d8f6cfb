"""Settings: model provider, token budget, retrieval, retention (with a dry-run
preview), sync. Saved in the store's kv (durable when "Saved" shows)."""

from __future__ import annotations

import time
from typing import Any

from chatmem.retention import DAY_MS, RetentionPolicy, plan_retention
from chatmem.window import PRESETS

from . import dom, settings
from .dom import h, q

__all__ = ["render", "read_form", "retention_policy", "ACTIONS"]


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


async def render(app: Any, body: Any) -> None:
    s = app.settings
    p, r, ret, sy = s["provider"], s["retrieval"], s["retention"], s["sync"]
    form = h("form", {"id": "settings-form", "data-action": "save-settings", "aria-describedby": "settings-errors"},
             h("h3", {}, "Model provider"),
             h("p", {"class": "note"}, "Any OpenAI-compatible endpoint. Leave empty to answer from memory, offline."),
             _field("Base URL", "set-base-url", p["base_url"], "url", placeholder="https://api.openai.com/v1"),
             _field("API key", "set-api-key", p["api_key"], "password"),
             _field("Model", "set-model", p["model"], placeholder="gpt-4o-mini"),
             _field("System prompt", "set-system", p["system_prompt"]),
             _select("Token budget", "set-budget", s["budget"],
                     [(k, f"{k} — {v.max_tokens:,} tokens, {v.reserve_tokens:,} for the answer") for k, v in PRESETS.items()]),
             h("h3", {}, "Retrieval"),
             _select("Strategy", "set-strategy", r["strategy"],
                     [("recent", "Recent messages"), ("relevant", "Relevant messages"), ("hybrid", "Hybrid")]),
             h("div", {"class": "row"},
               _field("Recent messages", "set-recent", r["recent_count"], "number", min="0", max="1000"),
               _field("Relevance threshold", "set-threshold", r["relevance_threshold"], "number", min="0", max="1", step="0.05")),
             h("div", {"class": "row"},
               _field("Recency weight", "set-w-recency", r["weights"]["recency"], "number", min="0", max="1", step="0.1"),
               _field("Relevance weight", "set-w-relevance", r["weights"]["relevance"], "number", min="0", max="1", step="0.1")),
             h("h3", {}, "Retention"),
             h("div", {"class": "row"},
               _field("Keep at most (sessions)", "set-max-sessions", ret["max_sessions"], "number", min="0"),
               _field("Archive after (days idle)", "set-archive-after", ret["archive_after_days"], "number", min="0")),
             h("div", {"class": "row"},
               _field("Max age (days)", "set-max-age", ret["max_age_days"], "number", min="0")),
             _field("Delete archived conversations older than the max age", "set-delete-archived", ret["delete_archived"], "checkbox"),
             _field("Apply automatically every hour", "set-retention-auto", ret["auto"], "checkbox"),
             h("div", {"class": "row"},
               h("button", {"type": "button", "class": "btn small", "data-action": "retention-preview"}, "Preview (dry run)"),
               h("button", {"type": "button", "class": "btn small", "data-action": "retention-apply"}, "Apply now")),
             h("div", {"id": "retention-preview", "aria-live": "polite"}),
             h("h3", {}, "Sync"),
             _field("Sync with a server", "set-sync-enabled", sy["enabled"], "checkbox"),
             _field("Endpoint", "set-sync-endpoint", sy["endpoint"], "url", placeholder="https://sync.example.com"),
             _field("Key", "set-sync-key", sy["api_key"], "password"),
             _field("Interval (seconds)", "set-sync-interval", sy["interval_s"], "number", min="5"),
             h("div", {"id": "settings-errors", "role": "alert"}),
             h("div", {"class": "row"}, h("button", {"type": "submit", "class": "btn primary"}, "Save settings"),
               h("span", {"id": "settings-saved", "class": "note", "role": "status"})))
    dom.append(body, form)


def _num(id_: str, kind: type = int) -> Any:
    raw = str(q(f"#{id_}").value).strip()
    try:
        return kind(raw)
    except ValueError:
        return raw


def read_form() -> dict[str, Any]:
    v = lambda id_: str(q(f"#{id_}").value).strip()  # noqa: E731
    c = lambda id_: bool(q(f"#{id_}").checked)  # noqa: E731
    return {
        "provider": {"base_url": v("set-base-url"), "api_key": v("set-api-key"), "model": v("set-model"),
                     "system_prompt": v("set-system")},
        "budget": v("set-budget"),
        "retrieval": {"strategy": v("set-strategy"), "recent_count": _num("set-recent"),
                      "relevance_threshold": _num("set-threshold", float),
                      "weights": {"recency": _num("set-w-recency", float), "relevance": _num("set-w-relevance", float)}},
        "retention": {"max_sessions": _num("set-max-sessions"), "max_age_days": _num("set-max-age"),
                      "archive_after_days": _num("set-archive-after"), "delete_archived": c("set-delete-archived"),
                      "auto": c("set-retention-auto")},
        "sync": {"enabled": c("set-sync-enabled"), "endpoint": v("set-sync-endpoint"), "api_key": v("set-sync-key"),
                 "interval_s": _num("set-sync-interval")},
    }


def retention_policy(ret: dict[str, Any]) -> RetentionPolicy:
    return RetentionPolicy(max_sessions=ret["max_sessions"], max_age=ret["max_age_days"] * DAY_MS,
                           archive_after=ret["archive_after_days"] * DAY_MS, delete_archived=ret["delete_archived"])


def _errors(errs: list[str]) -> None:
    box = q("#settings-errors")
    dom.mount(box, h("ul", {"class": "status-err"}, [h("li", {}, e) for e in errs]) if errs else None)


async def _save(app: Any, el: Any, ev: Any) -> None:
    new = settings.merge(settings.DEFAULTS, read_form())
    errs = settings.validate(new)
    _errors(errs)
    if errs:
        return
    await app.save_settings(new)
    from .sync_panel import apply_sync_settings

    await apply_sync_settings(app)
    dom.mount(q("#settings-saved"), "Saved.")


async def plan(app: Any, ret: dict[str, Any]) -> tuple[list[str], list[str]]:
    policy = retention_policy(ret)
    if app.features["retention"]:
        report = await app.mem.retention.apply(policy, dry_run=True)
        return list(report.archived), list(report.deleted)
    metas = await app.mem.sessions.list(limit=None, archived=None)
    p = plan_retention(metas, policy, int(time.time() * 1000))
    return p.archive, p.delete


async def apply_retention(app: Any, ret: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Archive and delete what the policy says (pinned sessions are never touched)."""
    if app.features["retention"]:
        report = await app.mem.retention.apply(retention_policy(ret))
        return list(report.archived), list(report.deleted)
    archive, delete = await plan(app, ret)
    for sid in archive:
        await app.mem.sessions.archive(sid)
    for sid in delete:
        await app.mem.sessions.delete(sid)
    return archive, delete


def _names(app: Any, ids: list[str]) -> str:
    titles = {s.session_id: s.title for s in app.sessions}
    shown = [f"“{titles.get(i, i)}”" for i in ids[:8]]
    return ", ".join(shown) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")


def _ret_from_form() -> dict[str, Any] | None:
    ret = read_form()["retention"]
    errs = settings.validate(settings.merge(settings.DEFAULTS, {"retention": ret}))
    _errors(errs)
    return None if errs else ret


async def _preview(app: Any, el: Any, ev: Any) -> None:
    ret = _ret_from_form()
    if ret is None:
        return
    archive, delete = await plan(app, ret)
    out = q("#retention-preview")
    if not archive and not delete:
        dom.mount(out, h("p", {"class": "note"}, "Dry run: this policy changes nothing right now."))
        return
    dom.mount(out, h("p", {"class": "note"}, "Dry run — nothing was changed. Applying would:"),
              h("ul", {"class": "note"},
                h("li", {}, f"archive {len(archive)}: {_names(app, archive)}") if archive else None,
                h("li", {}, f"delete {len(delete)}: {_names(app, delete)}") if delete else None))


async def _apply(app: Any, el: Any, ev: Any) -> None:
    ret = _ret_from_form()
    if ret is None:
        return
    archive, delete = await apply_retention(app, ret)
    await app.refresh_sessions()
    dom.mount(q("#retention-preview"),
              h("p", {"class": "note"}, f"Applied: {len(archive)} archived, {len(delete)} deleted."))


ACTIONS = {"save-settings": _save, "retention-preview": _preview, "retention-apply": _apply}
