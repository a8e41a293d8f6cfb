"""The search box: ``mem.search`` across all conversations — keyword (BM25),
semantic or hybrid — with filters (role, this conversation, archived,
character, dates); each result opens its conversation at the message. A result
highlights the words the query matched as the index reads them
(``chatmem.index.matches``); semantic and hybrid results below the relevance
floor are folded under "weaker matches"."""

from __future__ import annotations

from typing import Any

from chatmem.embedding.embedders import calibration_of
from chatmem.index.matches import matched_spans

from . import dom
from . import render as md
from .dom import h, js, q

__all__ = ["ACTIONS", "filters", "render_characters", "run_search"]

LIMIT = 50
MODES = {"keyword": "Keyword (BM25)", "semantic": "Semantic", "hybrid": "Hybrid"}
DAY_MS = 86_400_000
#: the calibrated similarity below which a semantic or hybrid hit is a weaker match: with the
#: default model a paraphrase scores at least 0.75 and an unrelated message below 0.7
FLOOR = 0.7
#: characters of a result's snippet
SNIPPET = 120


def _day_ms(value: str) -> int | None:
    """Local midnight of a ``yyyy-mm-dd`` date input, in ms (None when empty)."""
    if not value:
        return None
    y, m, d = (int(x) for x in value.split("-"))
    return int(js.Date.new(y, m - 1, d).getTime())


def filters(app: Any) -> dict[str, Any]:
    """The ``mem.search`` keyword arguments the filter controls stand for."""
    role = str(q("#search-role").value)
    character = str(q("#search-character").value)
    start, end = _day_ms(str(q("#search-from").value)), _day_ms(str(q("#search-to").value))
    ids = None
    if q("#search-this").checked and app.current:
        ids = [app.current]
    elif not q("#search-archived").checked:
        ids = [s.session_id for s in app.sessions if not s.archived]
    return {
        "mode": str(q("#search-mode").value),
        "roles": [role] if role else None,
        "session_ids": ids,
        "character_ids": [character] if character else None,
        "date_range": (start, end + DAY_MS - 1 if end is not None else None) if start or end else None,
    }


async def run_search(app: Any, query: str) -> tuple[list[tuple[Any, Any]], str]:
    """(hit, session) pairs, best first, and the mode used."""
    kw = filters(app)
    hits = [] if kw["session_ids"] == [] else await app.mem.search(query, limit=LIMIT, **kw)
    titles = {s.session_id: s for s in app.sessions}
    pairs = []
    for hit in hits:
        s = titles.get(hit.session_id) or await app.mem.sessions.get(hit.session_id)
        pairs.append((hit, s))
    return pairs, kw["mode"]


def render_characters(app: Any) -> None:
    """The character filter's options: every character with a conversation."""
    sel = q("#search-character")
    current = str(sel.value)
    chars = sorted({s.character_id for s in app.sessions})
    dom.mount(sel, h("option", {"value": ""}, "any"), [h("option", {"value": c}, c) for c in chars])
    sel.value = current if current in chars else ""


async def _search(app: Any, el: Any, ev: Any) -> None:
    query = str(q("#search-input").value).strip()
    box = q("#search-results")
    if not query:
        await _clear(app, el, ev)
        return
    pairs, mode = await run_search(app, query)
    lo, hi = calibration_of(app.mem.index.embedder)
    strong = [p for p in pairs if _strong(p[0], mode, lo, hi)]
    weaker = [p for p in pairs if not _strong(p[0], mode, lo, hi)]
    n = len(strong)
    dom.mount(
        box,
        h(
            "div",
            {"class": "head"},
            h(
                "span",
                {},
                f"{n}{'+' if len(pairs) >= LIMIT else ''} result{'s' if n != 1 else ''} for “{query}”",
            ),
            h(
                "button",
                {"type": "button", "class": "btn small ghost", "data-action": "search-clear"},
                "Clear",
            ),
        ),
        h("p", {"class": "note"}, f"{MODES.get(mode, mode)} search, best first"),
        h("ul", {}, [_item(hit, s, query) for hit, s in strong])
        if strong
        else h("p", {"class": "empty"}, "Nothing found."),
        h(
            "details",
            {"class": "weaker"},
            h("summary", {}, f"{len(weaker)} weaker match{'es' if len(weaker) != 1 else ''}"),
            h("ul", {}, [_item(hit, s, query) for hit, s in weaker]),
        )
        if weaker
        else None,
    )
    box.removeAttribute("hidden")
    q("#session-list").setAttribute("hidden", "")


def _strong(hit: Any, mode: str, lo: float, hi: float) -> bool:
    """A keyword hit always; a semantic one at or above ``FLOOR``; a hybrid one that matched a
    word, or whose meaning is that close (its raw similarity calibrated as semantic search does)."""
    b = hit.breakdown
    if mode == "semantic":
        return float(b.get("semantic", 0.0)) >= FLOOR
    if mode == "hybrid":
        calibrated = (float(b.get("similarity", 0.0)) - lo) / (hi - lo) if hi > lo else 0.0
        return float(b.get("bm25", 0.0)) > 0 or calibrated >= FLOOR
    return True


def _item(hit: Any, s: Any, query: str) -> Any:
    m = hit.message
    who = {"user": "You", "assistant": "Assistant"}.get(m.role, m.role.capitalize())
    flat = " ".join(m.text.split())
    return h(
        "li",
        {},
        h(
            "button",
            {
                "type": "button",
                "class": "hit",
                "data-action": "open",
                "data-id": s.session_id,
                "data-message": m.id,
                "title": f"score {hit.score:.3f}",
            },
            h("span", {"class": "where"}, f"{s.title} · {who}{' · archived' if s.archived else ''}"),
            h(
                "span",
                {"class": "snip"},
                [dom.node(n) for n in md.snippet(flat, matched_spans(flat, query), SNIPPET)],
            ),
        ),
    )


async def _clear(app: Any, el: Any, ev: Any) -> None:
    q("#search-input").value = ""
    q("#search-results").setAttribute("hidden", "")
    q("#session-list").removeAttribute("hidden")
    q("#search-input").focus()


async def _refine(app: Any, el: Any, ev: Any) -> None:
    """A filter changed: search again if results are showing."""
    if str(q("#search-input").value).strip() and not q("#search-results").hidden:
        await _search(app, el, ev)


ACTIONS = {"search": _search, "search-clear": _clear, "search-refine": _refine}
