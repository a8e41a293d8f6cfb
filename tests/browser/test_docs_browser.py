"""The devtools-console examples of the README and ``docs/`` (``js`` blocks calling
``chatmem.runPython``) run in the booted page, as written."""

from __future__ import annotations

from typing import Any

import pytest

from doc_pages import blocks, ids

JS = blocks("js")


def test_every_js_block_is_a_console_example() -> None:
    """js blocks are devtools-console examples; own-page recipes are html blocks (test_recipes.py)."""
    assert JS and all("chatmem.runPython(" in b.code for b in JS)


@pytest.mark.parametrize("block", JS, ids=ids(JS))
def test_console_example_runs_in_the_page(page: Any, block: Any) -> None:
    result = page.page.evaluate(f"async () => {{ return {block.code.strip().rstrip(';')}; }}")
    assert result, "the example's last expression has a value"
