"""Insights: messages and tokens per day, and per character, as a small chart
drawn here in SVG. Built on ``mem.sql`` when this build has it; otherwise the
same numbers are counted from ``mem.messages`` (and labelled so)."""

from __future__ import annotations

import time
from typing import Any

from . import dom
from .dom import h
from .chart import bar_chart, per_day

__all__ = ["render", "ACTIONS"]

from .chart import DAY_MS, DAYS

SQL_PER_DAY = """
SELECT created_at // 86400000 AS day, count(*) AS messages, coalesce(sum(token_count), 0) AS tokens
FROM messages WHERE created_at >= ? GROUP BY day ORDER BY day
"""
SQL_PER_CHARACTER = """
SELECT s.character_id AS character, count(*) AS messages, coalesce(sum(m.token_count), 0) AS tokens
FROM messages m JOIN sessions s ON s.session_id = m.session_id
GROUP BY s.character_id ORDER BY messages DESC LIMIT 10
"""


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
