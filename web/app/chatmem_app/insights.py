"""Insights: messages and tokens per day and per character, from the query
index (``mem.sql``), drawn here as small SVG bar charts."""

from __future__ import annotations

import time
from typing import Any

from . import dom
from .chart import DAY_MS, DAYS, bar_chart, per_day
from .dom import h

__all__ = ["ACTIONS", "SQL_PER_CHARACTER", "SQL_PER_DAY", "render"]

#: days are UTC days (created_at is ms since the epoch)
SQL_PER_DAY = """
SELECT created_at // 86400000 AS day, count(*) AS messages, coalesce(sum(token_count), 0) AS tokens
FROM messages WHERE created_at >= ? GROUP BY day ORDER BY day
"""
SQL_PER_CHARACTER = """
SELECT s.character_id AS character, count(m.id) AS messages, coalesce(sum(m.token_count), 0) AS tokens,
       count(DISTINCT s.session_id) AS sessions
FROM sessions s LEFT JOIN messages m ON m.session_id = s.session_id
GROUP BY s.character_id ORDER BY messages DESC, character LIMIT 10
"""


async def render(app: Any, body: Any) -> None:
    today = int(time.time() * 1000) // DAY_MS
    days_rows = await app.mem.sql(SQL_PER_DAY, [(today - DAYS + 1) * DAY_MS])
    char_rows = await app.mem.sql(SQL_PER_CHARACTER)
    series = per_day(days_rows, today)

    def label(d: int) -> str:
        return str(dom.js.Date.new(d * DAY_MS).getUTCDate())

    msgs = [(label(d), m) for d, m, _ in series]
    toks = [(label(d), t) for d, _, t in series]
    per_char = [(str(r["character"]), int(r["messages"])) for r in char_rows]
    dom.append(
        body,
        h("h3", {}, f"Messages per day (last {DAYS} days)"),
        dom.svg_node(bar_chart(msgs, title="Messages per day")),
        h("h3", {}, "Tokens per day"),
        dom.svg_node(bar_chart(toks, title="Tokens per day")),
        h("h3", {}, "Per character"),
        dom.svg_node(bar_chart(per_char, title="Messages per character")) if per_char else None,
        h(
            "ul",
            {"class": "ctx-list", "id": "insights-characters"},
            [
                h(
                    "li",
                    {"title": f"{r['sessions']} conversation{'s' if r['sessions'] != 1 else ''}"},
                    h("span", {"class": "r"}, str(r["character"])),
                    h("span", {"class": "x"}, f"{r['messages']} messages"),
                    h("span", {"class": "n"}, f"{int(r['tokens']):,} tokens"),
                )
                for r in char_rows
            ],
        )
        if char_rows
        else h("p", {"class": "note"}, "No messages yet."),
        h("p", {"class": "note"}, "Counted over every conversation on this device."),
    )


ACTIONS: dict[str, Any] = {}
