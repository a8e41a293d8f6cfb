"""Seeded texts for the large-history cases (pure Python: the page and CPython tests).

- ``Words``: the 30,000-word vocabulary with Zipf frequencies and the
  30-150-word messages of bench/search/bench_browser.py (same seed, same draws).
- ``chatgpt_export``: a ChatGPT ``conversations.json`` made of them.
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

__all__ = ["MARKER", "Words", "chatgpt_export"]

#: a word no generated text holds, put in one message of an export
MARKER = "zqxchatgptmarker"


class Words:
    """The vocabulary and message texts of bench_browser.py's fill (seed 7)."""

    def __init__(self, seed: int = 7):
        rng = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        vocab: set[str] = set()
        while len(vocab) < 30000:
            vocab.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 10))))
        self.vocab = sorted(vocab)
        rng.shuffle(self.vocab)
        self.cum = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(self.vocab))))
        self.rng = rng

    def text(self) -> str:
        r = self.rng
        return " ".join(r.choices(self.vocab, cum_weights=self.cum, k=r.randint(30, 150)))

    def queries(self, n: int, seed: int = 11) -> list[str]:
        """1-3 words drawn uniformly from the vocabulary except its 50 most frequent."""
        r = random.Random(seed)
        return [" ".join(r.choice(self.vocab[50:]) for _ in range(r.randint(1, 3))) for _ in range(n)]


def chatgpt_export(n: int, per: int = 100, seed: int = 7) -> str:
    """A ChatGPT ``conversations.json`` of ``n`` messages (``per`` per conversation,
    user and assistant in turn, one linear path below the ``message: null`` root),
    the marker word in one message of the middle conversation."""
    w = Words(seed)
    convs = []
    t = 1_700_000_000.0
    mid = (n // per) // 2
    for c in range((n + per - 1) // per):
        mapping: dict[str, Any] = {
            f"c{c}-root": {"id": f"c{c}-root", "message": None, "parent": None, "children": [f"c{c}-0"]}
        }
        k = min(per, n - c * per)
        for i in range(k):
            t += 7.0
            text = w.text() + (f" {MARKER}" if c == mid and i == k // 2 else "")
            mapping[f"c{c}-{i}"] = {
                "id": f"c{c}-{i}",
                "parent": f"c{c}-{i - 1}" if i else f"c{c}-root",
                "children": [f"c{c}-{i + 1}"] if i + 1 < k else [],
                "message": {
                    "id": f"c{c}-{i}",
                    "author": {"role": ("user", "assistant")[i % 2], "name": None, "metadata": {}},
                    "create_time": t,
                    "update_time": None,
                    "content": {"content_type": "text", "parts": [text]},
                    "status": "finished_successfully",
                    "end_turn": True,
                    "weight": 1.0,
                    "metadata": {"model_slug": "gpt-4o"} if i % 2 else {},
                    "recipient": "all",
                },
            }
        convs.append(
            {
                "title": f"conversation {c}",
                "create_time": t - 7 * k,
                "update_time": t,
                "mapping": mapping,
                "current_node": f"c{c}-{k - 1}",
                "conversation_id": f"conv-{c}",
                "is_archived": False,
                "moderation_results": [],
                "plugin_ids": None,
            }
        )
    return json.dumps(convs)
