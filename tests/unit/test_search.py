"""The shared search checks (tests/search_checks.py), run on DuckDB under CPython."""

from __future__ import annotations

import pytest

from chatmem.index import DuckDBEngine, QueryIndex
from search_checks import CHECKS


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
async def test_search_check(check):
    """Each check gets a fresh in-memory index and must pass."""

    async def run():
        index = QueryIndex(DuckDBEngine())
        try:
            await check(index)
        finally:
            await index.close()

    await run()


def test_every_check_is_listed():
    """The table holds every check_* function, so the browser runs the same set."""
    import search_checks

    names = {n for n in dir(search_checks) if n.startswith("check_")}
    assert {c.__name__ for c in CHECKS} == names and len(CHECKS) >= 20
