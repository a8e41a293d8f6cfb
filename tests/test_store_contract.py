"""The store contract (AIR's six methods plus the Memory API), run against the
in-memory and SQLite stores on CPython and against IndexedDB in Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import chatmem
import contract_checks
from conftest import run, unique_name
from contract_checks import CHECKS
from llm_server import LLMServer

BACKENDS = ["memory", "sqlite", pytest.param("indexeddb", marks=pytest.mark.browser)]


def load_checks_into(page: Any) -> None:
    """Put contract_checks.py into the page's Python once."""
    if getattr(page, "_contract_loaded", False):
        return
    src = (Path(__file__).parent / "contract_checks.py").read_text()
    page.py(
        "import sys, pathlib\n"
        "pathlib.Path('/home/pyodide/contract_checks.py').write_text(" + repr(src) + ")\n"
        "sys.path.insert(0, '/home/pyodide')\n"
        "import contract_checks\n"
        "len(contract_checks.CHECKS)"
    )
    page._contract_loaded = True


@pytest.fixture(scope="module", autouse=True)
def llm() -> Any:
    """The local OpenAI-compatible model server the chat-turn checks talk to."""
    server = LLMServer()
    contract_checks.SERVICES["llm"] = server.url
    yield server
    server.close()


@pytest.mark.parametrize("name", sorted(CHECKS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_contract(backend: str, name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if backend == "indexeddb":
        page = request.getfixturevalue("page")
        load_checks_into(page)
        db = unique_name(name)
        page.py(
            f"import contract_checks\ncontract_checks.SERVICES.update({dict(contract_checks.SERVICES)!r})"
        )
        result = page.py(
            "import chatmem, contract_checks, traceback, itertools\n"
            "counter = itertools.count()\n"
            "async def make(**kw):\n"
            f"    return await chatmem.open({db!r} + '-' + str(next(counter)), **kw)\n"
            "try:\n"
            f"    await contract_checks.CHECKS[{name!r}](make)\n"
            "    out = 'ok'\n"
            "except BaseException:\n"
            "    out = traceback.format_exc()\n"
            "out"
        )
        assert result == "ok", result
        return

    counter = iter(range(1000))

    async def make(**kw: Any) -> chatmem.Memory:
        if backend == "sqlite":
            return await chatmem.open(persist=str(tmp_path / f"db{next(counter)}.sqlite"), **kw)
        return await chatmem.open(**kw)

    run(CHECKS[name](make))
