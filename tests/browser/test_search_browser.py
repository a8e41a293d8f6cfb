"""The same search checks as on CPython, in Chromium against DuckDB-Wasm."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import Page
from search_checks import CHECKS

pytestmark = pytest.mark.browser

SETUP = """
import sys, pathlib, json
pathlib.Path('/home/pyodide/search_checks.py').write_text({src})
sys.path.insert(0, '/home/pyodide')
import search_checks
from chatmem._browser import DuckDBWasmEngine

class Shared:
    # one DuckDB-Wasm instance for every check; each check starts from empty tables
    def __init__(self, engine):
        self.engine = engine
    async def execute(self, sql, params=None):
        return await self.engine.execute(sql, params)
    async def executemany(self, sql, rows):
        return await self.engine.executemany(sql, rows)
    async def load_rows(self, table, columns, rows):
        return await self.engine.load_rows(table, columns, rows)
    async def close(self):
        pass

import builtins
builtins._search_engine = Shared(await DuckDBWasmEngine.open())
len(search_checks.CHECKS)
"""

RUN = """
import builtins, traceback, search_checks
from chatmem.index import QueryIndex
eng = builtins._search_engine
for t in [r["name"] for r in await eng.execute("SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'main'")]:
    await eng.execute('DROP TABLE "' + t + '"')
check = next(c for c in search_checks.CHECKS if c.__name__ == {name!r})
index = QueryIndex(eng)
try:
    await check(index)
    out = "ok"
except BaseException:
    out = traceback.format_exc()
out
"""


@pytest.fixture(scope="module")
def search_page(page: Page) -> Page:
    src = (Path(__file__).parents[1] / "search_checks.py").read_text()
    assert page.py(SETUP.format(src=repr(src))) == len(CHECKS)
    return page


@pytest.mark.parametrize("name", [c.__name__ for c in CHECKS])
def test_search_check_in_browser(search_page: Page, name: str) -> None:
    result = search_page.py(RUN.format(name=name))
    assert result == "ok", result
