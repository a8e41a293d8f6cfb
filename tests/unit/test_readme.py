"""The README's examples run: the CPython example, and every SQL example."""

from __future__ import annotations

import os
import re
from pathlib import Path

import chatmem
from conftest import ROOT, run

README = (ROOT / "README.md").read_text(encoding="utf-8")


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_the_cpython_example_runs(tmp_path: Path, capsys) -> None:
    """The README's CPython example runs as written and prints the conversation."""
    block = next(b for b in python_blocks() if "asyncio.run(main())" in b)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        code = block.replace("asyncio.run(main())", "")
        ns: dict = {}
        exec(code, ns)
        run(ns["main"]())
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "0 user My order is late" in out and (tmp_path / "chat.db").exists()


def test_every_sql_example_runs() -> None:
    """Each mem.sql example in the README answers on real data without error."""
    block = next(b for b in python_blocks() if "messages per day" in b)
    calls = re.findall(r"await (mem\.sql\(.*?\))\n(?=#|$)", block + "\n", flags=re.S)
    assert len(calls) == 4

    async def go() -> list:
        async with await chatmem.open() as mem:
            for who in ("airi", "bob"):
                s = await mem.sessions.create(title=who, character_id=who)
                await mem.messages.append_many(s.session_id, [
                    {"role": "user", "content": "hello there friend, tell me about gardens"},
                    {"role": "assistant", "content": "gardens need water and patience"}])
            return [await eval(c, {"mem": mem}) for c in calls]

    results = run(go())
    assert all(isinstance(r, list) and r for r in results)
    assert results[2][0]["message_count"] == 2
