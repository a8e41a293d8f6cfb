"""The search box: across all conversations, with filters; results jump to the message.

Uses ``mem.search`` when this build has it; otherwise a substring scan over
``mem.messages``, labelled as such in the results.
"""

from __future__ import annotations

from typing import Any

from . import dom, render as md
from .dom import h, q

__all__ = ["run_search", "substring_search", "ACTIONS"]

LIMIT = 50


async def substring_search(mem: Any, query: str, *, role: str = "", session_ids: list[str] | None = None,
                           include_archived: bool = True, limit: int = LIMIT) -> list[tuple[Any, Any]]:
    """(message, session) pairs whose text contains ``query`` (any case), newest first."""
    needle = query.lower()
    out: list[tuple[Any, Any]] = []
    for s in await mem.sessions.list(limit=None, archived=None if include_archived else False):
        if session_ids is not None and s.session_id not in session_ids:
            continue
        for m in await mem.messages.list(s.session_id, limit=None):
            if (not role or m.role == role) and needle in m.text.lower():
                out.append((m, s))
    out.sort(key=lambda t: -t[0].created_at)
    return out[:limit]


async def run_search(app: Any, query: str, role: str, this_only: bool, include_archived: bool
                     ) -> tuple[list[tuple[Any, Any]], str]:
    mem = app.mem
    ids = [app.current] if this_only and app.current else None
    if app.features["search"]:
        hits = await mem.search(query, limit=LIMIT, session_ids=ids, roles=[role] if role else None)
        pairs = []
        for hit in hits:
            m = hit.message
            s = await mem.sessions.get(m.session_id)
            if include_archived or not s.archived:
                pairs.append((m, s))
        return pairs, "Ranked search"
    pairs = await substring_search(mem, query, role=role, session_ids=ids, include_archived=include_archived)
    return pairs, "Substring match (ranked search is not in this build)"


async def _search(app: Any, el: Any, ev: Any) -> None:
    query = str(q("#search-input").value).strip()
    box = q("#search-results")
    if not query:
        await _clear(app, el, ev)
        return
    pairs, how = await run_search(app, query, str(q("#search-role").value), bool(q("#search-this").checked),
                                  bool(q("#search-archived").checked))
    items = []
    for m, s in pairs:
        who = {"user": "You", "assistant": "Assistant"}.get(m.role, m.role.capitalize())
        items.append(h("li", {},
                       h("button", {"type": "button", "class": "hit", "data-action": "open", "data-id": s.session_id,
                                    "data-message": m.id},
                         h("span", {"class": "where"}, f"{s.title} · {who}{' · archived' if s.archived else ''}"),
                         h("span", {"class": "snip"}, [dom.node(n) for n in md.highlight(md.snippet(m.text, query), query)]))))
    n = len(pairs)
    dom.mount(box,
              h("div", {"class": "head"},
                h("span", {}, f"{n}{'+' if n >= LIMIT else ''} result{'s' if n != 1 else ''} for “{query}”"),
                h("button", {"type": "button", "class": "btn small ghost", "data-action": "search-clear"}, "Clear")),
              h("p", {"class": "note"}, how),
              h("ul", {}, items) if items else h("p", {"class": "empty"}, "Nothing found."))
    box.removeAttribute("hidden")
    q("#session-list").setAttribute("hidden", "")


async def _clear(app: Any, el: Any, ev: Any) -> None:
    q("#search-input").value = ""
    q("#search-results").setAttribute("hidden", "")
    q("#session-list").removeAttribute("hidden")
    q("#search-input").focus()


ACTIONS = {"search": _search, "search-clear": _clear}
