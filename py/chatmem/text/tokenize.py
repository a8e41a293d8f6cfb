"""Tokenisation for the keyword index, and query parsing.

Text is normalised the same way at write time and at query time:

1. NFKC (full-width letters and digits, ligatures, half-width kana become
   their plain forms), then ``casefold`` (``Straße`` matches ``strasse``);
2. Latin/Greek/Cyrillic accents are dropped (``café`` matches ``cafe``):
   only the combining marks U+0300..U+036F, so Japanese dakuten, Hangul and
   Indic vowel signs are kept;
3. words are runs of letters and digits; apostrophes inside a word vanish
   (``don't`` -> ``dont``); a number keeps its decimal point and loses its
   thousands commas (``1,000.5`` -> ``1000.5``); other punctuation separates;
4. Han, Kana and Hangul have no spaces between words, so a run of them is
   cut into overlapping character bigrams (``東京タワー`` -> ``東京 京タ タワ
   ワー``) plus its last character alone (``ー``); a one-character run is that
   character. With the last character indexed, every character of a run
   starts some term, so a one-character query (``京``) is answered by a term
   prefix range, still touching only its own rows.

5. every other word is reduced to its stem (``stem``: Snowball stemmers,
   pure Python, memoised): Latin-script words by the English stemmer,
   Cyrillic by the Russian, Greek by the Greek, Arabic by the Arabic one, so
   ``painting``, ``painted`` and ``paints`` are one term. Numbers, and words
   mixing digits, are kept as they are.

``words`` keeps CJK runs whole and unstemmed: it is what phrase matching
compares (``norm_text``), so a quoted phrase still matches exactly; ``tokens``
is what the inverted index stores (stems and CJK bigrams); ``analyze`` gives
both from one pass over the text (what indexing uses). ``tokens``, ``stem`` and
``words`` are pure functions of their text: any other consumer (an index
builder elsewhere, a worker) gets the same terms by calling them.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from ..errors import ValidationError, shown

__all__ = [
    "ParsedQuery",
    "QueryTerm",
    "analyze",
    "is_cjk",
    "norm_text",
    "normalize",
    "parse_query",
    "phrase_pattern",
    "preload",
    "stem",
    "term_count",
    "terms_of_word",
    "tokens",
    "words",
]

_WORD = re.compile(r"\d+(?:[.,]\d+)+|[^\W_]+(?:['\u2019][^\W_]+)*")
_ACCENTS = re.compile("[\u0300-\u036f]")
#: ``_WORD`` on lowercase ASCII text (the same matches; plain classes match faster)
_ASCII_WORD = re.compile(r"\d+(?:[.,]\d+)+|[a-z0-9]+(?:'[a-z0-9]+)*")
_MAX_TOKEN = 64  # longer "words" (base64 blobs, hashes) are cut, not dropped


def is_cjk(ch: str) -> bool:
    """Han, Hiragana, Katakana or Hangul: scripts written without spaces."""
    o = ord(ch)
    return (
        0x4E00 <= o <= 0x9FFF
        or 0x3400 <= o <= 0x4DBF
        or 0x3040 <= o <= 0x30FF
        or 0x31F0 <= o <= 0x31FF
        or 0xAC00 <= o <= 0xD7AF
        or 0x1100 <= o <= 0x11FF
        or 0x3130 <= o <= 0x318F
        or 0xF900 <= o <= 0xFAFF
        or 0x20000 <= o <= 0x2FA1F
    )


def normalize(text: str) -> str:
    """NFKC, casefold, Latin accents removed (see the module docstring)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    if text.isascii():
        return text
    text = unicodedata.normalize("NFKD", text)
    text = _ACCENTS.sub("", text)
    return unicodedata.normalize("NFC", text)


def _split_scripts(word: str) -> list[str]:
    """Cut a word where it changes between CJK and other characters."""
    out: list[str] = []
    start = 0
    for i in range(1, len(word)):
        if is_cjk(word[i]) != is_cjk(word[i - 1]):
            out.append(word[start:i])
            start = i
    out.append(word[start:])
    return out


#: an apostrophe, point or comma inside a word or number (between letters or digits)
_ASCII_INNER = re.compile(r"[a-z0-9]['.,]+[a-z0-9]")
_ASCII_ALNUM = re.compile(r"[a-z0-9]+")


def _ascii_words(text: str) -> list[str]:
    """``words`` of an ASCII text (most messages): ``_ASCII_WORD``'s matches, numbers losing
    their commas and words their apostrophes, found by C calls without a Python step per
    word (the alternation of ``_ASCII_WORD`` costs ~2 us a word in the page):

    - text without an apostrophe, point or comma: its runs of letters and digits (all
      other characters separate), its split when that is all letters and digits;
    - else, with none of them between two letters or digits: its runs of letters and digits;
    - else ``_ASCII_WORD`` itself, with the commas and apostrophes dropped.
    """
    low = text.lower()  # NFKC is the identity on ASCII; casefold is lower
    if "'" not in low and "," not in low and "." not in low:
        ws = low.split()
        return ws if "".join(ws).isalnum() else _ASCII_ALNUM.findall(low)
    if _ASCII_INNER.search(low) is None:
        return _ASCII_ALNUM.findall(low)
    return [
        w.replace(",", "") if "," in w else w.replace("'", "") if "'" in w else w
        for w in _ASCII_WORD.findall(low)
    ]


def words(text: str) -> list[str]:
    """Normalised words; a CJK run is one word here (it is cut into bigrams by ``tokens``)."""
    if text.isascii():
        return _ascii_words(text)
    out: list[str] = []
    append = out.append
    for w in _WORD.findall(normalize(text)):
        if w.isascii():
            if w.isalnum():  # the common case: a plain ASCII word or number
                append(w)
            elif w[0].isdigit() and ("," in w or "." in w):
                append(w.replace(",", ""))
            else:
                append(w.replace("'", ""))
            continue
        if w[0].isdigit() and ("," in w or "." in w):
            append(w.replace(",", ""))
            continue
        w = w.replace("'", "").replace("\u2019", "")
        if w.isascii():
            append(w)
        else:
            out.extend(_split_scripts(w))
    return out


_STEMMERS: dict[str, Any] = {}
_STEMS: dict[str, str] = {}
_STEM_CACHE = 500_000


def _stemmer_for(word: str) -> Any:
    o = ord(word[0])
    lang = (
        "russian"
        if 0x0400 <= o <= 0x04FF
        else "greek"
        if 0x0370 <= o <= 0x03FF
        else "arabic"
        if 0x0600 <= o <= 0x06FF
        else "english"
    )
    st = _STEMMERS.get(lang)
    if st is None:
        # imported on the first word to stem, not with chatmem: the package loads every
        # language's stemmer, most of a second in the page's start-up otherwise
        import snowballstemmer  # type: ignore[import-untyped]

        st = _STEMMERS[lang] = snowballstemmer.stemmer(lang)
    return st


def preload() -> None:
    """Import the stemmers now (most of a second in the page) rather than at the first
    word to stem: called while the query engine opens in its worker, so the two overlap."""
    _stemmer_for("a")


def stem(word: str) -> str:
    """The stem of one normalised word (see the module docstring); memoised."""
    hit = _STEMS.get(word)
    if hit is not None:
        return hit
    if len(word) < 3 or not word.isalpha() or is_cjk(word[0]):
        out = word
    else:
        out = _stemmer_for(word).stemWord(word) or word
    if len(_STEMS) < _STEM_CACHE:
        _STEMS[word] = out
    return out


def _cjk_terms(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)] + [run[-1]]


def _terms_of(ws: list[str]) -> list[str]:
    stems = _STEMS
    got = [stems.get(w) for w in ws]  # the common case: every word stemmed before
    if None not in got:
        return got  # type: ignore[return-value]
    out: list[str] = []
    append = out.append
    stems = _STEMS
    for w in ws:
        hit = stems.get(w)
        if hit is not None:
            append(hit)
        elif is_cjk(w[0]):
            out.extend(_cjk_terms(w))
        else:
            append(stem(w[:_MAX_TOKEN]))
    return out


def terms_of_word(word: str) -> list[str]:
    """The index terms of one of ``words``' words (its stem, or a CJK run's bigrams):
    ``tokens(text)`` is these of each word of ``words(text)`` in turn."""
    return _terms_of([word])


def tokens(text: str) -> list[str]:
    """The index terms of ``text``, in order, with repeats (their count is the term frequency)."""
    return _terms_of(words(text))


def term_count(text: str) -> int:
    """``len(tokens(text))`` without stemming (what ``docs.doc_len`` holds): one term a
    word, a CJK run as many as its characters (its bigrams and its last character)."""
    ws = words(text)
    if text.isascii():
        return len(ws)
    return sum(len(w) if is_cjk(w[0]) else 1 for w in ws)


def norm_text(text: str) -> str:
    """The normalised words joined by single spaces, with a space at each end (for phrases)."""
    return " " + " ".join(words(text)) + " "


def analyze(text: str) -> tuple[list[str], str]:
    """``(tokens(text), norm_text(text))`` from one tokenisation pass."""
    ws = words(text)
    return _terms_of(ws), " " + " ".join(ws) + " "


# --------------------------------------------------------------------------- queries


@dataclass(frozen=True, slots=True)
class QueryTerm:
    """One term of a query: an exact index term, or (``prefix=True``) every term
    starting with ``value`` (a one-character CJK query)."""

    value: str
    prefix: bool = False


@dataclass(slots=True)
class ParsedQuery:
    """``terms`` ranks (any of them may match); ``required`` and ``phrases`` filter
    (every required term must occur, every phrase must occur exactly)."""

    terms: list[QueryTerm] = field(default_factory=list)
    required: list[QueryTerm] = field(default_factory=list)
    phrases: list[list[str]] = field(default_factory=list)

    @property
    def all_terms(self) -> list[QueryTerm]:
        """Required terms first, then the others, without repeats."""
        seen: set[QueryTerm] = set()
        out: list[QueryTerm] = []
        for t in self.required + self.terms:
            if t not in seen:
                seen.add(t)
                out.append(t)
        return out


def _query_terms(ws: list[str]) -> list[QueryTerm]:
    out: list[QueryTerm] = []
    for w in ws:
        if is_cjk(w[0]):
            if len(w) == 1:
                out.append(QueryTerm(w, prefix=True))
            else:
                out.extend(QueryTerm(w[i : i + 2]) for i in range(len(w) - 1))
        else:
            out.append(QueryTerm(stem(w[:_MAX_TOKEN])))
    return out


_PHRASE = re.compile(r'"([^"]*)"?')


def parse_query(query: str) -> ParsedQuery:
    """Parse ``"exact phrase" other words``. An unclosed quote runs to the end.

    Raises ``ValidationError`` for a non-string or blank query, or one with no
    searchable word (only punctuation).
    """
    if not isinstance(query, str):
        raise ValidationError("query must be a string", field="query")
    if not query.strip():
        raise ValidationError("query is empty", field="query")
    pq = ParsedQuery()
    rest: list[str] = []
    pos = 0
    for m in _PHRASE.finditer(query):
        rest.append(query[pos : m.start()])
        pos = m.end()
        ws = words(m.group(1))
        if not ws:
            continue
        if len(ws) == 1 and not is_cjk(ws[0][0]):
            # a one-word "phrase" is just a required word
            pq.required.extend(_query_terms(ws))
            continue
        pq.phrases.append(ws)
        pq.required.extend(_query_terms(ws))
    rest.append(query[pos:])
    pq.terms = _query_terms(words(" ".join(rest)))
    if not pq.terms and not pq.required:
        raise ValidationError(f"query {shown(query)} has no searchable words", field="query")
    return pq


def phrase_pattern(phrase: list[str]) -> str:
    """What ``norm_text`` must contain for ``phrase`` to match: its words joined by
    spaces, fenced by spaces where the phrase starts or ends with a non-CJK word
    (so ``"cat"`` does not match ``concatenate``, while ``"京タ"`` matches inside
    ``東京タワー``)."""
    left = "" if is_cjk(phrase[0][0]) else " "
    right = "" if is_cjk(phrase[-1][-1]) else " "
    return left + " ".join(phrase) + right
