"""``index.derivation.derive``: the Python half of a derivation done next to the store
(the page's derive.js; ``tests/browser/test_derive_browser.py`` compares its tables with
Python's own). Here a scripted derivation checks what Python answers and when it stops."""

from __future__ import annotations

from typing import Any

import pytest

from chatmem.index.derivation import derive
from chatmem.index.sql_engine import EngineDerivation
from chatmem.text.tokenize import terms_of_word, words


class Scripted(EngineDerivation):
    """Chunks given up front; records what it was fed; can fail at a chosen step."""

    def __init__(self, chunks: list[dict[str, Any]], fail_at: str | None = None) -> None:
        self.chunks = list(chunks)
        self.fed: list[tuple[dict[str, list[str]], list[list[str]]]] = []
        self.fail_at = fail_at
        self.aborted = 0
        self.doc = 0

    async def next(self) -> dict[str, Any] | None:
        if self.fail_at == "next" and self.fed:
            raise RuntimeError("read failed")
        return self.chunks.pop(0) if self.chunks else None

    async def feed(self, terms: dict[str, list[str]], hard: list[list[str]]) -> dict[str, list[Any]]:
        if self.fail_at == "feed":
            raise RuntimeError("load failed")
        self.fed.append((terms, hard))
        n = 2
        docs = list(range(self.doc, self.doc + n))
        self.doc += n
        return {
            "doc": docs,
            "id": [f"m{d}" for d in docs],
            "created": [1000 + d for d in docs],
            "len": [3] * n,
        }

    async def finish(self) -> dict[str, Any]:
        return {
            "read": 1.0,
            "words": 2.0,
            "count": 3.0,
            "load": 4.0,
            "terms": 7,
            "docs": self.doc,
            "sorted": True,
        }

    async def abort(self) -> None:
        self.aborted += 1


async def test_terms_are_given_once_a_word_and_hard_texts_are_split_in_python() -> None:
    d = Scripted(
        [
            {"words": ["painting", "paints"], "hard": ["Café 東京タワー"]},
            {"words": ["running"], "hard": ["café again"]},
        ]
    )
    ms: dict[str, float] = {}
    table, ordered = await derive(d, ms)
    assert ordered is True
    (t1, h1), (t2, h2) = d.fed
    assert h1 == [words("Café 東京タワー")] and h2 == [words("café again")]
    assert t1 == {w: terms_of_word(w) for w in ["painting", "paints", *words("Café 東京タワー")]}
    # "cafe" was given with the first chunk: only the new words of the second
    assert t2 == {w: terms_of_word(w) for w in ["running", "again"]}
    assert t1["painting"] == t1["paints"] == ["paint"]
    assert table is not None and len(table.lens) == 4 and list(table.lens) == [3, 3, 3, 3]
    assert (
        ms["read"] == 1.0 and ms["load"] == 4.0 and "stems" in ms and "terms" not in ms and "sorted" not in ms
    )
    assert d.aborted == 0


@pytest.mark.parametrize("step", ["next", "feed"])
async def test_a_failure_stops_the_derivation_after_its_loads(step: str) -> None:
    d = Scripted([{"words": ["a"], "hard": []}, {"words": ["b"], "hard": []}], fail_at=step)
    with pytest.raises(RuntimeError):
        await derive(d)
    assert d.aborted == 1
