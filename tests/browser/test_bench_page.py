"""The bench page's large-history cases in real Chromium, at a tiny size: the
``--huge`` phases with the memory figures, and W9's ChatGPT import to searchable."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path[:0] = [str(BENCH)]

import run  # noqa: E402
import scale  # noqa: E402


class BenchPage:
    """What scale.py needs of run.Browser, over a page of the shared context."""

    def __init__(self, page: Any):
        self.page = page
        self.lines: list[str] = []

    def log(self, line: str) -> None:
        self.lines.append(line)

    py = run.Browser.py
    call = run.Browser.call
    reload = run.Browser.reload
    long_tasks = run.Browser.long_tasks


def test_huge_phases_and_chatgpt_import_in_the_bench_page(context: Any, dist: Path, site: str) -> None:
    run.assemble_page(dist)
    page = context.new_page()
    page.set_default_timeout(600_000)
    page.goto(site + "bench/index.html")
    page.evaluate("window.benchReady")
    b = BenchPage(page)

    out = scale.run_huge(b, 300, b.log, chunk=150, queries=5, per_session=50)
    assert out["failed"] is None, out["failed"]["error"][-1500:]
    phases = {p["phase"]: p for p in out["phases"]}
    assert list(phases) == [
        "store 150",
        "store 300",
        "window",
        "export",
        "first search (index derived from the store)",
        scale.FILLED,
        "keyword search x5",
        "close (the index file saved)",
        scale.RESTART_CACHED,
        "close again",
        scale.RESTART_UNCACHED,
        scale.RESTART_FILLED,
    ]
    # a store this small keeps its texts in the derivation: nothing to fill afterwards
    assert phases[scale.FILLED]["fill_ms"] == 0 and phases[scale.RESTART_FILLED]["filled"] == 0
    # the restarts found the store again; only the one without the index file derived it
    cached, uncached = phases[scale.RESTART_CACHED], phases[scale.RESTART_UNCACHED]
    assert cached["hits"] > 0 and uncached["hits"] > 0
    assert "derive: rebuild" in uncached["phases_ms"] and "derive: rebuild" not in cached["phases_ms"]
    assert all(isinstance(p["long_tasks"], list) for p in out["phases"])
    assert phases["store 300"]["stored"] == 300 and out["text_bytes"] > 300 * 30 * 3
    assert phases["export"]["chars"] > out["text_bytes"]  # every text is in the export
    assert phases["window"]["kept"] > 0 and phases["first search (index derived from the store)"]["hits"] > 0
    assert len(phases["keyword search x5"]["times"]) == 5
    assert out["peak"]["pyodide_wasm"] > 0 and out["peak"]["renderer_peak"] > 0
    assert "duckdb_buffer" in phases["keyword search x5"]["heap"]
    assert "| keyword search x5 | p50" in scale.huge_markdown(out)

    res = run.Results()
    scale.w9(b, {"w9_messages": 200}, res)
    w9 = res.extra["w9"]
    assert w9["found"] and w9["messages"] == 200 and w9["total_ms"] >= w9["import_ms"]
    page.close()
