"""Statistics, the markdown table and one SVG chart per workload (standard library only)."""

from __future__ import annotations

import html
import math
import statistics
from typing import Any, Iterable

__all__ = ["stats", "markdown", "svg_chart", "fmt"]


def _pct(sorted_xs: list[float], p: float) -> float:
    if not sorted_xs:
        return math.nan
    k = (len(sorted_xs) - 1) * p
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (k - lo)


def stats(xs: Iterable[float]) -> dict[str, float]:
    s = sorted(xs)
    return {
        "n": len(s),
        "p50": _pct(s, 0.5),
        "p95": _pct(s, 0.95),
        "p99": _pct(s, 0.99),
        "min": s[0] if s else math.nan,
        "max": s[-1] if s else math.nan,
        "mean": statistics.fmean(s) if s else math.nan,
        "iqr": _pct(s, 0.75) - _pct(s, 0.25),
    }


def fmt(x: float | None, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if abs(x) >= 1000:
        s = f"{x:,.0f}"
    elif abs(x) >= 100:
        s = f"{x:.0f}"
    elif abs(x) >= 10:
        s = f"{x:.1f}"
    elif abs(x) >= 0.1 or x == 0:
        s = f"{x:.2f}"
    elif abs(x) >= 0.01:
        s = f"{x:.3f}"
    else:
        s = f"{x:.4f}"
    return s + unit


def markdown(rows: list[dict[str, Any]]) -> str:
    """One table: workload, case, system, p50 (spread), throughput, ratio columns."""
    out = [
        "| workload | case | system | p50 | p95 / p99 (spread) | n | throughput | vs raw | chatmem ÷ this |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        spread = (
            f"{fmt(r['p95'])} / {fmt(r['p99'])}"
            if r["workload"] == "W1"
            else f"IQR {fmt(r['iqr'])}, max {fmt(r['max'])}"
        )
        thr = f"{r['throughput']:,.0f} msg/s" if r.get("throughput") else ""
        out.append(
            f"| {r['workload']} | {r['case']} | {r['system']} | {fmt(r['p50'])} ms | {spread} | {r['n']} | {thr} "
            f"| {fmt(r.get('vs_raw'), 'x') if r.get('vs_raw') else ''} "
            f"| {fmt(r.get('chatmem_over'), 'x') if r.get('chatmem_over') else ''} |"
        )
    return "\n".join(out) + "\n"


COLORS = {
    "chatmem": "#2f6fdb",
    "raw": "#444444",
    "rawmin": "#888888",
    "dexie": "#2a9d5c",
    "rewrite": "#d9822b",
    "pyscript": "#8e44ad",
    "LangChain": "#c0392b",
}


def _color(system: str) -> str:
    for k, c in COLORS.items():
        if system.startswith(k):
            return c
    return "#555555"


def svg_chart(title: str, rows: list[dict[str, Any]]) -> str:
    """Horizontal bars of p50 (log scale), grouped by case, labelled with the value."""
    rows = [r for r in rows if r["p50"] and r["p50"] > 0 and not math.isnan(r["p50"])]
    bar, gap, left, width = 16, 4, 330, 420
    lo = min(r["p50"] for r in rows) / 2
    hi = max(r["p95"] if not math.isnan(r["p95"]) else r["p50"] for r in rows) * 1.5

    def scale(v: float) -> float:
        return left + width * (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    y = 40
    parts = []
    case = None
    for r in rows:
        if (r["where"], r["case"]) != case:
            case = (r["where"], r["case"])
            y += 10
            where = "Chromium" if r["where"] == "chromium" else "CPython"
            parts.append(
                f'<text x="8" y="{y + 10}" font-weight="bold">{html.escape(r["case"])} ({where})</text>'
            )
            y += 18
        x1 = scale(r["p50"])
        parts.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{html.escape(r["system"])}</text>')
        parts.append(
            f'<rect x="{left}" y="{y}" width="{x1 - left:.1f}" height="{bar}" fill="{_color(r["system"])}"/>'
        )
        if not math.isnan(r["p95"]) and r["p95"] > r["p50"]:
            x2 = scale(r["p95"])
            parts.append(
                f'<line x1="{x1:.1f}" y1="{y + bar / 2}" x2="{x2:.1f}" y2="{y + bar / 2}" stroke="#000" stroke-width="1"/>'
            )
            parts.append(f'<line x1="{x2:.1f}" y1="{y + 3}" x2="{x2:.1f}" y2="{y + bar - 3}" stroke="#000"/>')
        parts.append(
            f'<text x="{max(x1, scale(r["p95"]) if not math.isnan(r["p95"]) else x1) + 6:.1f}" y="{y + 12}">{fmt(r["p50"])} ms</text>'
        )
        y += bar + gap
    h = y + 30
    ticks = []
    e = math.floor(math.log10(lo))
    while 10**e <= hi:
        v = 10**e
        if v >= lo:
            x = scale(v)
            ticks.append(
                f'<line x1="{x:.1f}" y1="34" x2="{x:.1f}" y2="{h - 24}" stroke="#ddd"/>'
                f'<text x="{x:.1f}" y="{h - 10}" text-anchor="middle" fill="#666">{fmt(float(v))} ms</text>'
            )
        e += 1
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 110}" height="{h}" '
        f'font-family="system-ui, sans-serif" font-size="12">'
        f'<rect width="100%" height="100%" fill="#fff"/>'
        f'<text x="8" y="22" font-size="15" font-weight="bold">{html.escape(title)}</text>'
        f'<text x="{left + width + 100}" y="22" text-anchor="end" fill="#666">p50 bar, p95 whisker; log scale</text>'
        + "".join(ticks)
        + "".join(parts)
        + "</svg>\n"
    )
