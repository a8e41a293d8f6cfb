"""The written pages: every code block of the README and of ``docs/`` runs (or is
checked) in a test, and the site that ``python build.py build`` ships in ``dist/docs/``
(MkDocs, strict) has the API reference from the docstrings and fetches nothing.

Blocks are discovered, not listed (``doc_pages.blocks``): a new block is covered as
soon as it is written, by its language:

* ``python`` — a script (it calls ``asyncio.run``) runs as written in a fresh
  interpreter and folder, and must print; any other block runs as async code
  (top-level ``await``) with a fresh in-memory ``mem`` holding a session ``s`` /
  ``sid`` of a few messages, in a fresh folder. Endpoints that stand for a real
  service are pointed at local peers: the sync server URL at the reference server on
  127.0.0.1, the model URLs at the local model server of ``tests/llm_server.py``.
* ``json`` — parses (``{…}`` and ``[…]`` stand for elided objects and lists).
* ``sh`` — each command names something that exists (a ``build.py`` subcommand, an
  extra of ``pyproject.toml``, a console script).
* ``js`` — ``chatmem.runPython`` blocks run in the booted page
  (``tests/browser/test_docs_browser.py``); ``html`` — the own-page recipes, verbatim
  files under ``tests/recipes/`` loaded by ``tests/browser/test_recipes.py``.
* ``text`` (or no language) — not code.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

import chatmem
from conftest import ROOT
from doc_pages import Block, blocks, ids

DOCS = ROOT / "docs"
DIST = Path(os.environ.get("CHATMEM_DIST", ROOT / "dist"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
KNOWN = {"python", "json", "sh", "js", "html", "text", ""}
README_MAX_LINES = 150


def test_every_block_has_a_known_language() -> None:
    """A block in a language no test covers fails here (add a runner, or mark it ``text``)."""
    unknown = [(b.where, b.lang) for b in blocks() if b.lang not in KNOWN]
    assert not unknown


def test_the_readme_is_short_and_opens_with_the_two_commands() -> None:
    """The README is the front door; the long form lives in the documentation site."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    first = blocks("sh")[0]
    assert first.where == "README.md:3"
    assert [line.split("#")[0].split() for line in first.code.splitlines()] == [
        ["python", "build.py", "serve"],
        ["python", "build.py", "test"],
    ]
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).exists(), f"the README links to {target}, which does not exist"


# ---------------------------------------------------------------------------- python


@pytest.fixture(scope="module")
def peers() -> Any:
    """The reference sync server and the local model server, for blocks that name such services."""
    from chatmem.server import running_server
    from llm_server import LLMServer

    llm = LLMServer()
    with running_server(api_keys=["docs-key"]) as sync:
        yield {"sync": sync.url, "llm": llm.url}
    llm.close()


def localize(code: str, peers: dict[str, str]) -> str:
    """Point the example services at local peers (the code is otherwise run as written)."""
    code = re.sub(r'endpoint="https://[^"]+"', f'endpoint="{peers["sync"]}"', code)
    code = code.replace('api_key="..."', 'api_key="docs-key"')
    code = re.sub(
        r'OpenAICompatibleProvider\("http[^"]+"', f'OpenAICompatibleProvider("{peers["llm"]}"', code
    )
    code = re.sub(
        r'AnthropicProvider\(("[^"]*"), ("[^"]*")\)',
        lambda m: f'AnthropicProvider({m.group(1)}, {m.group(2)}, base_url="{peers["llm"]}")',
        code,
    )
    return code


async def run_snippet(code: str) -> dict[str, Any]:
    mem = await chatmem.open()
    s = await mem.sessions.create(title="Trip plans", character_id="airi")
    await mem.messages.append_many(
        s.session_id,
        [
            {"role": "user", "content": "Where should we go in May?"},
            {"role": "assistant", "content": "Lisbon is lovely in May."},
        ],
    )
    ns: dict[str, Any] = {"chatmem": chatmem, "asyncio": asyncio, "mem": mem, "s": s, "sid": s.session_id}
    compiled = compile(code, "<docs>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    try:
        result = eval(compiled, ns)
        if asyncio.iscoroutine(result):
            await result
    finally:
        await mem.close()
    return ns


def is_script(code: str) -> bool:
    """A whole program (it runs its own event loop), not a snippet over a fixture ``mem``."""
    return "asyncio.run(" in code


@pytest.mark.parametrize("block", blocks("python"), ids=ids(blocks("python")))
async def test_python_block_runs(
    block: Block, peers: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = localize(block.code, peers)
    if is_script(code):
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{block.where}:\n{done.stderr[-3000:]}"
        assert done.stdout.strip(), f"{block.where} printed nothing"
        return
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        await run_snippet(code)
    finally:
        os.chdir(cwd)
    capsys.readouterr()


def test_the_readme_example_prints_the_conversation(tmp_path: Path) -> None:
    """The README's CPython example runs as written, prints the conversation and keeps the file."""
    code = next(b.code for b in blocks("python") if b.where.startswith("README.md") and is_script(b.code))
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "0 user My order is late" in done.stdout and (tmp_path / "chat.db").exists()


async def test_every_sql_example_answers_on_real_data() -> None:
    """Each mem.sql example of the query index page answers on real data without error."""
    block = next(b.code for b in blocks("python") if "messages per day" in b.code)
    calls = re.findall(r"await (mem\.sql\(.*?\))\n(?=#|$)", block + "\n", flags=re.S)
    assert len(calls) == 4

    async def answers() -> list[Any]:
        async with await chatmem.open() as mem:
            for who in ("airi", "bob"):
                s = await mem.sessions.create(title=who, character_id=who)
                await mem.messages.append_many(
                    s.session_id,
                    [
                        {"role": "user", "content": "hello there friend, tell me about gardens"},
                        {"role": "assistant", "content": "gardens need water and patience"},
                    ],
                )
            return [await eval(c, {"mem": mem}) for c in calls]

    results = await answers()
    assert all(isinstance(r, list) and r for r in results)
    assert results[2][0]["message_count"] == 2


def test_the_api_at_a_glance_has_a_running_example() -> None:
    """The API overview holds a python block (run above like every other)."""
    assert any(b.where.startswith("docs/in-depth/api.md") for b in blocks("python"))


# ---------------------------------------------------------------------------- json, sh


@pytest.mark.parametrize("block", blocks("json"), ids=ids(blocks("json")))
def test_json_block_parses(block: Block) -> None:
    # "…" stands for elided values: {…} is an object, […] a list
    json.loads(block.code.replace("{…}", "{}").replace("[…]", "[]"))


def sh_commands() -> list[str]:
    return [
        line.split("#", 1)[0].strip()
        for b in blocks("sh")
        for line in b.code.splitlines()
        if line.split("#", 1)[0].strip()
    ]


@pytest.mark.parametrize("cmd", sorted(set(sh_commands())))
def test_sh_command_names_what_exists(cmd: str) -> None:
    import build

    words = cmd.split()
    if words[:2] == ["python", "build.py"]:
        parser_src = Path(build.__file__).read_text(encoding="utf-8")
        assert f'"{words[2]}"' in parser_src, f"build.py has no {words[2]!r} command"
    elif words[:2] == ["pip", "install"]:
        target = words[2].strip("'\"")
        m = re.fullmatch(r"(?:\.|chatmem)(?:\[(.*)\])?", target)
        assert m, target
        extras = set(PYPROJECT["project"]["optional-dependencies"])
        assert set(filter(None, (m.group(1) or "").split(","))) <= extras
    elif words[0] in PYPROJECT["project"]["scripts"]:
        pass
    else:
        pytest.fail(f"no check for the documented command {cmd!r}: add one")


def test_extras_and_scripts_are_the_documented_ones() -> None:
    assert set(PYPROJECT["project"]["optional-dependencies"]) >= {
        "server",
        "postgres",
        "mcp",
        "langchain",
        "test",
        "dev",
    }
    assert set(PYPROJECT["project"]["scripts"]) == {"chatmem-server", "chatmem-mcp"}
    deps = [
        *PYPROJECT["project"]["dependencies"],
        *sum(PYPROJECT["project"]["optional-dependencies"].values(), []),
    ]
    assert [d for d in deps if "==" in d] == [], "pyproject states ranges; the lock holds exact versions"
    lock = (ROOT / "requirements-lock.txt").read_text().splitlines()
    pinned = {line.split("==")[0].lower() for line in lock if "==" in line and not line.startswith("#")}
    named = {
        d.split(";")[0].split("[")[0].split(">")[0].split("<")[0].split("~")[0].strip().lower() for d in deps
    }
    assert named - {"chatmem"} <= pinned, (
        f"not in requirements-lock.txt: {sorted(named - pinned - {'chatmem'})}"
    )
    layout = (DOCS / "in-depth" / "layout.md").read_text(encoding="utf-8")
    for name in [*PYPROJECT["project"]["optional-dependencies"], *PYPROJECT["project"]["scripts"]]:
        assert name in layout, f"the page of the project's files does not list {name}"


# ---------------------------------------------------------------------------- the site


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
    for page in ("architecture", "changelog", "app", "performance", "in-depth/query-index"):
        assert (site / f"{page}.html").exists(), page


def test_the_reference_names_every_public_name() -> None:
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
