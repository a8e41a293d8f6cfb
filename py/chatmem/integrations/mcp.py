"""``chatmem-mcp``: conversation memory as tools for any MCP client, over stdio.

    chatmem-mcp --db chat.db                  # read-only
    chatmem-mcp --db chat.db --allow-writes   # also append_message

Built on the official ``mcp`` Python SDK (``pip install "chatmem[mcp]"``). The
tools, all answering JSON:

* ``search(query, limit=5, mode="keyword", session_ids=None, roles=None)`` — ranked hits over every session;
* ``retrieve(session_id, query, strategy="hybrid", recent_count=10)`` — the original's retrieval strategies;
* ``list_sessions(limit=20, offset=0, character_id=None, archived=False)``;
* ``read_session(session_id, limit=50, offset=0, newest_first=False)`` — its metadata and messages;
* ``build_context(session_id, max_tokens=8000, reserve_tokens=0, system_prompt=None, format="openai")`` —
  the context window the next model call would get;
* ``append_message(session_id, role, content)`` — only with ``--allow-writes`` (otherwise the tool does
  not exist); creates the session when there is none; durable when it answers.

Read-only mode never writes to the database (the windows it builds do not
either). The SQLite file is opened when the server starts and closed when the
client disconnects.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar, cast

try:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations
except ImportError as e:  # pragma: no cover - depends on the install
    raise SystemExit(f'chatmem-mcp needs the mcp extra: pip install "chatmem[mcp]" ({e})') from e

from ..errors import ChatmemError
from ..index.retrieve import RetrievalConfig
from ..memory import Memory
from ..memory import open as open_memory
from ..records.models import ChatMessage

__all__ = ["build_server", "main", "run"]

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


def _message(m: ChatMessage) -> dict[str, Any]:
    out = {k: v for k, v in dataclasses.asdict(m).items() if v is not None}
    out["text"] = m.text
    return out


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def _reported(fn: F) -> F:
    """chatmem's typed errors reach the client as tool errors it can read (``SessionNotFound: ...``)."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kw: Any) -> Any:
        try:
            return await fn(*args, **kw)
        except ChatmemError as e:
            raise ToolError(f"{type(e).__name__}: {e}") from e

    return cast(F, wrapper)


def build_server(db: str, *, allow_writes: bool = False, name: str = "chatmem") -> MCPServer:
    """The MCP server over the SQLite file ``db`` (``":memory:"`` for a throwaway one)."""
    state: dict[str, Memory] = {}

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[dict[str, Any]]:
        state["mem"] = await open_memory(persist=db)
        try:
            yield {}
        finally:
            await state.pop("mem").close()

    server: MCPServer = MCPServer(
        name,
        instructions=(
            "Conversation memory: search and read past chat sessions, and build the context "
            "window for a session." + (" Writes are allowed." if allow_writes else " Read-only.")
        ),
        lifespan=lifespan,
    )

    def mem() -> Memory:
        return state["mem"]

    @server.tool(annotations=READ_ONLY)
    @_reported
    async def search(
        query: str,
        limit: int = 5,
        mode: str = "keyword",
        session_ids: list[str] | None = None,
        roles: list[str] | None = None,
    ) -> dict[str, Any]:
        """Search every stored conversation. mode: keyword (BM25), semantic, hybrid or substring."""
        hits = await mem().search(query, limit=limit, mode=mode, session_ids=session_ids, roles=roles)
        return {
            "hits": [
                {"session_id": h.session_id, "score": h.score, "message": _message(h.message)} for h in hits
            ]
        }

    @server.tool(annotations=READ_ONLY)
    @_reported
    async def retrieve(
        session_id: str, query: str, strategy: str = "hybrid", recent_count: int = 10
    ) -> dict[str, Any]:
        """Messages of one session chosen by strategy: recent, relevant or hybrid."""
        hits = await mem().retrieve(
            session_id, query, RetrievalConfig(strategy=strategy, recent_count=recent_count)
        )
        return {"hits": [{"score": h.score, "message": _message(h.message)} for h in hits]}

    @server.tool(annotations=READ_ONLY)
    @_reported
    async def list_sessions(
        limit: int = 20, offset: int = 0, character_id: str | None = None, archived: bool | None = False
    ) -> dict[str, Any]:
        """Sessions, most recently active first (archived=None lists archived ones too)."""
        metas = await mem().sessions.list(
            limit=limit, offset=offset, character_id=character_id, archived=archived
        )
        return {"sessions": [dataclasses.asdict(m) for m in metas]}

    @server.tool(annotations=READ_ONLY)
    @_reported
    async def read_session(
        session_id: str, limit: int = 50, offset: int = 0, newest_first: bool = False
    ) -> dict[str, Any]:
        """One session's metadata and a page of its messages."""
        meta = await mem().sessions.get(session_id)
        msgs = await mem().messages.list(session_id, limit=limit, offset=offset, newest_first=newest_first)
        return {"session": dataclasses.asdict(meta), "messages": [_message(m) for m in msgs]}

    @server.tool(annotations=READ_ONLY)
    @_reported
    async def build_context(
        session_id: str,
        max_tokens: int = 8000,
        reserve_tokens: int = 0,
        system_prompt: str | None = None,
        format: str = "openai",
    ) -> dict[str, Any]:
        """The context window for the session's next model call (format: openai or anthropic)."""
        out = await mem().build_context(
            session_id,
            max_tokens=max_tokens,
            reserve_tokens=reserve_tokens,
            system_prompt=system_prompt,
            format=format,
        )
        return out if isinstance(out, dict) else {"messages": out}

    if allow_writes:

        @server.tool(
            annotations=ToolAnnotations(
                read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
            )
        )
        @_reported
        async def append_message(session_id: str, role: str, content: str) -> dict[str, Any]:
            """Append a message (role: user, assistant, system or tool); creates the session if needed."""
            return {"message": _message(await mem().messages.add(session_id, role, content))}

    return server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="chatmem-mcp", description="chatmem's memory as MCP tools over stdio")
    p.add_argument("--db", required=True, help="SQLite file of the memory (created if missing)")
    p.add_argument("--allow-writes", action="store_true", help="also offer append_message")
    p.add_argument("--name", default="chatmem", help="server name shown to clients")
    args = p.parse_args(argv)
    build_server(args.db, allow_writes=args.allow_writes, name=args.name).run("stdio")
    return 0


def run() -> None:
    """The ``chatmem-mcp`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    run()
