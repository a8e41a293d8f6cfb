"""A pure-Python BERT WordPiece tokenizer (uncased), the one MiniLM was trained with.

It reproduces the ids of Hugging Face ``tokenizers``' ``BertNormalizer`` +
``BertPreTokenizer`` + ``WordPiece`` for an uncased vocabulary: control
characters dropped, CJK ideographs split one per token, accents stripped,
lower-cased, punctuation split off, then greedy longest-match sub-words
(``##`` continuations; a word with no split, or longer than 100 characters,
is ``[UNK]``). Pure functions over a vocabulary list: no I/O, no state.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

__all__ = ["WordPiece"]

_MAX_CHARS = 100


def _is_control(ch: str) -> bool:
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch) in ("Cc", "Cf")


def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_punct(ch: str) -> bool:
    o = ord(ch)
    if 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_chinese(o: int) -> bool:
    return (
        0x4E00 <= o <= 0x9FFF
        or 0x3400 <= o <= 0x4DBF
        or 0x20000 <= o <= 0x2A6DF
        or 0x2A700 <= o <= 0x2B73F
        or 0x2B740 <= o <= 0x2B81F
        or 0x2B820 <= o <= 0x2CEAF
        or 0xF900 <= o <= 0xFAFF
        or 0x2F800 <= o <= 0x2FA1F
    )


class WordPiece:
    """Text to vocabulary ids. ``vocab`` is the token list (id = position)."""

    def __init__(self, vocab: Sequence[str], unk: str = "[UNK]", *, ids: dict[str, int] | None = None):
        """``ids``: the token -> id map of ``vocab``, when the caller built it already."""
        self.vocab = list(vocab)
        self.ids = ids if ids is not None else {t: i for i, t in enumerate(self.vocab)}
        self.unk_id = self.ids[unk]
        #: word -> its ids, as tuples of ints: the collector stops tracking those (a list a
        #: word, 30,000 of them, was scanned by each of its collections)
        self._cache: dict[str, tuple[int, ...]] = {}

    def normalize(self, text: str) -> str:
        """Clean, split CJK, strip accents, lower-case (``BertNormalizer``)."""
        if text.isascii() and text.isprintable():
            return text.lower()
        out: list[str] = []
        for ch in text:
            o = ord(ch)
            if o == 0 or o == 0xFFFD or _is_control(ch):
                continue
            if _is_whitespace(ch):
                out.append(" ")
            elif _is_chinese(o):
                out.append(" " + ch + " ")
            else:
                out.append(ch)
        s = unicodedata.normalize("NFD", "".join(out))
        s = "".join(c for c in s if unicodedata.category(c) != "Mn")
        # character by character, as the reference does: no word-final sigma
        return s.replace("\u03a3", "\u03c3").lower()

    def words(self, text: str) -> list[str]:
        """Whitespace-separated words with each punctuation character its own word."""
        out: list[str] = []
        for w in self.normalize(text).split():
            if w.isalnum():
                out.append(w)
                continue
            cur: list[str] = []
            for ch in w:
                if _is_punct(ch):
                    if cur:
                        out.append("".join(cur))
                        cur = []
                    out.append(ch)
                else:
                    cur.append(ch)
            if cur:
                out.append("".join(cur))
        return out

    def word_ids(self, word: str) -> tuple[int, ...]:
        """The sub-word ids of one pre-tokenised word (memoised)."""
        hit = self._cache.get(word)
        if hit is not None:
            return hit
        ids = self.ids
        res: list[int]
        if len(word) > _MAX_CHARS:
            res = [self.unk_id]
        else:
            res = []
            start, n = 0, len(word)
            while start < n:
                end = n
                found = -1
                while start < end:
                    piece = word[start:end] if start == 0 else "##" + word[start:end]
                    found = ids.get(piece, -1)
                    if found >= 0:
                        break
                    end -= 1
                if found < 0:
                    res = [self.unk_id]
                    break
                res.append(found)
                start = end
        ids_of = tuple(res)
        if len(self._cache) < 200_000:
            self._cache[word] = ids_of
        return ids_of

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` without ``[CLS]``/``[SEP]``."""
        out: list[int] = []
        for w in self.words(text):
            out.extend(self.word_ids(w))
        return out
