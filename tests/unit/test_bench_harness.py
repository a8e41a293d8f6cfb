"""The benchmark harness's own logic: the goals table, the --huge failure report,
the generated ChatGPT export (through chatmem's real importer and index), the quality table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest

import chatmem

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path[:0] = [str(BENCH), str(BENCH / "page")]

import goals  # noqa: E402
import quality  # noqa: E402
import run  # noqa: E402
import scale  # noqa: E402
import scalegen  # noqa: E402


async def test_generated_chatgpt_export_imports_and_its_marker_is_found() -> None:
    mem = await chatmem.open()
    report = await mem.import_sessions(scalegen.chatgpt_export(250, per=100))
    hits = await mem.search(scalegen.MARKER, limit=5)
    await mem.close()
    assert (report.format, report.sessions_imported, report.messages_imported) == ("chatgpt", 3, 250)
    assert len(hits) == 1 and scalegen.MARKER in hits[0].message.text
    assert 31 <= len(hits[0].message.text.split()) <= 151  # a 30-150-word message and the marker


def _cfg() -> dict[str, Any]:
    ns = argparse.Namespace(seed=1, durability="relaxed", large=False, w8_full=False, quick=False)
    return run.config(ns)


def _results() -> run.Results:
    res = run.Results()
    res.add("W1", "append @1,000", "chatmem", [1.0, 1.0, 1.0])
    res.add("W1", "append @1,000", "rawschema", [0.9, 0.9, 0.9])  # 1.11x: met
    res.add("W2", "import 10,000", "chatmem", [2000.0], n_msgs=10_000)
    res.add("W2", "import 10,000", "rawmin", [1000.0], n_msgs=10_000)  # 50%: missed
    res.add("W4", "search 100,000 msgs", "chatmem keyword (BM25, DuckDB-Wasm)", [6.0, 7.0, 9.0])  # 7: met
    res.add(
        "W4", "search 100,000 msgs", "chatmem semantic (384-dim, approximate index)", [12.0, 14.0]
    )  # 13: met
    res.add("W4", "search 100,000 msgs", "chatmem hybrid", [20.0, 24.0])  # 22: missed
    res.extra["w4"] = {
        "first_query_cached_s": 0.8,
        "first_query_uncached_s": 12.0,
        "second_tab_s": 0.3,
        "third_tab_s": 0.7,
        "second_tab_open": {"mode": "memory"},
        "index_bytes": 90,
        "text_bytes": 100,
    }
    res.extra["w9"] = {"total_ms": 8000.0, "import_ms": 7000.0, "search_ms": 1000.0}
    return res


def test_goals_table_has_every_row_with_today_new_goal_and_status() -> None:
    table = {r["measure"]: r for r in goals.rows(_results(), _cfg(), None)}
    assert len(table) == 17
    status = {k.split(",")[0].split(" (")[0]: v["status"] for k, v in table.items()}
    assert status == {
        "first keyword search after a cold page load": "met",
        "the same with no cached index": "missed",
        "a second / third tab's first search while the first tab is open": "missed",  # the third took 0.7 s
        "keyword index size": "met",
        "keyword search p50 over 100": "met",
        "keyword search p50 over 1": "not run",
        "semantic search p50 over 100": "met",
        "hybrid search p50 over 100": "missed",
        "1": "not run",
        "W1 append @1": "met",
        "W2 import of 10": "missed",
        "W6 page ready vs bare Pyodide boot": "not run",
        "import of a 50": "met",
    }
    assert all(r["today"] and r["goal"] for r in table.values())
    assert table["W2 import of 10,000 vs `rawmin`"]["new"].startswith("50%")
    assert "--huge" in table["keyword search p50 over 1,000,000"]["new"]
    md = goals.markdown(list(table.values()))
    assert "| measure | today | new | goal | status |" in md and md.count("\n| ") == 18


class FakePage:
    """Answers the page calls of run_huge; the first search dies as an engine would."""

    def __init__(self) -> None:
        self.stored = 0
        self.calls: list[str] = []

    def reload(self) -> None:
        self.calls.append("reload")

    def long_tasks(self) -> list[float]:
        return []

    def call(self, fn: str, *args: Any, mod: str = "benchpy") -> dict[str, Any]:
        assert mod == "scalepy"
        self.calls.append(fn)
        heap = {"pyodide_wasm": 3 << 30, "js_heap_used": 50 << 20}
        if fn == "huge_fill":
            self.stored += args[0]
            return {"ms": 1000.0, "stored": self.stored, "text_bytes": self.stored * 600, "heap": heap}
        if fn in ("huge_window", "huge_export"):
            return {"ms": 10.0, "heap": heap}
        if fn == "heap":
            return heap
        if fn == "huge_first_search":
            raise RuntimeError("Error: memory access out of bounds\nmore")
        return {"heap": heap}


def test_huge_run_reports_where_it_failed_with_count_and_heap() -> None:
    page = FakePage()
    lines: list[str] = []
    out = scale.run_huge(page, 20_000, lines.append, chunk=5_000)
    f = out["failed"]
    assert f["phase"].startswith("first search") and f["stored"] == 20_000
    assert "out of bounds" in f["error"] and f["heap"]["pyodide_wasm"] == 3 << 30
    assert page.calls[-1] == "huge_close" and "huge_search" not in page.calls
    assert [p["phase"] for p in out["phases"]] == [
        "store 5,000",
        "store 10,000",
        "store 15,000",
        "store 20,000",
        "window",
        "export",
    ]
    assert out["peak"]["pyodide_wasm"] == 3 << 30
    md = scale.huge_markdown(out)
    assert "**Failed** in *first search" in md and "20,000 messages stored" in md
    rows = goals.rows(None, None, out)
    assert [r["status"] for r in rows] == ["missed"] * 6
    assert any("HUGE FAILED" in x for x in lines)


class FinishingPage(FakePage):
    """Every phase passes; the uncached restart is slow and one search blocks the page."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[float] = []

    def long_tasks(self) -> list[float]:
        tasks, self.tasks = self.tasks, []
        return tasks

    def call(self, fn: str, *args: Any, mod: str = "benchpy") -> dict[str, Any]:
        heap = {"pyodide_wasm": 150 << 20}
        if fn == "huge_restart":
            self.calls.append(f"huge_restart {args[1]}")
            ms = 2_500.0 if args[1] else 45_000.0
            return {"ms": ms, "open_ms": 400.0, "hits": 10, "phases_ms": {}, "heap": heap}
        if fn not in ("huge_first_search", "huge_search", "huge_shut", "huge_filled"):
            return super().call(fn, *args, mod=mod)
        self.calls.append(fn)
        if fn == "huge_filled":
            return {"ms": 4_000.0, "fill_ms": 9_000.0, "filled": 1_000_000, "heap": heap}
        if fn == "huge_search":
            self.tasks = [75.0]
            return {"times": [8.0], "p50": 8.0, "heap": heap}
        return {"ms": 60_000.0 if fn == "huge_first_search" else 500.0, "heap": heap}


def test_huge_run_restarts_twice_and_reports_every_goal(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the searches the page is loaded again twice: with the saved index file, then
    without it; each restart's first search, the long tasks and the peak get a goal row."""
    page = FinishingPage()
    monkeypatch.setattr(scale.RendererMemory, "sample", lambda self: {"renderer_peak": 900_000_000})
    out = scale.run_huge(page, 1_000_000, [].append, chunk=500_000)
    assert out["failed"] is None
    assert page.calls[-8:] == [
        "huge_shut",
        "reload",
        "huge_restart True",
        "huge_shut",
        "reload",
        "huge_restart False",
        "huge_filled",
        "huge_close",
    ]
    filled = [p for p in out["phases"] if p["phase"] in (scale.FILLED, scale.RESTART_FILLED)]
    assert [p["fill_ms"] for p in filled] == [9_000.0, 9_000.0]
    status = {r["measure"]: (r["status"], r["new"]) for r in goals.rows(None, None, out)}
    assert status["keyword search p50 over 1,000,000"] == ("met", "8.0 ms")
    assert status["1,000,000: first search after a restart, cached index"][0] == "met"
    assert status["1,000,000: first search after a restart, no cached index"][0] == "missed"
    assert status["1,000,000: renderer peak while storing, deriving, searching"][0] == "met"
    tasks = status["1,000,000: main-thread tasks over 50 ms"]
    assert tasks[0] == "missed" and "75 ms" in tasks[1] and "keyword search" in tasks[1]
    assert "| 1 (longest 75 ms) |" in scale.huge_markdown(out)


def test_quality_table_shows_both_runtimes_and_rank_bm25_once() -> None:
    r = {"R@5": 0.4, "R@10": 0.5, "hit@10": 0.6, "p50_ms": 3.0, "questions": 10}
    cpy = {m: r for m in (*quality.MODES, "rank_bm25")}
    page = {m: r for m in quality.MODES}
    md = quality.render_table(cpy, "model", page)
    assert md.count("Chromium") == 3 and md.count("| rank_bm25 |") == 1
    assert quality.render_table(cpy, "model").count("Chromium") == 0


@pytest.mark.parametrize("n", [1, 7])
def test_words_are_seeded(n: int) -> None:
    a, b = scalegen.Words(), scalegen.Words()
    assert [a.text() for _ in range(n)] == [b.text() for _ in range(n)]
    assert all(q.split()[0] not in a.vocab[:50] for q in a.queries(20))


def test_the_facts_bench_meets_its_goals_on_its_set() -> None:
    """``bench --facts`` (quick): the offline extractor's recall, stale and junk rates on the
    conversation set against the goals, its speed on CPython and in the page, the LLM
    extractor's speed apart from its model, and a table that shows them."""
    import facts_quality

    res = facts_quality.run_facts(quick=True)
    q = res["offline"]["quality"]
    assert (
        q["recall"] >= facts_quality.GOALS["recall"]
        and q["stale"] == 0
        and q["junk"] <= facts_quality.GOALS["junk"]
    ), q
    speed = res["offline"]["speed"]
    assert speed["messages"] == 2_000 and speed["current"] == {"home": "Vienna", "job": "architect"}
    assert res["offline"]["page"]["messages"] == 2_000, "the page read the same history"
    assert res["llm"]["speed"]["messages"] == 2_000 and res["llm"]["speed"]["requests"] == 40
    table = facts_quality.render_facts(res)
    assert "| offline |" in table and "recall" in table and "in the page" in table
    assert "| llm (a local server answering at once) | needs a model" in table
