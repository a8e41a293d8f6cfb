"""Small charts as SVG element trees (pure Python: testable on CPython)."""

from __future__ import annotations

from typing import Any

from .render import Node

__all__ = ["DAYS", "DAY_MS", "bar_chart", "per_day"]

DAY_MS = 86_400_000
DAYS = 14


def bar_chart(values: list[tuple[str, int]], *, width: int = 320, height: int = 140, title: str = "") -> Node:
    """A labelled bar chart as an SVG element tree (pure: testable on CPython)."""
    pad_l, pad_b, pad_t = 26, 18, 8
    n = max(1, len(values))
    top = max([v for _, v in values] + [1])
    bw = (width - pad_l) / n
    kids: list[Any] = [("title", {}, [title])] if title else []
    kids.append(
        ("line", {"class": "axis", "x1": pad_l, "y1": height - pad_b, "x2": width, "y2": height - pad_b}, [])
    )
    kids.append(("text", {"x": 0, "y": pad_t + 8}, [str(top)]))
    kids.append(("text", {"x": 0, "y": height - pad_b}, ["0"]))
    for i, (label, v) in enumerate(values):
        bh = (height - pad_b - pad_t) * v / top
        x = pad_l + i * bw
        kids.append(
            (
                "rect",
                {
                    "class": "bar-rect",
                    "x": f"{x + 1:.1f}",
                    "y": f"{height - pad_b - bh:.1f}",
                    "width": f"{max(bw - 2, 1):.1f}",
                    "height": f"{bh:.1f}",
                    "rx": 2,
                },
                [("title", {}, [f"{label}: {v}"])],
            )
        )
        if n <= 16 and (i % 2 == 0 or n <= 8):
            kids.append(
                ("text", {"x": f"{x + bw / 2:.1f}", "y": height - 4, "text-anchor": "middle"}, [label])
            )
    return (
        "svg",
        {"class": "chart", "viewBox": f"0 0 {width} {height}", "role": "img", "aria-label": title or "chart"},
        kids,
    )


def per_day(rows: list[dict[str, Any]], today: int, days: int = DAYS) -> list[tuple[int, int, int]]:
    """(day number, messages, tokens) for each of the last ``days`` days, zeros filled in."""
    by = {int(r["day"]): (int(r["messages"]), int(r["tokens"])) for r in rows}
    return [(d, *by.get(d, (0, 0))) for d in range(today - days + 1, today + 1)]
