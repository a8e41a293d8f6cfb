"""Retrieval quality on LoCoMo (``shared/quality/locomo-dev``), on CPython and in the page.

Each conversation goes into its own chatmem ``Memory`` (one session per LoCoMo
session, ``Speaker: text`` as the content, a shared photo's caption appended,
the session's date as ``created_at``). Every question of categories 1-4 is
asked within its conversation; a hit is an evidence turn (``dia_id``). Reports
R@5, R@10, hit@10 and the median query latency of chatmem's ``keyword``,
``semantic`` and ``hybrid`` modes, and of rank_bm25's ``BM25Okapi`` over the
same texts (tokenised by chatmem's ``words``: unstemmed), in the same run.
The ``filtered`` rows ask the same questions of one memory holding every
conversation, each conversation a character (``character_ids=[its name]``):
a companion's recall across its own sessions, beside the others'.
``run_page`` asks the same questions in the page (this module is copied into
the bench page's Pyodide): each conversation stored in IndexedDB, searched
through DuckDB-Wasm; rank_bm25 needs numpy, which the page does not ship, so
its row comes from the CPython side of the same run.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import chatmem
from chatmem.text.tokenize import words

__all__ = [
    "locomo_dir",
    "load_conversations",
    "run_quality",
    "run_page",
    "render_table",
    "store_conversation",
    "ask_chatmem",
    "ask_filtered",
    "ask_bm25",
    "summarize",
]

MODES = ("keyword", "semantic", "hybrid")
#: the same modes over one memory of every conversation, filtered to the asking one's
FILTERED = tuple(f"{m}, filtered" for m in MODES)


def locomo_dir() -> Path:
    """``quality/locomo-dev`` of the shared folder: ``$CHATMEM_SHARED`` or a ``shared/``
    beside the repository (searched upward)."""
    env = os.environ.get("CHATMEM_SHARED")
    if env:
        return Path(env) / "quality" / "locomo-dev"
    here = Path(__file__).resolve()
    for base in here.parents:
        cand = base / "shared" / "quality" / "locomo-dev"
        if cand.is_dir():
            return cand
    raise SystemExit("LoCoMo data not found: set CHATMEM_SHARED to the shared/ folder")


def _ms(date: str) -> int:
    return int(datetime.strptime(date, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC).timestamp() * 1000)


def load_conversations(limit: int | None = None) -> list[dict[str, Any]]:
    """``[{name, speakers, sessions: [(created_ms, [turn...])], questions}]``."""
    out = []
    for f in sorted(locomo_dir().glob("*.json"))[:limit]:
        c = json.loads(f.read_text("utf-8"))
        sessions = []
        n = 1
        while f"session_{n}" in c:
            if c[f"session_{n}"]:
                sessions.append((_ms(c[f"session_{n}_date_time"]), c[f"session_{n}"]))
            n += 1
        qs = [q for q in c["qa"] if q.get("category") in (1, 2, 3, 4) and q.get("evidence")]
        out.append(
            {
                "name": f.stem,
                "speakers": (c["speaker_a"], c["speaker_b"]),
                "sessions": sessions,
                "questions": qs,
            }
        )
    return out


def turn_text(t: dict[str, Any]) -> str:
    text = f"{t['speaker']}: {t['text']}"
    if t.get("blip_caption"):
        text += f" [shares a photo: {t['blip_caption']}]"
    return text


def _score(evidence: set[str], got: list[str], acc: dict[str, list[float]]) -> None:
    acc["R@5"].append(len(evidence & set(got[:5])) / len(evidence))
    acc["R@10"].append(len(evidence & set(got[:10])) / len(evidence))
    acc["hit@10"].append(1.0 if evidence & set(got[:10]) else 0.0)


async def store_conversation(mem: Any, conv: dict[str, Any]) -> tuple[dict[str, str], list[str], list[str]]:
    """Store one conversation through ``mem``; (message id -> dia_id, texts, their dia_ids)."""
    dia_of: dict[str, str] = {}
    texts: list[str] = []
    dias: list[str] = []
    a, _b = conv["speakers"]
    for i, (created, turns) in enumerate(conv["sessions"]):
        s = await mem.sessions.create(title=f"session {i + 1}", character_id=conv["name"], created_at=created)
        items = [
            {
                "role": "user" if t["speaker"] == a else "assistant",
                "content": turn_text(t),
                "created_at": created + j * 1000,
            }
            for j, t in enumerate(turns)
        ]
        for t, m in zip(turns, await mem.messages.append_many(s.session_id, items)):
            dia_of[m.id] = t["dia_id"]
            texts.append(m.text)
            dias.append(t["dia_id"])
    return dia_of, texts, dias


async def ask_chatmem(
    mem: Any,
    conv: dict[str, Any],
    dia_of: dict[str, str],
    res: dict[str, dict[str, list[float]]],
    *,
    filtered: bool = False,
) -> None:
    """Every question of ``conv`` in each of chatmem's modes, scored into ``res``
    (``filtered``: asked of a memory of every conversation, with ``conv``'s character)."""
    await mem.search("warm up", mode="hybrid", limit=10)  # builds the index and embeds every message
    chars = [conv["name"]] if filtered else None
    for q in conv["questions"]:
        ev = set(q["evidence"])
        for mode in MODES:
            t0 = time.perf_counter()
            hits = await mem.search(q["question"], mode=mode, limit=10, character_ids=chars)
            row = f"{mode}, filtered" if filtered else mode
            res[row]["ms"].append((time.perf_counter() - t0) * 1000)
            _score(ev, [dia_of[h.message.id] for h in hits], res[row])


async def ask_filtered(mem: Any, convs: list[dict[str, Any]], res: dict[str, dict[str, list[float]]]) -> None:
    """Every conversation stored in ``mem`` (one character each), then each one's
    questions asked with its character as the filter."""
    dia_of: dict[str, str] = {}
    for conv in convs:
        dia_of.update((await store_conversation(mem, conv))[0])
    for conv in convs:
        await ask_chatmem(mem, conv, dia_of, res, filtered=True)


def ask_bm25(
    conv: dict[str, Any], texts: list[str], dias: list[str], res: dict[str, dict[str, list[float]]]
) -> None:
    """The same questions through rank_bm25's BM25Okapi over the same texts (CPython: it needs numpy)."""
    from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]

    bm = BM25Okapi([words(t) or ["_"] for t in texts])
    for q in conv["questions"]:
        t0 = time.perf_counter()
        scores = bm.get_scores(words(q["question"]))
        top = sorted(range(len(texts)), key=lambda i: -scores[i])[:10]
        res["rank_bm25"]["ms"].append((time.perf_counter() - t0) * 1000)
        _score(set(q["evidence"]), [dias[i] for i in top], res["rank_bm25"])


def _empty(systems: tuple[str, ...]) -> dict[str, dict[str, list[float]]]:
    return {m: {"R@5": [], "R@10": [], "hit@10": [], "ms": []} for m in systems}


def summarize(res: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """Means of R@5, R@10, hit@10 and the median latency per system."""
    out: dict[str, dict[str, float]] = {}
    for m, acc in res.items():
        out[m] = {k: round(statistics.fmean(v), 4) for k, v in acc.items() if k != "ms"}
        out[m]["p50_ms"] = round(statistics.median(acc["ms"]), 2)
        out[m]["questions"] = len(acc["R@10"])
    return out


async def _run(limit: int | None) -> dict[str, dict[str, float]]:
    res = _empty((*MODES, *FILTERED, "rank_bm25"))
    convs = load_conversations(limit)
    for conv in convs:
        mem = await chatmem.open(f"locomo-{conv['name']}")
        dia_of, texts, dias = await store_conversation(mem, conv)
        await ask_chatmem(mem, conv, dia_of, res)
        ask_bm25(conv, texts, dias, res)
        await mem.close()
    mem = await chatmem.open("locomo-all")
    await ask_filtered(mem, convs, res)
    await mem.close()
    return summarize(res)


async def run_page(convs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """In the page (Pyodide): each conversation stored in its own IndexedDB database,
    the same questions in chatmem's modes; the databases and index files are removed after."""
    from chatmem.runtime import page as _browser

    res = _empty((*MODES, *FILTERED))

    async def fresh(name: str) -> Any:
        cache = _browser.index_cache_path(name).removeprefix("opfs://")
        await _browser.drop_database(name)
        await _browser.opfs_remove(cache)
        return await chatmem.open(name)

    async def remove(name: str) -> None:
        await _browser.drop_database(name)
        await _browser.opfs_remove(_browser.index_cache_path(name).removeprefix("opfs://"))

    for conv in convs:
        name = f"locomo-{conv['name']}"
        mem = await fresh(name)
        dia_of, _texts, _dias = await store_conversation(mem, conv)
        await ask_chatmem(mem, conv, dia_of, res)
        await mem.close()
        await remove(name)
    mem = await fresh("locomo-all")
    await ask_filtered(mem, convs, res)
    await mem.close()
    await remove("locomo-all")
    return summarize(res)


def run_quality(limit: int | None = None) -> dict[str, dict[str, float]]:
    """The table, as ``{mode: {R@5, R@10, hit@10, p50_ms, questions}}``."""
    return asyncio.run(_run(limit))


WHERE = {
    "cpython": "CPython (memory store, duckdb)",
    "chromium": "Chromium (Pyodide, IndexedDB, DuckDB-Wasm)",
}


def render_table(
    res: dict[str, dict[str, float]], embedder: str, page: dict[str, dict[str, float]] | None = None
) -> str:
    """One row per system and runtime; rank_bm25 (pure Python over numpy) runs on CPython only."""
    lines = [
        f"| LoCoMo dev, top 10 ({embedder}) | where | R@5 | R@10 | hit@10 | p50 ms |",
        "|---|---|---|---|---|---|",
    ]
    runs = [("cpython", res)] + ([("chromium", page)] if page else [])
    for m in (*MODES, *FILTERED, "rank_bm25"):
        for where, rs in runs:
            r = rs.get(m)
            if r:
                place = "CPython (the same texts)" if m == "rank_bm25" else WHERE[where]
                if m in FILTERED:
                    place += ", every conversation in one memory"
                lines.append(
                    f"| {m} | {place} | {r['R@5']:.3f} | {r['R@10']:.3f} | {r['hit@10']:.3f} "
                    f"| {r['p50_ms']:.2f} |"
                )
    return "\n".join(lines)
