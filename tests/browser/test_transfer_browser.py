"""Import of every real export fixture in the page (IndexedDB), matching CPython."""

from __future__ import annotations

from pathlib import Path

import pytest

import chatmem
from conftest import ROOT, Page, run, unique_name

pytestmark = pytest.mark.browser

_SHARED = ROOT.parent / "shared" / "fixtures"
SHARED = _SHARED if _SHARED.is_dir() else Path("/work/shared/fixtures")
FILES = sorted(p for p in SHARED.rglob("*.json")) + [ROOT / "tests" / "fixtures" / "airi-export.json"]


def shape(export: dict) -> list[tuple[str, list[str], list[str]]]:
    """(title, roles, texts) per session, in export order: what must match across stores."""
    out = []
    for s in export["sessions"]:
        msgs = s["messages"]
        out.append(
            (
                s["meta"]["title"],
                [m["role"] for m in msgs],
                [chatmem.extract_text(m["content"]) for m in msgs],
            )
        )
    return sorted(out)


def test_every_fixture_imports_in_the_browser_as_on_cpython(page: Page) -> None:
    """Each real ChatGPT/Claude file and our AIRI file imports in IndexedDB with the same sessions and messages."""
    assert len(FILES) == 5
    for path in FILES:
        text = path.read_text(encoding="utf-8")

        async def on_cpython(text: str = text) -> dict:
            async with await chatmem.open() as mem:
                await mem.import_sessions(text)
                return await mem.export()

        expected = run(on_cpython())
        db = unique_name("fixture")
        got = page.py(f"""
import chatmem
mem = await chatmem.open({db!r})
report = await mem.import_sessions({text!r})
[report.format, report.sessions_imported, await mem.export()]
""")
        fmt, n, export = got
        assert n == len(expected["sessions"]) > 0, path.name
        assert shape(export) == shape(expected), path.name
