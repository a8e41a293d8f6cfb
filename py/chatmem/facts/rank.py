"""Which facts go into a window, and in which order.

Pinned facts first; then by a score of four parts, each from 0 to 1:
``relevance`` (the share of the newest user message's words the fact shares),
``importance``, ``recency`` (halving every ``HALF_LIFE_DAYS`` since the fact
was last confirmed) and ``reinforced`` (how many messages said it). Facts are
taken in that order while their lines fit ``budget`` tokens.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["rank", "choose", "WEIGHTS", "HALF_LIFE_DAYS", "MAX_FACTS_BUDGET", "FACTS_SHARE"]

#: weight of each score part
WEIGHTS = {"relevance": 1.0, "importance": 0.5, "recency": 0.3, "reinforced": 0.2}
HALF_LIFE_DAYS = 90
_LOG10 = math.log(10)
#: the default facts budget: this share of the window, at most ``MAX_FACTS_BUDGET`` tokens
FACTS_SHARE = 0.10
MAX_FACTS_BUDGET = 300

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = frozenset(
    "a an the and or but of to in on at by for with from is are was were be been am i you he she we they it "
    "me my your our their this that what which who how when where why do does did have has had not no yes "
    "can could would should will shall may might must just so very about there here all any some".split()
)


def _stem(w: str) -> str:
    """A plural or third-person "s" dropped ("lives" is "live", "sisters" is "sister")."""
    return w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w


def _words(text: str) -> set[str]:
    return {
        _stem(w)
        for w in (x.casefold() for x in _WORD.findall(text))
        if w not in _STOP and (len(w) > 1 or w.isdigit())
    }


#: the words of each fact version, by (fact id, updated at): a window ranks the same facts
#: turn after turn, and splitting their texts is most of the work
_WORDS: dict[tuple[str, int], frozenset[str]] = {}
_WORDS_MAX = 50_000


def _fact_words(r: Mapping[str, Any]) -> frozenset[str]:
    key = (str(r["factId"]), int(r["updatedAt"]))
    words = _WORDS.get(key)
    if words is None:
        if len(_WORDS) >= _WORDS_MAX:
            _WORDS.clear()
        slot = str(r["key"]).replace(".", " ").replace("_", " ")
        words = _WORDS[key] = frozenset(_words(f"{slot} {r['value']} {r['text']}"))
    return words


def rank(
    records: Sequence[Mapping[str, Any]], query: str, now: int
) -> list[tuple[Mapping[str, Any], float, dict[str, float]]]:
    """Fact records (``Fact.to_record``) best first, each with its score and the parts of it."""
    asked = _words(query)
    half_life = HALF_LIFE_DAYS * 86_400_000
    out = []
    for r in records:
        shared = len(asked & _fact_words(r)) if asked else 0
        parts = {
            "relevance": shared / len(asked) if asked else 0.0,
            "importance": float(r["importance"]),
            "recency": 0.5 ** (max(0, now - int(r["updatedAt"])) / half_life),
            "reinforced": min(1.0, math.log1p(len(r["sourceIds"])) / _LOG10),
        }
        score = sum(WEIGHTS[k] * v for k, v in parts.items())
        out.append((r, score, parts))
    out.sort(key=lambda t: (not t[0]["pinned"], -t[1], t[0]["factId"]))
    return out


def choose(
    ranked: Sequence[tuple[Mapping[str, Any], float, dict[str, float]]],
    budget: int,
    count: Callable[[str], int],
) -> list[dict[str, Any]]:
    """The facts whose lines fit ``budget`` tokens, in rank order: ``{"fact_id", "text",
    "score", "parts", "pinned"}`` each. It stops at the first that does not fit once the
    budget is nearly spent (the rest would not fit either, mostly)."""
    chosen, used = [], 0
    for r, score, parts in ranked:
        cost = count(str(r["text"])) + 1
        if used + cost > budget:
            if budget - used < 8:
                break
            continue
        used += cost
        chosen.append(
            {
                "fact_id": r["factId"],
                "text": r["text"],
                "score": round(score, 4),
                "parts": parts,
                "pinned": r["pinned"],
            }
        )
    return chosen
