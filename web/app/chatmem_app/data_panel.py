"""Your data: storage used, "keep my data" (persistent storage), export of all
or the open conversation as a download, import by file picker or drag and drop.

Export/import use ``mem.export`` / ``mem.import_sessions`` when this build has
them; otherwise the buttons are disabled and say why.
"""

from __future__ import annotations

import json
import time
from typing import Any

from . import dom
from .dom import h, q

__all__ = ["render", "human_bytes", "ACTIONS"]


def human_bytes(n: float | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


async def _estimate(app: Any) -> dict[str, Any]:
    if app.features["storage_estimate"]:
        est = await app.mem.storage_estimate()
        return est if isinstance(est, dict) else {"usage": est.usage, "quota": est.quota, "persisted": est.persisted}
    from chatmem._browser import storage_estimate

    return await storage_estimate()


async def render(app: Any, body: Any) -> None:
    est = await _estimate(app)
    n_sessions = len(app.sessions)
    n_messages = sum(s.message_count for s in app.sessions)
    persisted = bool(est.get("persisted"))
    can_export, can_import = app.features["export"], app.features["import_sessions"]
    dom.append(body,
               h("h3", {}, "Storage"),
               h("dl", {"class": "kv"},
                 h("dt", {}, "Conversations"), h("dd", {}, f"{n_sessions} ({n_messages} messages)"),
                 h("dt", {}, "Used by this site"), h("dd", {"id": "storage-usage"}, human_bytes(est.get("usage"))),
                 h("dt", {}, "Available"), h("dd", {}, human_bytes(est.get("quota"))),
                 h("dt", {}, "Kept for good"), h("dd", {"id": "persist-state"},
                                                "yes — the browser will not evict it" if persisted else
                                                "not yet — the browser may clear it when space runs low")),
               h("button", {"type": "button", "class": "btn small", "data-action": "persist", "disabled": persisted},
                 "Keep my data"),
               h("h3", {}, "Export"),
               h("p", {"class": "note"}, "A JSON file you can import here or elsewhere. API keys are never exported."),
               h("div", {"class": "row"},
                 h("button", {"type": "button", "class": "btn small", "data-action": "export-all",
                              "disabled": not can_export}, "Export everything"),
                 h("button", {"type": "button", "class": "btn small", "data-action": "export-one",
                              "disabled": not (can_export and app.current)}, "Export this conversation")),
               None if can_export else h("p", {"class": "note placeholder"},
                                         "Export arrives with mem.export (not in this build)."),
               h("h3", {}, "Import"),
               h("p", {"class": "note"}, "chatmem, AIRI, ChatGPT or Claude exports."),
               h("div", {"class": "drop-zone", "data-drop": "import-drop"},
                 h("p", {}, "Drop an export file here, or choose one:"),
                 h("label", {"for": "import-file", "class": "sr-only"}, "Import file"),
                 h("input", {"id": "import-file", "type": "file", "accept": ".json,application/json",
                             "data-change": "import-file", "disabled": not can_import})),
               None if can_import else h("p", {"class": "note placeholder"},
                                         "Import arrives with mem.import_sessions (not in this build)."),
               h("div", {"id": "import-report", "role": "status", "aria-live": "polite"}))


async def _persist(app: Any, el: Any, ev: Any) -> None:
    if hasattr(app.mem, "request_persistence"):
        granted = await app.mem.request_persistence()
    else:
        from chatmem._browser import request_persistence

        granted = await request_persistence()
    dom.mount(q("#persist-state"), "yes — the browser will not evict it" if granted else
              "the browser declined for now (it decides by how often you use the site); try again later")
    el.disabled = bool(granted)


async def _export(app: Any, ids: list[str] | None, name: str) -> None:
    data = await app.mem.export(session_ids=ids)
    text = json.dumps(data, ensure_ascii=False, indent=1)
    day = time.strftime("%Y-%m-%d")
    dom.download(f"chatmem-{name}-{day}.json", text)
    app.toast(f"Exported {len(data.get('sessions', []))} conversation(s).")


async def _export_all(app: Any, el: Any, ev: Any) -> None:
    await _export(app, None, "all")


async def _export_one(app: Any, el: Any, ev: Any) -> None:
    if app.current:
        await _export(app, [app.current], "conversation")


async def _import_file(app: Any, file: Any) -> None:
    out = q("#import-report")
    if not app.features["import_sessions"]:
        dom.mount(out, h("p", {"class": "status-err"}, "Import is not in this build."))
        return
    text = str(await file.text())
    try:
        report = await app.mem.import_sessions(text)
    except Exception as e:  # chatmem.errors.ValidationError and friends: nothing was written
        dom.mount(out, h("p", {"class": "status-err"}, f"Nothing imported: {e}"))
        return
    await app.refresh_sessions()
    n_s = getattr(report, "sessions", None)
    n_m = getattr(report, "messages", None)
    summary = str(report) if n_s is None else f"{len(n_s) if isinstance(n_s, list) else n_s} conversations, " \
                                               f"{len(n_m) if isinstance(n_m, list) else n_m} messages"
    dom.mount(out, h("p", {"class": "status-ok"}, f"Imported {file.name}: {summary}."))


async def _import_change(app: Any, el: Any, ev: Any) -> None:
    if el.files.length:
        await _import_file(app, el.files.item(0))
        el.value = ""


async def _import_drop(app: Any, el: Any, ev: Any) -> None:
    el.classList.remove("over")
    files = None if dom.nil(ev.dataTransfer) else ev.dataTransfer.files
    if files and files.length:
        await _import_file(app, files.item(0))


ACTIONS = {"persist": _persist, "export-all": _export_all, "export-one": _export_one,
           "import-file": _import_change, "import-drop": _import_drop}
