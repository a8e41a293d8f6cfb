"""The context panel: exactly what the model would see for the open
conversation — the providers' live content (``mem.context``), the window
``mem.build_window`` builds with the chosen budget and retrieval, its tokens
against the budget, and what was summarized or left out. Reads only.
"""

from __future__ import annotations

import json
from datetime import timedelta, timezone
from typing import Any

import chatmem
from chatmem.errors import ChatmemError, ContextOverflow
from chatmem.records.models import extract_text

from . import dom, settings
from .dom import h, js

__all__ = ["ACTIONS", "render", "share_datetime", "window"]


def share_datetime(app: Any) -> None:
    """Register (or drop) the local date and time as live context, as the settings say."""
    ctx = app.mem.context
    if app.settings["context"]["datetime"]:
        if app.datetime_provider is None:
            offset = -int(js.Date.new().getTimezoneOffset())
            name = str(js.Intl.DateTimeFormat.new().resolvedOptions().timeZone)
            tz = timezone(timedelta(minutes=offset), name)
            app.datetime_provider = chatmem.DatetimeProvider(app.mem.clock, tz)
        ctx.register(app.datetime_provider)
    elif app.datetime_provider is not None:
        ctx.unregister(app.datetime_provider)
        ctx.remove(app.datetime_provider.source_type)


async def window(app: Any, session_id: str) -> chatmem.WindowResult:
    """The window the next turn would send (``mem.build_window`` with the app's settings)."""
    s = app.settings
    result: chatmem.WindowResult = await app.mem.build_window(
        session_id,
        system_prompt=s["provider"]["system_prompt"] or None,
        budget=s["budget"],
        retrieval=settings.retrieval_config(s),
    )
    return result


def _list(items: list[tuple[str, str, str]]) -> Any:
    return h(
        "ol",
        {"class": "ctx-list"},
        [
            h(
                "li",
                {},
                h("span", {"class": "r"}, r),
                h("span", {"class": "x", "title": x[:500]}, x[:160] or "—"),
                h("span", {"class": "n"}, n),
            )
            for r, x, n in items
        ],
    )


async def render(app: Any, body: Any) -> None:
    if not app.current:
        dom.append(body, h("p", {"class": "note"}, "Open a conversation to see the window it would send."))
        return
    s = app.settings
    b = chatmem.PRESETS[s["budget"]]
    try:
        res = await window(app, app.current)
    except ContextOverflow as e:
        dom.append(
            body,
            h(
                "p",
                {"class": "status-err"},
                f"The newest message does not fit the {b.name} budget: {e}. Choose a larger budget "
                "in Settings.",
            ),
        )
        return
    parts: list[Any] = [h("h3", {}, "Live context")]
    snap = app.mem.context.snapshot()
    if snap:
        parts.append(
            h(
                "dl",
                {"class": "kv live", "id": "ctx-live"},
                [
                    (h("dt", {}, k), h("dd", {}, json.dumps(v, ensure_ascii=False)[:300]))
                    for k, v in snap.items()
                ],
            )
        )
    else:
        parts.append(h("p", {"class": "note", "id": "ctx-live"}, "No context providers have sent anything."))
    pct = min(100, round(100 * res.tokens / max(1, res.budget)))
    bar = h(
        "div",
        {
            "class": "meter",
            "role": "meter",
            "aria-valuemin": "0",
            "aria-valuemax": str(res.budget),
            "aria-valuenow": str(res.tokens),
            "aria-label": "Tokens used of the budget",
        },
        h("span", {}),
    )
    bar.firstChild.style.width = f"{max(pct, 1)}%"
    r = s["retrieval"]
    how = {
        "recent": f"the last {r['recent_count']} messages",
        "relevant": f"up to {r['recent_count']} relevant older messages (similarity ≥ {r['relevance_threshold']})",
        "hybrid": f"up to {r['recent_count']} older messages by recency × {r['weights']['recency']} + "
        f"relevance × {r['weights']['relevance']}",
    }[r["strategy"]]
    left_out = []
    if res.dropped_count:
        left_out.append(f"{res.dropped_count} older message{'s' if res.dropped_count != 1 else ''}")
    if res.dropped_retrieved_ids:
        left_out.append(f"{len(res.dropped_retrieved_ids)} retrieved (did not fit or already recent)")
    left_out += [f"the {p} (no room)" for p in res.dropped_parts if p != "retrieved"]
    summary = "none"
    if res.summary_id or res.parts["summary"]:
        covers = res.summary_covers or {}
        n = covers.get("count") if isinstance(covers, dict) else None
        summary = f"{res.parts['summary']:,} tokens" + (f", covering {n} older messages" if n else "")
    parts += [
        h("h3", {}, "Window"),
        h(
            "dl",
            {"class": "kv"},
            h("dt", {}, "Budget"),
            h(
                "dd",
                {},
                f"{b.name}: {res.budget:,} tokens ({b.max_tokens:,} − {b.reserve_tokens:,} for the answer)",
            ),
            h("dt", {}, "Sent"),
            h("dd", {"id": "ctx-tokens"}, f"{res.tokens:,} tokens in {len(res.messages)} messages"),
            h("dt", {}, "Parts"),
            h("dd", {"id": "ctx-parts"}, " · ".join(f"{k} {v:,}" for k, v in res.parts.items() if v) or "—"),
            h("dt", {}, "Retrieval"),
            h("dd", {}, how),
            h("dt", {}, "Summary"),
            h("dd", {"id": "ctx-summary"}, summary),
            h("dt", {}, "Left out"),
            h("dd", {"id": "ctx-dropped"}, ", ".join(left_out) or "nothing"),
        ),
        bar,
    ]
    tk = app.mem.tokenizer
    items = [
        (m.get("role", ""), " ".join(extract_text(m.get("content")).split()), str(tk.count_message(m)))
        for m in res.messages
    ]
    parts += [
        h("h3", {}, "Recalled"),
        await _recalled(app, res),
        h("h3", {}, "Messages the model would see"),
        _list(items),
    ]
    dom.append(body, parts)


async def _recalled(app: Any, res: chatmem.WindowResult) -> Any:
    """Each older message retrieval brought into the window, with the conversation it came from."""
    if not res.retrieved_ids:
        return h("p", {"class": "note", "id": "ctx-recalled"}, "Nothing recalled for this turn.")
    titles = {s.session_id: s.title for s in app.sessions}
    rows = []
    for mid in res.retrieved_ids:
        try:
            m = await app.mem.messages.get(mid)
        except ChatmemError:
            continue
        where = (
            "this conversation" if m.session_id == app.current else f"“{titles.get(m.session_id, 'another')}”"
        )
        rows.append(
            h(
                "li",
                {},
                h("span", {"class": "r"}, f"from {where}"),
                h("span", {"class": "x", "title": m.text[:500]}, " ".join(m.text.split())[:160] or "—"),
            )
        )
    return h("ol", {"class": "ctx-list", "id": "ctx-recalled"}, rows)


ACTIONS: dict[str, Any] = {}
