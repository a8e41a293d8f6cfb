"""Insights: messages and tokens per day, and per character, as a small chart
drawn here in SVG. Built on ``mem.sql`` when this build has it; otherwise the
same numbers are counted from ``mem.messages`` (and labelled so)."""

from __future__ import annotations

import time
from typing import Any

from . import dom
from .dom import h
from .render import Node

__all__ = ["render", "bar_chart", "per_day", "ACTIONS"]

DAY_MS = 86_400_000
DAYS = 14

SQL_PER_DAY = """
SELECT created_at // 86400000 AS day, count(*) AS messages, coalesce(sum(token_count), 0) AS tokens
FROM messages WHERE created_at >= ? GROUP BY day ORDER BY day
"""
SQL_PER_CHARACTER = """
SELECT s.character_id AS character, count(*) AS messages, coalesce(sum(m.token_count), 0) AS tokens
FROM messages m JOIN sessions s ON s.session_id = m.session_id
GROUP BY s.character_id ORDER BY messages DESC LIMIT 10
"""


def bar_chart(values: list[tuple[str, int]], *, width: int = 320, height: int = 140, title: str = "") -> Node:
    """A labelled bar chart as an SVG element tree (pure: testable on CPython)."""
    pad_l, pad_b, pad_t = 26, 18, 8
    n = max(1, len(values))
    top = max([v for _, v in values] + [1])
    bw = (width - pad_l) / n
    kids: list[Any] = [("title", {}, [title])] if title else []
    kids.append(("line", {"class": "axis", "x1": pad_l, "y1": height - pad_b, "x2": width, "y2": height - pad_b}, []))
    kids.append(("text", {"x": 0, "y": pad_t + 8}, [str(top)]))
    kids.append(("text", {"x": 0, "y": height - pad_b}, ["0"]))
    for i, (label, v) in enumerate(values):
        bh = (height - pad_b - pad_t) * v / top
        x = pad_l + i * bw
        kids.append(("rect", {"class": "bar-rect", "x": f"{x + 1:.1f}", "y": f"{height - pad_b - bh:.1f}",
                              "width": f"{max(bw - 2, 1):.1f}", "height": f"{bh:.1f}", "rx": 2},
                     [("title", {}, [f"{label}: {v}"])]))
        if n <= 16 and (i % 2 == 0 or n <= 8):
            kids.append(("text", {"x": f"{x + bw / 2:.1f}", "y": height - 4, "text-anchor": "middle"}, [label]))
    return ("svg", {"class": "chart", "viewBox": f"0 0 {width} {height}", "role": "img",
                    "aria-label": title or "chart"}, kids)


def per_day(rows: list[dict[str, Any]], today: int, days: int = DAYS) -> list[tuple[int, int, int]]:
    """(day number, messages, tokens) for each of the last ``days`` days, zeros filled in."""
    by = {int(r["day"]): (int(r["messages"]), int(r["tokens"])) for r in rows}
    return [(d, *by.get(d, (0, 0))) for d in range(today - days + 1, today + 1)]


async def _counts(app: Any, since: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    if app.features["sql"]:
        days = await app.mem.sql(SQL_PER_DAY, [since])
        chars = await app.mem.sql(SQL_PER_CHARACTER)
        return list(days), list(chars), "From the query index (mem.sql)."
    day: dict[int, list[int]] = {}
    char: dict[str, list[int]] = {}
    for s in await app.mem.sessions.list(limit=None, archived=None):
        for m in await app.mem.messages.list(s.session_id, limit=None):
            c = char.setdefault(s.character_id, [0, 0])
            c[0] += 1
            c[1] += m.token_count
            if m.created_at >= since:
                d = day.setdefault(m.created_at // DAY_MS, [0, 0])
                d[0] += 1
                d[1] += m.token_count
    days_rows = [{"day": k, "messages": v[0], "tokens": v[1]} for k, v in sorted(day.items())]
    char_rows = [{"character": k, "messages": v[0], "tokens": v[1]}
                 for k, v in sorted(char.items(), key=lambda kv: -kv[1][0])[:10]]
    return days_rows, char_rows, "Counted from your messages (the query index, mem.sql, is not in this build)."


async def render(app: Any, body: Any) -> None:
    today = int(time.time() * 1000) // DAY_MS
    days_rows, char_rows, how = await _counts(app, (today - DAYS + 1) * DAY_MS)
    series = per_day(days_rows, today)

    def label(d: int) -> str:
        return str(dom.js.Date.new(d * DAY_MS).getUTCDate())

    msgs = [(label(d), m) for d, m, _ in series]
    toks = [(label(d), t) for d, _, t in series]
    dom.append(body,
               h("h3", {}, f"Messages per day (last {DAYS} days)"),
               dom.svg_node(bar_chart(msgs, title="Messages per day")),
               h("h3", {}, "Tokens per day"),
               dom.svg_node(bar_chart(toks, title="Tokens per day")),
               h("h3", {}, "Per character"),
               h("ul", {"class": "ctx-list"},
                 [h("li", {}, h("span", {"class": "r"}, str(r["character"])),
                    h("span", {"class": "x"}, f"{r['messages']} messages"),
                    h("span", {"class": "n"}, f"{r['tokens']:,} tokens")) for r in char_rows])
               if char_rows else h("p", {"class": "note"}, "No messages yet."),
               h("p", {"class": "note"}, how))


ACTIONS: dict[str, Any] = {}
