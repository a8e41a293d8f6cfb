"""The documentation site: every Python example in ``docs/`` runs, and the site that
``python build.py build`` ships in ``dist/docs/`` (MkDocs, strict) has the API reference
from the docstrings and fetches nothing from elsewhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DIST = Path(os.environ.get("CHATMEM_DIST", ROOT / "dist"))


def examples() -> list[tuple[str, str]]:
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        for m in re.finditer(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.S | re.M):
            out.append(
                (f"{page.relative_to(ROOT)}:{page.read_text()[: m.start()].count(chr(10)) + 1}", m.group(1))
            )
    return out


@pytest.mark.parametrize("where,code", examples(), ids=[w for w, _ in examples()])
def test_every_python_example_runs(where: str, code: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{where}:\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{where} printed nothing"


def test_the_built_site_ships_the_docs_offline() -> None:
    site = DIST / "docs"
    if not (DIST / "index.html").exists():
        pytest.skip("no dist/: python build.py build writes it (build.py test does)")
    api = (site / "reference" / "api.html").read_text(encoding="utf-8")
    assert "build_window" in api and "SessionNotFound" in api, "the reference comes from the docstrings"
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        fetched = re.findall(r"""<(?:script|link|img)[^>]+(?:src|href)=["'](https?://[^"']+)""", html)
        assert not fetched, f"{page.relative_to(site)} fetches {fetched[:3]}"
    assert (site / "architecture.html").exists() and (site / "changelog.html").exists()


def test_the_reference_names_every_public_name() -> None:
    import chatmem

    page = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    site = DIST / "docs" / "reference" / "api.html"
    if not site.exists():
        pytest.skip("no dist/: python build.py build writes it (build.py test does)")
    text = re.sub(r"<[^>]+>", " ", site.read_text(encoding="utf-8"))
    missing = [
        n for n in chatmem.__all__ if n != "__version__" and not re.search(rf"\b{re.escape(n)}\b", text)
    ]
    assert not missing, f"{missing} are not in the reference ({page[:40]}…)"


@pytest.mark.parametrize("command", [(), ("accounts",), ("tokens",)], ids=["server", "accounts", "tokens"])
def test_the_server_page_shows_the_commands_as_they_are(command: tuple[str, ...]) -> None:
    """The server's reference quotes its ``--help``: it changes with the command line."""
    env = dict(os.environ, COLUMNS="100")
    shown = subprocess.run(
        [sys.executable, "-m", "chatmem.server", *command, "--help"], capture_output=True, text=True, env=env
    ).stdout.rstrip()
    assert shown and shown in (DOCS / "reference" / "server.md").read_text(encoding="utf-8")


def test_every_json_example_parses() -> None:
    import json

    for page in sorted(DOCS.rglob("*.md")):
        for m in re.finditer(r"^```json\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.S | re.M):
            json.loads(m.group(1))
