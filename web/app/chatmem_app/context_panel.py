"""The context panel: what the model would see for the open conversation —
live context from providers, the window, token counts against the budget,
and what was left out.

Uses ``mem.build_context`` / ``mem.context`` when this build has them;
otherwise previews the window with ``chatmem.window.fit_window`` over the
conversation's messages (no providers, no summary, no retrieval).
"""

from __future__ import annotations

import json
from typing import Any

from chatmem.models import estimate_tokens, extract_text
from chatmem.window import PRESETS, fit_window, preset

from . import dom
from .dom import h

__all__ = ["window_messages", "render", "ACTIONS"]


def _budget(app: Any) -> Any:
    name = app.settings.get("budget") or "gpt-4o"
    return preset(name) if name in PRESETS else PRESETS["gpt-4o"]


async def window_messages(app: Any, session_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Provider-ready messages for ``session_id`` and a description of how they were chosen."""
    b = _budget(app)
    system = app.settings["provider"].get("system_prompt") or None
    if app.features["build_context"]:
        msgs = await app.mem.build_context(session_id, system_prompt=system or "", max_tokens=b.max_tokens,
                                           reserve_tokens=b.reserve_tokens)
        tokens = sum(estimate_tokens(extract_text(m.get("content"))) for m in msgs)
        return msgs, {"budget": b, "tokens": tokens, "dropped": [], "how": "build_context", "total": None}
    # replies of the offline responder are quotes of memory, not the model's words: not sent
    records = [r for r in await app.mem.messages.records(session_id, limit=None)
               if not (r.get("metadata") or {}).get("offline")]
    res = fit_window(system, None, None, None, records, max_tokens=b.max_tokens, reserve_tokens=b.reserve_tokens)
    return res.messages, {"budget": b, "tokens": res.tokens, "dropped": res.dropped_ids, "how": "fit_window",
                          "total": len(records), "parts": res.parts}


async def render(app: Any, body: Any) -> None:
    parts: list[Any] = [h("h3", {}, "Live context")]
    if app.features["context"]:
        snap = app.mem.context.snapshot()
        if snap:
            parts.append(h("ul", {"class": "ctx-list"},
                           [h("li", {}, h("span", {"class": "r"}, k), h("span", {"class": "x"}, json.dumps(v)[:200]),
                              h("span", {"class": "n"}, "")) for k, v in snap.items()]))
        else:
            parts.append(h("p", {"class": "note"}, "No context providers have sent anything yet."))
    else:
        parts.append(h("p", {"class": "note placeholder"},
                       "Context providers (mem.context) are not in this build; nothing is injected."))
    if not app.current:
        parts.append(h("p", {"class": "note"}, "Open a conversation to see the window it would send."))
        dom.append(body, parts)
        return
    msgs, info = await window_messages(app, app.current)
    b = info["budget"]
    pct = min(100, round(100 * info["tokens"] / max(1, b.budget)))
    bar = h("div", {"class": "meter" + (" over" if info["tokens"] > b.budget else ""), "role": "meter",
                    "aria-valuemin": "0", "aria-valuemax": str(b.budget), "aria-valuenow": str(info["tokens"]),
                    "aria-label": "Tokens used of the budget"}, h("span", {}))
    bar.firstChild.style.width = f"{max(pct, 1)}%"
    parts += [
        h("h3", {}, "Window"),
        h("dl", {"class": "kv"},
          h("dt", {}, "Budget"), h("dd", {}, f"{b.name}: {b.budget:,} tokens ({b.max_tokens:,} − {b.reserve_tokens:,} reserved)"),
          h("dt", {}, "Sent"), h("dd", {"id": "ctx-tokens"}, f"{info['tokens']:,} tokens in {len(msgs)} messages"),
          h("dt", {}, "Left out"), h("dd", {}, f"{len(info['dropped'])} older messages" if info["dropped"] else "nothing")),
        bar,
    ]
    if info["how"] == "fit_window":
        parts.append(h("p", {"class": "note placeholder"},
                       "Preview from the window fitter: system prompt and the most recent messages that fit. "
                       "Summaries and retrieval appear here once build_context is in this build."))
    items = []
    for m in msgs:
        text = extract_text(m.get("content"))
        items.append(h("li", {}, h("span", {"class": "r"}, m.get("role", "")),
                       h("span", {"class": "x", "title": text[:500]}, " ".join(text.split())[:120] or "—"),
                       h("span", {"class": "n"}, f"{estimate_tokens(text)}")))
    parts += [h("h3", {}, "Messages the model would see"), h("ol", {"class": "ctx-list"}, items)]
    dom.append(body, parts)


ACTIONS: dict[str, Any] = {}
