"""``python build.py bench --facts``: how well and how fast facts are learnt.

Quality on the conversation set in ``bench/facts/personas.json`` (invented people
whose facts change over time, with small talk, questions, hypotheticals,
reported speech and assistant lines that must teach nothing), per extractor:

- **recall**: the share of each person's current facts that are active at the end;
- **stale**: the share of ended facts (a value replaced, a pet that died, a city
  only wished for or said by someone else) that are still active;
- **junk**: the share of active facts that are not among the current ones.

Speed: user messages read per second by ``mem.facts.extract`` over a long history
of one person (``history``: eras of a home, a job and likes, with a statement in
about one message of twenty and small talk in the rest), on CPython and in the
page (Pyodide and IndexedDB in Chromium), where the longest task the page's main
thread ran while learning is recorded too (goal: none over 50 ms, so learning in
the background never makes the page stutter). The LLM extractor's quality is its
model's, so it has a speed row only: against a local server that answers at once,
what reading costs besides the model's time.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import chatmem
from chatmem.facts.rules import same_value

__all__ = ["run_facts", "render_facts", "GOALS"]

SET = Path(__file__).resolve().parent / "facts" / "personas.json"
#: the offline extractor's goals (issue: recall >= 0.9, stale 0, junk <= 2%)
GOALS = {"recall": 0.9, "stale": 0.0, "junk": 0.02}
DAY = 86_400_000


def load() -> list[dict[str, Any]]:
    return list(json.loads(SET.read_text())["personas"])


async def _learn(persona: dict[str, Any], extractor: Any) -> list[chatmem.Fact]:
    """One person's conversations, a day apart, then one extraction; the active facts."""
    mem = await chatmem.open()
    mem.facts.configure(extractor=extractor)
    t = 1_700_000_000_000
    for i, lines in enumerate(persona["sessions"]):
        s = await mem.sessions.create(title=f"{persona['name']} {i}")
        items = [
            {"role": r, "content": c, "created_at": t + i * DAY + j * 1000} for j, (r, c) in enumerate(lines)
        ]
        await mem.messages.append_many(s.session_id, items)
    await mem.facts.extract()
    facts = await mem.facts.list()
    await mem.close()
    return facts


def _has(facts: list[chatmem.Fact], key: str, value: str) -> bool:
    return any(f.key == key and same_value(f.value, value) for f in facts)


async def _quality(extractor: Any) -> dict[str, Any]:
    current = ended = found = stale = active = junk = 0
    per: list[dict[str, Any]] = []
    for p in load():
        facts = await _learn(p, extractor)
        want = [(k, v) for k, v in p["current"]]
        got = sum(_has(facts, k, v) for k, v in want)
        old = sum(_has(facts, k, v) for k, v in p["ended"])
        extra = [
            f"{f.key}={f.value}"
            for f in facts
            if not any(f.key == k and same_value(f.value, v) for k, v in want)
        ]
        current, ended, found, stale = current + len(want), ended + len(p["ended"]), found + got, stale + old
        active, junk = active + len(facts), junk + len(extra)
        per.append({"name": p["name"], "current": len(want), "found": got, "stale": old, "junk": extra})
    return {
        "recall": found / current if current else 1.0,
        "stale": stale / ended if ended else 0.0,
        "junk": junk / active if active else 0.0,
        "current": current,
        "ended": ended,
        "active": active,
        "people": per,
    }


#: what most of a long history is: nothing to learn
_SMALL_TALK = [
    "haha that's great",
    "Can you help me write an email to my landlord?",
    "What's the weather like in Tokyo in spring?",
    "Thanks, that was really helpful!",
    "Tell me a joke about cats.",
    "Should I move somewhere warmer?",
    "If I had more time I would learn the piano.",
    "My friend says she lives in Berlin now.",
    "How do I cook rice properly?",
    "ok",
    "What do you think about that?",
    "I'm tired today.",
    "Summarise this article for me please.",
    "lol",
    "Good morning!",
    "Can you explain how compound interest works?",
    "I wonder what the best way to learn Spanish is.",
    "That's not what I meant.",
    "Let's talk about something else.",
    "Do you remember what I told you yesterday?",
]
_CITIES = ["Lisbon", "Porto", "Faro", "Braga", "Coimbra", "Madrid", "Seville", "Lyon", "Nice", "Vienna"]
_JOBS = [
    "nurse",
    "teacher",
    "engineer",
    "designer",
    "baker",
    "pilot",
    "chef",
    "writer",
    "lawyer",
    "architect",
]
_LIKES = [
    "hiking",
    "chess",
    "jazz",
    "swimming",
    "opera",
    "techno",
    "gardening",
    "cycling",
    "painting",
    "running",
]


def history(messages: int) -> list[str]:
    """A long history of one person: eras (a home, a job, a few likes each), in which about
    one message in twenty says something about them and the rest is small talk."""
    out: list[str] = []
    eras = 10
    per_era = -(-messages // eras)
    for e in range(eras):
        statements = [
            f"I live in {_CITIES[e]}.",
            f"I work as a {_JOBS[e]}.",
            f"I love {_LIKES[e]}.",
            f"I love {_LIKES[(e + 3) % len(_LIKES)]} too.",
            "My sister is called Marta.",
            "We have a dog named Rex.",
        ]
        for i in range(per_era):
            if len(out) == messages:
                break
            out.append(
                statements[(i // 20) % len(statements)] if i % 20 == 0 else _SMALL_TALK[i % len(_SMALL_TALK)]
            )
    return out


async def _throughput(extractor: Any, messages: int) -> dict[str, Any]:
    """A history of ``messages`` user messages (``history``) in sessions of 50; seconds to read them."""
    lines = history(messages)
    mem = await chatmem.open()
    mem.facts.configure(extractor=extractor)
    t = 1_700_000_000_000
    for start in range(0, len(lines), 50):
        s = await mem.sessions.create(title="history")
        items = [
            {"role": "user", "content": c, "created_at": t + start + j}
            for j, c in enumerate(lines[start : start + 50])
        ]
        await mem.messages.append_many(s.session_id, items)
    t0 = time.perf_counter()
    report = await mem.facts.extract()
    seconds = time.perf_counter() - t0
    facts = await mem.facts.list(status=None)
    await mem.close()
    return {
        "messages": report.processed,
        "seconds": seconds,
        "per_second": report.processed / seconds,
        "facts": len(facts),
        "current": {f.key: f.value for f in facts if f.status == "active" and f.key in ("home", "job")},
    }


#: the page's main-thread tasks over 50 ms, as the Long Tasks API reports them
_OBSERVE_LONG_TASKS = """() => {
  window.__longTasks = [];
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__longTasks.push(e.duration);
  }).observe({ type: "longtask" });
}"""


def _page_throughput(messages: int) -> dict[str, Any]:
    """``_throughput`` in the page, into IndexedDB, with the main thread's long tasks while
    extraction runs."""
    from in_page import run_in_page

    code = f"""
import asyncio, json, time, js
import chatmem
lines = json.loads({json.dumps(history(messages))!r})
mem = await chatmem.open("facts-bench-{time.time_ns()}")
t = 1_700_000_000_000
for start in range(0, len(lines), 50):
    s = await mem.sessions.create(title="history")
    await mem.messages.append_many(
        s.session_id,
        [{{"role": "user", "content": c, "created_at": t + start + j}} for j, c in enumerate(lines[start : start + 50])],
    )
await asyncio.sleep(0.5)
js.window.__longTasks.splice(0)
t0 = time.perf_counter()
report = await mem.facts.extract()
seconds = time.perf_counter() - t0
await asyncio.sleep(0.5)  # the observer reports a moment later
long = [float(x) for x in js.window.__longTasks.to_py()]
facts = await mem.facts.list(status=None)
json.dumps({{"messages": report.processed, "seconds": seconds, "per_second": report.processed / seconds,
  "facts": len(facts), "long_tasks": len(long), "longest_task_ms": max(long, default=0.0)}})
"""
    return json.loads(run_in_page(code, _OBSERVE_LONG_TASKS))  # type: ignore[no-any-return]


async def _context_cost(n_facts: int, rounds: int) -> dict[str, Any]:
    """p50 of ``build_window`` on a 40-message session with no facts and with ``n_facts``
    active facts (same memory, same session, measured in turns)."""
    import statistics

    mem = await chatmem.open()
    s = await mem.sessions.create(title="context")
    await mem.messages.append_many(
        s.session_id,
        [
            {"role": ("user", "assistant")[i % 2], "content": f"message {i} about thing {i}"}
            for i in range(40)
        ],
    )
    await mem.facts.apply(
        [chatmem.FactOp("add", "likes", f"thing {i}", f"Likes thing number {i}") for i in range(n_facts)]
    )
    with_facts, without = [], []
    for _ in range(rounds):
        for flag, into in ((False, without), (True, with_facts)):
            t0 = time.perf_counter()
            w = await mem.build_window(s.session_id, max_tokens=4_000, facts=flag)
            into.append((time.perf_counter() - t0) * 1000)
    await mem.close()
    return {
        "facts": n_facts,
        "p50_none_ms": statistics.median(without),
        "p50_facts_ms": statistics.median(with_facts),
        "sent": len(w.facts),
    }


def _instant_model() -> Any:
    """A local OpenAI-compatible server (``/v1/chat/completions``) that answers every request
    at once with no operations: what the LLM extractor costs apart from the model's time."""
    import http.server
    import threading

    reply = json.dumps({"operations": []})

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps(
                {
                    "id": "bench",
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply},
                            "finish_reason": "stop",
                        }
                    ],
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


async def _llm_overhead(messages: int) -> dict[str, Any]:
    """``_throughput`` of ``LLMFactExtractor`` against ``_instant_model``: requests and
    messages per second with the model's own time left out."""
    srv = _instant_model()
    try:
        provider = chatmem.OpenAICompatibleProvider(f"http://127.0.0.1:{srv.server_address[1]}/v1", "k")
        speed = await _throughput(chatmem.LLMFactExtractor(provider), messages)
    finally:
        srv.shutdown()
    speed["requests"] = -(-speed["messages"] // 50)
    return speed


def run_facts(quick: bool = False) -> dict[str, Any]:
    """Quality and speed of the offline extractor, on CPython and in the page; what the LLM
    extractor costs besides its model."""
    extractor = chatmem.OfflineFactExtractor()
    n = 2_000 if quick else 100_000

    async def go() -> dict[str, Any]:
        return {
            "offline": {
                "quality": await _quality(extractor),
                "speed": await _throughput(extractor, n),
                "context": await _context_cost(1_000, 5 if quick else 50),
            }
        }

    res = asyncio.run(go())
    res["offline"]["page"] = _page_throughput(n)
    res["llm"] = {"speed": asyncio.run(_llm_overhead(2_000 if quick else 10_000))}
    return res


def render_facts(res: dict[str, Any]) -> str:
    """The table: one row per extractor, with the goals."""
    lines = [
        "| extractor | recall (goal ≥ 0.9) | stale (goal 0) | junk (goal ≤ 2%) | facts | user messages/s (CPython) |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in res.items():
        if "quality" not in r:  # the LLM extractor: its quality is its model's
            s = r["speed"]
            lines.append(
                f"| {name} (a local server answering at once) | needs a model | needs a model | needs a model "
                f"| – | {s['per_second']:,.0f} ({s['messages']:,} in {s['seconds']:.1f} s, {s['requests']} "
                f"requests: {1000 * s['seconds'] / s['requests']:.1f} ms each, the model's time left out) |"
            )
            continue
        q, s = r["quality"], r["speed"]
        lines.append(
            f"| {name} | {q['recall']:.2f} | {q['stale']:.2%} | {q['junk']:.2%} | "
            f"{q['active']} active of {q['current']} current | {s['per_second']:,.0f} ({s['messages']:,} in {s['seconds']:.1f} s, "
            f"{s['facts']} fact versions) |"
        )
    for name, r in res.items():
        pg = r.get("page")
        if pg:
            lines.append(
                f"\n{name} in the page (Pyodide, IndexedDB): {pg['messages']:,} user messages in "
                f"{pg['seconds']:.1f} s ({pg['per_second']:,.0f}/s; goal 100,000 in ≤ 60 s); "
                + (
                    f"{pg['long_tasks']} main-thread tasks over 50 ms while learning, the longest "
                    f"{pg['longest_task_ms']:.0f} ms (goal: none)"
                    if pg["long_tasks"]
                    else "no main-thread task over 50 ms while learning (goal: none)"
                )
            )
    for r in res.values():
        if "context" not in r:
            continue
        c = r["context"]
        lines.append(
            f"\nbuild_window with {c['facts']:,} active facts: p50 {c['p50_facts_ms']:.2f} ms against "
            f"{c['p50_none_ms']:.2f} ms with none (+{c['p50_facts_ms'] - c['p50_none_ms']:.2f} ms, goal ≤ 5 ms; "
            f"{c['sent']} facts sent)"
        )
    for name, r in res.items():
        for p in r.get("quality", {}).get("people", []):
            if p["found"] < p["current"] or p["stale"] or p["junk"]:
                lines.append(
                    f"\n{name}, {p['name']}: found {p['found']}/{p['current']}, stale {p['stale']}, junk {p['junk']}"
                )
    return "\n".join(lines)
