"""The fast ASCII tokeniser gives exactly the words of its regex definition.

``_ascii_words`` finds words with ``str.split`` and simple regexes; its definition is
``_ASCII_WORD``'s matches of the lowercased text, numbers losing their commas and words
their apostrophes (``reference_words`` below). Both are compared on random texts heavy
in apostrophes, points and commas, on every text of the LoCoMo conversations and of the
real chat-export fixtures (read in place from the shared folder), and on the benchmark's
generated messages; ``tokens`` (stems) must agree with the general, non-ASCII path too.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from chatmem.text import tokenize
from chatmem.text.tokenize import term_count, tokens, words
from shared_texts import real_texts

REPO = Path(__file__).resolve().parents[2]


def reference_words(text: str) -> list[str]:
    """The definition: one pass of ``_ASCII_WORD``, then the commas and apostrophes dropped."""
    ws = tokenize._ASCII_WORD.findall(text.lower())
    return [w.replace(",", "") if "," in w else w.replace("'", "") if "'" in w else w for w in ws]


@pytest.mark.parametrize("seed", range(3))
def test_random_ascii_texts_match_the_definition(seed: int) -> None:
    """Random ASCII text, dense in apostrophes, points, commas and digits: the same words."""
    rng = random.Random(seed)
    alphabet = "ab9Z0 ,.'\t\n_-!x"
    for _ in range(4000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert tokenize._ascii_words(text) == reference_words(text), text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "...",
        "a",
        "Hello, World!",
        "don't stop",
        "it's 1,000.50 or 3.14.",
        "e.g. a.b x..y",
        "'quoted' ok' x' 'y",
        "1,000abc abc1,000 1'2,5 5'.5 a''b",
        "trailing, commas, only.",
        "x\x1cy\x1fz",
        "tab\tand\nnew line\r\n",
        "UPPER lower MiXeD 42",
    ],
)
def test_edge_cases_match_the_definition(text: str) -> None:
    """Hand-picked cases at each branch of the fast path."""
    assert tokenize._ascii_words(text) == reference_words(text)


def test_real_texts_match_the_definition_and_the_general_path() -> None:
    """LoCoMo and the export fixtures: ASCII texts give the definition's words; every text's
    tokens equal those of the general (normalising) path."""
    texts = real_texts()
    ascii_texts = [t for t in texts if t.isascii()]
    assert len(ascii_texts) > 5000  # the data is there
    for text in ascii_texts:
        assert tokenize._ascii_words(text) == reference_words(text), text
        assert words(text) == words("\u00e9 " + text)[1:], text
        assert tokens(text) == tokens("\u00e9 " + text)[1:], text


def test_benchmark_messages_match_the_definition() -> None:
    """The benchmark's generated 30-150-word messages (bench/page/scalegen.py)."""
    spec = importlib.util.spec_from_file_location("scalegen", REPO / "bench" / "page" / "scalegen.py")
    assert spec is not None and spec.loader is not None
    scalegen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scalegen)
    w = scalegen.Words()
    for _ in range(500):
        text = w.text()
        assert tokenize._ascii_words(text) == reference_words(text)


def test_term_count_is_the_number_of_tokens() -> None:
    """``term_count`` (no stemming: what a catch-up compares with ``docs.doc_len``) equals
    ``len(tokens(text))`` on every real text, on CJK and mixed scripts, and on random text."""
    rng = random.Random(7)
    alphabet = "ab9Z0 ,.'\u00e9\u4e2d\u6587\u65e5\u672c\u3042\ud55c-"
    texts = real_texts() + [
        "\u4e2d\u6587\u68c0\u7d22 and English",
        "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
        "caf\u00e9 na\u00efve",
        "",
    ]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(3000)]
    assert any(not t.isascii() for t in texts)
    for text in texts:
        assert term_count(text) == len(tokens(text)), text
