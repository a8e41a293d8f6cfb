"""Tokenising speed: microseconds per message, the ASCII fast path against its regex definition.

    python bench/tokenize_speed.py [--messages 20000] [--rounds 5]          # CPython
    python bench/tokenize_speed.py --page [--messages 20000] [--rounds 5]   # Pyodide in Chromium (dist/)

The messages are the benchmark's own (``bench/page/scalegen.py``: 30-150 words from a
30,000-word Zipf vocabulary, what ``--scale`` and bench/search/bench_browser.py store), and
the same messages with punctuation (commas, points, question marks, ``'s``) put between some
words. Each round times, in turn in one process, ``words`` through the fast path and through
the definition (``_ASCII_WORD``'s one pass), then the whole ``message_rows`` (what the index
derivation does per message: words, stems, the rows) both ways; the first pass, which stems
every new word with Snowball, is reported on its own. Medians of the rounds.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(globals().get("__file__", ".")).resolve().parent  # exec'd without one in the page


def _definition(text: str) -> list[str]:
    from chatmem.text import tokenize

    ws = tokenize._ASCII_WORD.findall(text.lower())
    return [w.replace(",", "") if "," in w else w.replace("'", "") if "'" in w else w for w in ws]


def measure(words_source: Any, n: int = 20_000, rounds: int = 5) -> dict[str, Any]:
    """The figures (µs per message), in this interpreter."""
    from chatmem.index.schema import message_rows
    from chatmem.text import tokenize

    gen = words_source()
    plain = [gen.text() for _ in range(n)]
    rng = random.Random(3)
    marks = [", ", ". ", "? ", "'s ", " ", " ", " "]
    punct = [t.replace(" ", rng.choice(marks), 12) for t in plain]
    fast = tokenize._ascii_words

    def per_msg(fn: Callable[[str], Any], texts: list[str]) -> float:
        t = time.perf_counter()
        for x in texts:
            fn(x)
        return (time.perf_counter() - t) / len(texts) * 1e6

    def rows(texts: list[str]) -> float:
        recs = [
            {"id": f"m{i:025d}", "sessionId": "s", "seq": i, "role": "user", "createdAt": i, "content": x}
            for i, x in enumerate(texts)
        ]
        t = time.perf_counter()
        for r in recs:
            message_rows(r)
        return (time.perf_counter() - t) / len(recs) * 1e6

    out: dict[str, Any] = {
        "messages": n,
        "rounds": rounds,
        "python": sys.version.split()[0],
        "platform": sys.platform,
    }
    t = time.perf_counter()
    tokenize.preload()
    out["import_stemmers_s"] = round(time.perf_counter() - t, 2)
    tokenize._STEMS.clear()
    out["first_pass_rows_us"] = round(rows(plain), 1)  # stems every new word
    out["distinct_words"] = len(tokenize._STEMS)
    got: dict[str, list[float]] = {}
    try:
        for _ in range(rounds):
            for name, texts in (("plain", plain), ("punct", punct)):
                for label, fn in (("fast", fast), ("definition", _definition)):
                    tokenize._ascii_words = fn
                    got.setdefault(f"words {name} {label}", []).append(per_msg(tokenize.words, texts))
                    got.setdefault(f"message_rows {name} {label}", []).append(rows(texts))
    finally:
        tokenize._ascii_words = fast
    for k, v in got.items():
        out[k + " us"] = round(statistics.median(v), 1)
    for what in ("words", "message_rows"):
        for name in ("plain", "punct"):
            out[f"{what} {name} speed-up"] = round(
                out[f"{what} {name} definition us"] / out[f"{what} {name} fast us"], 2
            )
    return out


def _page(n: int, rounds: int) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from in_page import run_in_page

    code = (
        "import sys, types\n"
        f"gen = types.ModuleType('scalegen'); exec({(HERE / 'page' / 'scalegen.py').read_text()!r}, gen.__dict__)\n"
        f"tk = types.ModuleType('tokenize_speed'); exec({(HERE / 'tokenize_speed.py').read_text()!r}, tk.__dict__)\n"
        f"tk.measure(gen.Words, {n}, {rounds})\n"
    )
    out: dict[str, Any] = run_in_page(code)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--page", action="store_true", help="in Pyodide in Chromium (the built dist/)")
    args = ap.parse_args()
    if args.page:
        out = _page(args.messages, args.rounds)
    else:
        sys.path.insert(0, str(HERE / "page"))
        sys.path.insert(0, str(HERE.parent / "py"))
        from scalegen import Words

        out = measure(Words, args.messages, args.rounds)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
