"""The runs of the bench that stand apart from the workload table: ``--quality``
(LoCoMo retrieval quality, CPython and the page) and ``--huge`` (one very large
history in one page). run.py parses the arguments and passes ``open_page``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import goals
import scale

__all__ = ["quality_main", "huge_main"]

OpenPage = Callable[..., tuple[Any, Callable[[], None]]]


def quality_main(args: argparse.Namespace, open_page: OpenPage, log: Callable[[str], None]) -> int:
    """``--quality``: the LoCoMo table (see quality.py) on CPython and, unless ``--no-browser``,
    in the page in the same run; printed and written to quality.md/json."""
    import quality

    from chatmem.embedding import default_embedder

    t0 = time.perf_counter()
    res = quality.run_quality(args.conversations)
    log(f"quality on CPython: {time.perf_counter() - t0:.0f} s")
    page = None
    if not args.no_browser:
        convs = quality.load_conversations(args.conversations)
        b, stop = open_page()
        try:
            t1 = time.perf_counter()
            b.page.evaluate("d => { window.benchLocomo = d; }", json.dumps(convs))
            page = b.py("import json, js, quality\nawait quality.run_page(json.loads(js.window.benchLocomo))")
            log(f"quality in the page: {time.perf_counter() - t1:.0f} s")
        finally:
            stop()
    table = quality.render_table(res, default_embedder().model, page)
    recall = None
    if not args.conversations:
        # the approximate index against exact search, LoCoMo inside 100,000 other messages
        sys.path.insert(0, str(Path(__file__).resolve().parent / "search"))
        import nearest_recall

        t2 = time.perf_counter()
        recall = nearest_recall.run_recall()
        log(f"approximate index recall: {time.perf_counter() - t2:.0f} s")
        table += "\n" + nearest_recall.render_rows(recall)
    print(table)
    log(f"quality run: {time.perf_counter() - t0:.0f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "quality.json").write_text(
        json.dumps(
            {"date": time.strftime("%Y-%m-%d %H:%M"), "results": res, "page": page, "nearest": recall},
            indent=1,
        )
    )
    (args.out / "quality.md").write_text(table + "\n")
    return 0


def facts_main(args: argparse.Namespace, log: Callable[[str], None]) -> int:
    """``--facts``: the facts table (see facts_quality.py); printed and written to facts.md/json."""
    import facts_quality

    t0 = time.perf_counter()
    res = facts_quality.run_facts(quick=args.quick)
    table = facts_quality.render_facts(res)
    print(table)
    log(f"facts run: {time.perf_counter() - t0:.0f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "facts.json").write_text(
        json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "results": res}, indent=1)
    )
    (args.out / "facts.md").write_text(table + "\n")
    return 0


def huge_main(args: argparse.Namespace, open_page: OpenPage, cpu: str, log: Callable[[str], None]) -> int:
    """``--huge``: ``--huge-n`` messages in one page (scale.run_huge); writes huge.json and huge.md.
    The profile is on disk: an in-memory context's quota (a share of the RAM) ends the run
    before 1,000,000 messages are stored."""
    b, stop = open_page(on_disk=True)
    t0 = time.perf_counter()
    try:
        env = {"date": time.strftime("%Y-%m-%d %H:%M"), "cores": os.cpu_count(), "cpu": cpu, **b.env()}
        log(
            f"--huge: {args.huge_n:,} messages in one page (Chromium {env['chromium']}, Pyodide {env['pyodide']})"
        )
        h = scale.run_huge(b, args.huge_n, log)
    finally:
        stop()
    h["env"], h["wall_s"] = env, time.perf_counter() - t0
    rows = goals.rows(None, None, h)
    md = scale.huge_markdown(h) + "\n" + goals.markdown(rows, huge_only=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "huge.json").write_text(json.dumps({**h, "goals": rows}, indent=1, default=str) + "\n")
    (args.out / "huge.md").write_text(md)
    print("\n" + md)
    log(f"--huge took {h['wall_s'] / 60:.1f} min; wrote {args.out}/huge.json and huge.md")
    return 0
