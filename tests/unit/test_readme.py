"""Every code block of the README runs (or is checked) in a test.

Blocks are discovered, not listed: a new block is covered as soon as it is
written, by its language:

* ``python`` — a script (``asyncio.run(main())``) runs as written in a fresh
  folder; any other block runs as async code (top-level ``await``) with a
  fresh in-memory ``mem`` holding a session ``s`` / ``sid`` of a few messages,
  in a fresh folder. Endpoints that stand for a real service are pointed at
  local peers: the sync server URL at the reference server on 127.0.0.1, the
  model URLs at the local model server of ``tests/llm_server.py``.
* ``json`` — parses (``{…}`` and ``[…]`` stand for elided objects and lists).
* ``sh`` — each command names something that exists (a ``build.py``
  subcommand, an extra of ``pyproject.toml``, a console script).
* ``js`` — ``chatmem.runPython`` blocks run in the booted page
  (``tests/browser/test_readme_browser.py``); ``html`` — the own-page recipes,
  verbatim files under ``tests/recipes/`` loaded by ``tests/browser/test_recipes.py``.
* ``text`` (or no language) — not code.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

import chatmem
from conftest import ROOT, run

README = (ROOT / "README.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
KNOWN = {"python", "json", "sh", "js", "html", "text", ""}


def blocks(lang: str | None = None) -> list[tuple[int, str, str]]:
    """(line, language, code) of every fenced block, in order."""
    out = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", README, flags=re.S | re.M):
        line = README[: m.start()].count("\n") + 1
        if lang is None or m.group(1) == lang:
            out.append((line, m.group(1), m.group(2)))
    return out


def ids(items: list[tuple[int, str, str]]) -> list[str]:
    return [f"README.md:{line}" for line, _, _ in items]


def test_every_block_has_a_known_language() -> None:
    """A block in a language no test covers fails here (add a runner, or mark it ``text``)."""
    assert {lang for _, lang, _ in blocks()} <= KNOWN


# ---------------------------------------------------------------------------- python


@pytest.fixture(scope="module")
def peers() -> Any:
    """The reference sync server and the local model server, for blocks that name such services."""
    from chatmem.server import running_server
    from llm_server import LLMServer

    llm = LLMServer()
    with running_server(api_keys=["readme-key"]) as sync:
        yield {"sync": sync.url, "llm": llm.url}
    llm.close()


def localize(code: str, peers: dict[str, str]) -> str:
    """Point the example services at local peers (the code is otherwise run as written)."""
    code = re.sub(r'endpoint="https://[^"]+"', f'endpoint="{peers["sync"]}"', code)
    code = code.replace('api_key="..."', 'api_key="readme-key"')
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
    compiled = compile(code, "<README>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    try:
        result = eval(compiled, ns)
        if asyncio.iscoroutine(result):
            await result
    finally:
        await mem.close()
    return ns


@pytest.mark.parametrize("block", blocks("python"), ids=ids(blocks("python")))
def test_python_block_runs(
    block: tuple[int, str, str], peers: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, code = block
    code = localize(code, peers)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        if "asyncio.run(main())" in code:
            ns: dict[str, Any] = {}
            exec(code.replace("asyncio.run(main())", ""), ns)
            run(ns["main"]())
        else:
            run(run_snippet(code))
    finally:
        os.chdir(cwd)
    capsys.readouterr()


def test_the_cpython_example_prints_the_conversation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's CPython example runs as written and prints the conversation."""
    _, _, code = next(b for b in blocks("python") if "asyncio.run(main())" in b[2])
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        ns: dict[str, Any] = {}
        exec(code.replace("asyncio.run(main())", ""), ns)
        run(ns["main"]())
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "0 user My order is late" in out and (tmp_path / "chat.db").exists()


def test_every_sql_example_answers_on_real_data() -> None:
    """Each mem.sql example in the README answers on real data without error."""
    _, _, block = next(b for b in blocks("python") if "messages per day" in b[2])
    calls = re.findall(r"await (mem\.sql\(.*?\))\n(?=#|$)", block + "\n", flags=re.S)
    assert len(calls) == 4

    async def go() -> list[Any]:
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

    results = run(go())
    assert all(isinstance(r, list) and r for r in results)
    assert results[2][0]["message_count"] == 2


def test_reference_section_has_a_running_example() -> None:
    """The Reference section holds a python block (run above like every other)."""
    ref = README.split("### Reference", 1)[1].split("\n## ", 1)[0]
    assert "```python" in ref


# ---------------------------------------------------------------------------- json, sh


@pytest.mark.parametrize("block", blocks("json"), ids=ids(blocks("json")))
def test_json_block_parses(block: tuple[int, str, str]) -> None:
    import json

    # "…" stands for elided values: {…} is an object, […] a list
    json.loads(block[2].replace("{…}", "{}").replace("[…]", "[]"))


def sh_commands() -> list[str]:
    return [
        line.split("#", 1)[0].strip()
        for _, _, code in blocks("sh")
        for line in code.splitlines()
        if line.split("#", 1)[0].strip()
    ]


@pytest.mark.parametrize("cmd", sh_commands())
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
        pytest.fail(f"no check for README command {cmd!r}: add one")


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
    layout = README.split("## Layout", 1)[1]
    for name in [*PYPROJECT["project"]["optional-dependencies"], *PYPROJECT["project"]["scripts"]]:
        assert name in layout, f"the README's Layout does not list {name}"
