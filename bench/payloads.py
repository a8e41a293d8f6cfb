"""Seeded, deterministic chat payloads: the Python twin of bench/page/payloads.js
(same PRNG, same choices, same checksum), so the CPython and the browser
workloads write the same messages."""

from __future__ import annotations

import json
from typing import Any, Callable

__all__ = ["rng", "messages", "checksum"]

M32 = 0xFFFFFFFF

WORDS = (
    "the a to and of you it is that in for on with this be was can have what are so not just but my "
    "me do we remember yesterday tomorrow trip plans lisbon coffee project deadline music concert "
    "garden weather rain sunny friend family dinner recipe pasta train ticket museum book chapter "
    "story character dragon castle quest memory summary session message token budget window context "
    "search index database browser python pyodide storage durable offline sync server café naïve "
    "résumé really maybe probably definitely think feel want need like love hate sure okay thanks "
    "please could would should because when where why how which there their about after before again"
).split(" ")


def _imul(a: int, b: int) -> int:
    return (a * b) & M32


def rng(seed: int) -> Callable[[], float]:
    """mulberry32, bit for bit as in JavaScript."""
    state = [seed & M32]

    def nxt() -> float:
        state[0] = (state[0] + 0x6D2B79F5) & M32
        a = state[0]
        t = _imul(a ^ (a >> 15), 1 | a)
        t = ((t + _imul(t ^ (t >> 7), 61 | t)) & M32) ^ t
        return ((t ^ (t >> 14)) & M32) / 4294967296

    return nxt


def _text(r: Callable[[], float], size: int) -> str:
    out: list[str] = []
    n = -1
    while n < size:
        w = WORDS[int(r() * len(WORDS))]
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:size]


def _between(r: Callable[[], float], lo: int, hi: int) -> int:
    return lo + int(r() * (hi - lo + 1))


def messages(seed: int, n: int) -> list[dict[str, Any]]:
    """n messages of one conversation (see payloads.js for the shape)."""
    r = rng(seed)
    out: list[dict[str, Any]] = []

    def push(m: dict[str, Any]) -> None:
        if len(out) < n:
            out.append({"id": f"m{seed}-{len(out)}", **m})

    while len(out) < n:
        push({"role": "user", "content": _text(r, _between(r, 200, 1200))})
        if r() < 0.125:
            call_id = f"call{seed}-{len(out)}"
            q = _text(r, _between(r, 10, 40))
            push(
                {
                    "role": "assistant",
                    "content": _text(r, _between(r, 200, 400)),
                    "toolCalls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {
                                "name": "search_memory",
                                "arguments": json.dumps({"q": q}, separators=(",", ":"), ensure_ascii=False),
                            },
                        }
                    ],
                }
            )
            push({"role": "tool", "content": _text(r, _between(r, 200, 2000)), "toolCallId": call_id})
        push({"role": "assistant", "content": _text(r, _between(r, 400, 4000))})
    return out


def checksum(msgs: list[dict[str, Any]]) -> int:
    """FNV-1a over UTF-16 code units of role and content (as JavaScript sees them)."""
    h = 0x811C9DC5
    for m in msgs:
        s = m["role"] + "\u0000" + m["content"] + "\u0001"
        for cu in memoryview(s.encode("utf-16-le")).cast("H"):
            h ^= cu
            h = (h * 0x01000193) & M32
    return h
