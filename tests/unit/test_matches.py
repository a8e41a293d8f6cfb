"""matched_spans: a search result marks the words its query matched, as the keyword
index reads them, and nothing else."""

from __future__ import annotations

import pytest

from chatmem.index.matches import matched_spans


def marked(text: str, query: str) -> list[str]:
    return [text[a:b] for a, b in matched_spans(text, query)]


@pytest.mark.parametrize(
    "text, query, expected",
    [
        # stems, whole words only; stopwords and single letters never
        ("I live in Porto, which city do I reside in? ping", "which city do I reside in", ["city", "reside"]),
        ("She painted paintings; the painter paints.", "paintings", ["painted", "paintings", "paints"]),
        ("I do not know", "do I", []),
        ("a b c", "a b", []),
        # normalisation: case, accents, ß
        ("Die Straße ist lang, CAFÉ au lait", "strasse cafe", ["Straße", "CAFÉ"]),
        # phrases mark their words; numbers keep their point
        ('The "exact phrase" here', '"exact phrase"', ["exact", "phrase"]),
        ("Version 3.12 installed, 1,000 packages", "3.12 packages", ["3.12", "packages"]),
        # CJK: the query's bigrams; a one-character query marks that character
        ("東京タワーに行きました。東京は大きい", "東京", ["東京", "東京"]),
        ("東京タワーに行きました", "京", ["京"]),
        # a query word inside another word is not a match
        ("anatomy atoms and a joke about atoms", "atoms joke", ["atoms", "joke", "atoms"]),
        ("", "anything", []),
        ("some text", "!!!", []),
    ],
)
def test_marked_words(text: str, query: str, expected: list[str]) -> None:
    assert marked(text, query) == expected


def test_spans_are_ordered_and_never_overlap() -> None:
    text = "tokyo tokyo-tower 東京東京 tower"
    spans = matched_spans(text, "tokyo tower 東京")
    assert spans == sorted(spans)
    assert all(b <= c for (_, b), (c, _) in zip(spans, spans[1:]))
