"""Exact BPE token counts in the page (gpt-tokenizer ranks shipped in dist/)."""

from __future__ import annotations

import pytest

from conftest import Page, unique_name

pytestmark = pytest.mark.browser


def test_bpe_counts_are_exact_and_drive_the_window(page: Page) -> None:
    """o200k_base and cl100k_base count known strings exactly; a Memory can use one for its window."""
    db = unique_name("bpe")
    out = page.py(f"""
import chatmem
from chatmem.context.tokens import BPETokenizer
o200k = await BPETokenizer.load("o200k_base")
cl100k = await BPETokenizer.load("cl100k_base")
counts = [o200k.count("hello world"), cl100k.count("hello world"), o200k.count("tiktoken is great!"),
          cl100k.count("tiktoken is great!"), o200k.count("")]
mem = await chatmem.open({db!r}, tokenizer=o200k)
s = await mem.sessions.create()
for i in range(50):
    await mem.messages.append(s.session_id, "user", "a fairly ordinary sentence number " + str(i))
win = await mem.build_window(s.session_id, system_prompt="You are terse.", max_tokens=120)
exact = sum(o200k.count_message(m) for m in win.messages)
[counts, win.tokens, exact, win.tokens <= 120]
""")
    counts, tokens, exact, fits = out
    assert counts == [2, 2, 6, 6, 0]
    assert tokens == exact and fits
