"""chatmem-mcp over stdio, driven by the official MCP SDK's own client: the tools,
read-only by default, append only with --allow-writes."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

import chatmem
from conftest import run

READ_TOOLS = {"search", "retrieve", "list_sessions", "read_session", "build_context"}


def command() -> tuple[str, list[str]]:
    """The installed console script (next to this interpreter), as a user would run it."""
    script = Path(sys.executable).parent / "chatmem-mcp"
    found = str(script) if script.exists() else shutil.which("chatmem-mcp")
    assert found, "the chatmem-mcp console script is installed with the package"
    return found, []


@pytest.fixture
def db(tmp_path: Path) -> tuple[str, str]:
    path = str(tmp_path / "chat.db")

    async def seed() -> str:
        async with await chatmem.open(persist=path) as mem:
            s = await mem.sessions.create(title="Trip plans", character_id="airi")
            await mem.messages.append_many(
                s.session_id,
                [
                    {"role": "system", "content": "You are Airi."},
                    {"role": "user", "content": "Where should we go in May?"},
                    {"role": "assistant", "content": "Lisbon is lovely in May: trams, pastries, the river."},
                    {"role": "user", "content": "Book the trams then."},
                ],
            )
            other = await mem.sessions.create(title="Groceries")
            await mem.messages.append(other.session_id, "user", "milk, eggs, bread")
            return s.session_id

    return path, run(seed())


def data(result: Any) -> Any:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def session(
    db_path: str, *extra: str, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[set[str], list[Any]]:
    cmd, pre = command()
    params = StdioServerParameters(command=cmd, args=[*pre, "--db", db_path, *extra])
    async with Client(params, read_timeout_seconds=60) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        return tools, [await client.call_tool(name, args) for name, args in calls]


async def test_read_only_tools_answer_over_stdio(db: tuple[str, str]):
    path, sid = db
    tools, (found, sessions, read, window, retrieved, refused) = await session(
        path,
        calls=[
            ("search", {"query": "lisbon trams"}),
            ("list_sessions", {}),
            ("read_session", {"session_id": sid}),
            ("build_context", {"session_id": sid, "max_tokens": 200, "format": "anthropic"}),
            ("retrieve", {"session_id": sid, "query": "lisbon", "strategy": "recent", "recent_count": 2}),
            ("append_message", {"session_id": sid, "role": "user", "content": "sneaky"}),
        ],
    )
    assert tools == READ_TOOLS
    hits = data(found)["hits"]
    assert hits and hits[0]["session_id"] == sid and "Lisbon" in hits[0]["message"]["text"]
    assert [s["title"] for s in data(sessions)["sessions"]] == ["Groceries", "Trip plans"]
    assert [m["role"] for m in data(read)["messages"]] == ["system", "user", "assistant", "user"]
    w = data(window)
    assert w["system"] == "You are Airi." and w["messages"][-1]["content"] == "Book the trams then."
    assert [h["message"]["seq"] for h in data(retrieved)["hits"]] == [2, 3]
    assert refused.is_error

    async def count() -> int:
        async with await chatmem.open(persist=path) as mem:
            return await mem.messages.count(sid)

    assert (await count()) == 4


async def test_allow_writes_adds_append_message(db: tuple[str, str]):
    path, sid = db
    tools, (added, new, read) = await session(
        path,
        "--allow-writes",
        calls=[
            ("append_message", {"session_id": sid, "role": "user", "content": "And a museum?"}),
            ("append_message", {"session_id": "notes", "role": "user", "content": "a new session"}),
            ("read_session", {"session_id": sid, "newest_first": True, "limit": 1}),
        ],
    )
    assert tools == READ_TOOLS | {"append_message"}
    assert data(added)["message"]["seq"] == 4 and data(new)["message"]["session_id"] == "notes"
    assert data(read)["messages"][0]["text"] == "And a museum?"


async def test_errors_are_tool_errors_not_crashes(db: tuple[str, str]):
    path, _ = db
    _, (missing, after) = await session(
        path,
        calls=[
            ("read_session", {"session_id": "no-such-session"}),
            ("list_sessions", {"limit": 1}),
        ],
    )
    assert missing.is_error and "no-such-session" in str(missing.content)
    assert len(data(after)["sessions"]) == 1
