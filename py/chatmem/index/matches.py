"""Which words of a message a query matched: what a search result highlights.

``matched_spans(text, query)`` reads both the way the keyword index does
(``chatmem.text.tokenize``): a word of ``text`` is marked when one of its terms
(its stem, or a CJK run's bigrams) is a term of the query, so "painted" is marked
for "paintings" and "Straße" for "strasse", and never because a query word
happens to sit inside another word ("i" inside "ping"). Words that carry no
meaning of their own are never marked: English stopwords ("do", "in", "the")
and single letters or digits; a query made only of them marks nothing. A
one-character CJK query marks that character wherever it stands.
"""

from __future__ import annotations

import re

from ..errors import ValidationError
from ..text.tokenize import is_cjk, normalize, parse_query, stem, terms_of_word, words

__all__ = ["STOPWORDS", "matched_spans"]

#: words a highlight never marks (their stems are compared, so "does" and "doing" too)
STOPWORDS = frozenset(
    """
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most my
myself no nor not now of off on once only or other our ours ourselves out over own same she should so
some such than that the their theirs them themselves then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you your
yours yourself yourselves im ive id ill youre youve dont doesnt didnt isnt wasnt arent cant wont
""".split()
)
_STOP_STEMS = frozenset(stem(w) for w in STOPWORDS)

#: a word as the highlight cuts text: letters and digits, with inner apostrophes and points
_WORD = re.compile(r"[^\W_]+(?:['’.,][^\W_]+)*")


def _meaningful(term: str) -> bool:
    return not term.isascii() or (len(term) > 1 and term not in _STOP_STEMS)


def matched_spans(text: str, query: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each word of ``text`` that ``query`` matched, in order and not
    overlapping (see the module docstring); ``[]`` for a query with nothing to mark."""
    if not text or not isinstance(query, str):
        return []
    try:
        parsed = parse_query(query)
    except ValidationError:
        return []
    wanted = {t.value for t in parsed.all_terms if not t.prefix and _meaningful(t.value)}
    prefixes = [t.value for t in parsed.all_terms if t.prefix]
    if not wanted and not prefixes:
        return []
    spans: list[tuple[int, int]] = []
    for m in _WORD.finditer(text):
        word = m.group(0)
        if not any(is_cjk(c) for c in word):
            if any(t in wanted for w in words(word) for t in terms_of_word(w)):
                spans.append(m.span())
            continue
        spans.extend(_cjk_spans(word, m.start(), wanted, prefixes))
    return _merged(spans)


def _cjk_spans(word: str, at: int, wanted: set[str], prefixes: list[str]) -> list[tuple[int, int]]:
    """In a word holding CJK characters: each bigram the query holds, each character a
    one-character query names, and the non-CJK parts matched as words."""
    out: list[tuple[int, int]] = []
    chars = [normalize(c) for c in word]
    for i, c in enumerate(chars):
        if not is_cjk(word[i]):
            continue
        if i + 1 < len(word) and is_cjk(word[i + 1]) and c + chars[i + 1] in wanted:
            out.append((at + i, at + i + 2))
        if c in prefixes:
            out.append((at + i, at + i + 1))
    for m in re.finditer(r"[^\W_]+", "".join(" " if is_cjk(ch) else ch for ch in word)):
        part = m.group(0)
        if any(t in wanted for w in words(part) for t in terms_of_word(w)):
            out.append((at + m.start(), at + m.end()))
    return out


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out
