"""The README's devtools-console examples (``js`` blocks calling ``chatmem.runPython``)
run in the booted page, as written."""

from __future__ import annotations

import re
from typing import Any

import pytest

from conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
JS = [m.group(1) for m in re.finditer(r"^```js\n(.*?)^```", README, flags=re.S | re.M)]


def test_every_js_block_is_a_console_example() -> None:
    """js blocks are devtools-console examples; own-page recipes are html blocks (test_recipes.py)."""
    assert JS and all("chatmem.runPython(" in b for b in JS)


@pytest.mark.parametrize("code", JS, ids=[f"js-{i}" for i in range(len(JS))])
def test_console_example_runs_in_the_page(page: Any, code: str) -> None:
    result = page.page.evaluate(f"async () => {{ return {code.strip().rstrip(';')}; }}")
    assert result, "the example's last expression has a value"
