"""Your data: storage used and "keep my data" (``mem.storage_estimate`` /
``mem.request_persistence``); export of everything or the chosen
conversations as a download (``mem.export_iter``, read page by page); import
by file picker or drag and drop (``mem.import_sessions``: validated whole,
then written in one transaction — all or nothing) with its report.
"""

from __future__ import annotations

import time
from typing import Any

from chatmem import ImportReport
from chatmem.errors import ImportFormatError, ValidationError

from . import dom, learn_import
from .dom import h, q

__all__ = ["ACTIONS", "human_bytes", "import_bytes", "render", "report_lines", "update_counts"]

FORMATS = {"chatmem": "chatmem", "airi": "AIRI", "chatgpt": "ChatGPT", "claude": "Claude"}


def human_bytes(n: float | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


async def render(app: Any, body: Any) -> None:
    est = await app.mem.storage_estimate()
    persisted = bool(est.get("persisted"))
    choices = [
        h(
            "li",
            {},
            h(
                "label",
                {},
                h(
                    "input",
                    {
                        "type": "checkbox",
                        "class": "export-pick",
                        "value": s.session_id,
                        "checked": s.session_id == app.current,
                    },
                ),
                f"{s.title}{' (archived)' if s.archived else ''} · {s.message_count}",
            ),
        )
        for s in app.sessions
    ]
    dom.append(
        body,
        h("h3", {}, "Storage"),
        h(
            "dl",
            {"class": "kv"},
            h("dt", {}, "Conversations"),
            h("dd", {"id": "data-counts"}, _counts(app)),
            h("dt", {}, "Used by this site"),
            h("dd", {"id": "storage-usage"}, human_bytes(est.get("usage"))),
            h("dt", {}, "Available"),
            h("dd", {}, human_bytes(est.get("quota"))),
            h("dt", {}, "Kept for good"),
            h(
                "dd",
                {"id": "persist-state"},
                "yes — the browser will not evict it"
                if persisted
                else "not yet — the browser may clear it when space runs low",
            ),
        ),
        h(
            "button",
            {"type": "button", "class": "btn small", "data-action": "persist", "disabled": persisted},
            "Keep my data",
        ),
        h("h3", {}, "Export"),
        h(
            "p",
            {"class": "note"},
            "A JSON file you can import here or elsewhere. API keys are never exported.",
        ),
        h(
            "button",
            {
                "type": "button",
                "class": "btn small",
                "data-action": "export-all",
                "id": "export-all",
                "disabled": not app.sessions,
            },
            "Export everything",
        ),
        h("p", {"class": "note"}, "Or only the conversations ticked here:") if choices else None,
        h("ul", {"class": "select-list", "aria-label": "Conversations to export"}, choices)
        if choices
        else None,
        h(
            "button",
            {"type": "button", "class": "btn small", "data-action": "export-selected"},
            "Export the ticked conversations",
        )
        if choices
        else None,
        h("h3", {}, "Import"),
        h(
            "p",
            {"class": "note"},
            "chatmem, AIRI, ChatGPT or Claude exports. The whole file is checked first; "
            "then everything is written at once, or nothing.",
        ),
        h(
            "div",
            {"class": "drop-zone", "data-drop": "import-drop"},
            h("p", {}, "Drop an export file here, or choose one:"),
            h("label", {"for": "import-file", "class": "sr-only"}, "Import file"),
            h(
                "input",
                {
                    "id": "import-file",
                    "type": "file",
                    "accept": ".json,application/json",
                    "data-change": "import-file",
                },
            ),
        ),
        h(
            "label",
            {"class": "field check", "for": "import-restore"},
            h("input", {"id": "import-restore", "type": "checkbox"}),
            "Restore a backup: keep its ids (importing it again changes nothing)",
        ),
        h("div", {"id": "import-report", "role": "status", "aria-live": "polite"}, learn_import.view(app)),
    )


def _counts(app: Any) -> str:
    n, m = len(app.sessions), sum(s.message_count for s in app.sessions)
    return f"{n} conversation{'s' if n != 1 else ''} ({m} message{'s' if m != 1 else ''})"


def _n(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def update_counts(app: Any) -> None:
    """The open panel's counts and "Export everything" as the list now is (what arrived from
    elsewhere, an import), without drawing the panel again: ticks and reports stay."""
    counts = q("#data-counts")
    if counts is not None:
        dom.mount(counts, _counts(app))
    button = q("#export-all")
    if button is not None:
        button.disabled = not app.sessions


async def _persist(app: Any, el: Any, ev: Any) -> None:
    granted = await app.mem.request_persistence()
    dom.mount(
        q("#persist-state"),
        "yes — the browser will not evict it"
        if granted
        else "the browser declined for now (it decides by how often you use the site); try again later",
    )
    el.disabled = bool(granted)


async def _export(app: Any, ids: list[str] | None, name: str) -> None:
    chunks = [chunk async for chunk in app.mem.export_iter(ids)]
    dom.download(f"chatmem-{name}-{time.strftime('%Y-%m-%d')}.json", chunks)
    n = len(ids) if ids is not None else len(app.sessions)
    app.toast(f"Exported {n} conversation{'s' if n != 1 else ''}.")


async def _export_all(app: Any, el: Any, ev: Any) -> None:
    await _export(app, None, "all")


async def _export_selected(app: Any, el: Any, ev: Any) -> None:
    ids = [str(c.value) for c in dom.js.document.querySelectorAll(".export-pick:checked")]
    if not ids:
        app.toast("Choose at least one conversation to export.", error=True)
        return
    await _export(app, ids, "selected")


async def import_bytes(app: Any, data: bytes, name: str, preserve_ids: bool = False) -> Any:
    """Import ``data`` and show its report (or why nothing was imported)."""
    out = q("#import-report")
    try:
        report = await app.mem.import_sessions(data, preserve_ids=preserve_ids)
    except ImportFormatError as e:
        where = getattr(e, "path", None)
        text = (
            f"Nothing imported: {name} has a problem: {e}" if where else f"Nothing imported from {name}. {e}"
        )
        dom.mount(out, h("p", {"class": "status-err"}, text))
        return None
    except ValidationError as e:
        dom.mount(out, h("p", {"class": "status-err"}, f"Nothing imported: {name} has a problem: {e}"))
        return None
    await app.refresh_sessions()
    update_counts(app)
    fmt = FORMATS.get(report.format, report.format)
    dom.mount(
        out,
        h(
            "div",
            {"class": "report status-ok", "id": "import-summary"},
            h("p", {}, f"Imported {name} ({fmt} format)."),
            h("ul", {}, *(h("li", {}, line) for line in report_lines(report))),
        ),
        learn_import.offer(app, report) if report.messages_imported else learn_import.view(app),
    )
    return report


def report_lines(report: ImportReport) -> list[str]:
    """What an import did, in words: new conversations, updated ones (an import's
    ``sessions_imported`` counts them too), and those already here."""
    new = report.sessions_imported - report.sessions_replaced
    lines = []
    if report.sessions_replaced:
        if new:
            lines.append(_n(new, "new conversation"))
        lines.append(f"{_n(report.sessions_replaced, 'conversation')} updated")
        lines.append(f"{_n(report.messages_imported, 'message')} added")
    elif new or not report.sessions_skipped:
        lines.append(f"{_n(new, 'conversation')}, {_n(report.messages_imported, 'message')}")
    if report.sessions_skipped:
        lines.append(f"{_n(report.sessions_skipped, 'conversation')} already here, unchanged")
    return lines


async def _import_file(app: Any, file: Any) -> None:
    data = (await file.arrayBuffer()).to_bytes()
    await import_bytes(app, data, str(file.name), bool(q("#import-restore").checked))


async def _import_change(app: Any, el: Any, ev: Any) -> None:
    if el.files.length:
        await _import_file(app, el.files.item(0))
        el.value = ""


async def _import_drop(app: Any, el: Any, ev: Any) -> None:
    el.classList.remove("over")
    files = None if dom.nil(ev.dataTransfer) else ev.dataTransfer.files
    if files and files.length:
        await _import_file(app, files.item(0))


ACTIONS = {
    "persist": _persist,
    "export-all": _export_all,
    "export-selected": _export_selected,
    "import-file": _import_change,
    "import-drop": _import_drop,
}
