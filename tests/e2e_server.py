"""The reference server for the end-to-end encryption tests, over each storage
this checkout has (SQLite always; PostgreSQL where ``chatmem.server.postgres``
exists, on the ``pg_url`` fixture's throwaway database), and a way to read
everything it stored, to grep it for plaintext."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from chatmem.server import SQLiteSyncStorage, running_server

__all__ = ["STORAGES", "e2e_server", "stored_bytes"]

#: server storages to run each test over
STORAGES = ["sqlite"] + (["postgres"] if importlib.util.find_spec("chatmem.server.postgres") else [])


@contextmanager
def e2e_server(request: Any, tmp_path: Path, api_keys: list[str]) -> Iterator[Any]:
    """A running reference server on the storage ``request.param``; records every push body."""
    if request.param == "postgres":
        from chatmem.server import open_storage

        url = request.getfixturevalue("pg_url")
        storage, where = open_storage(url), url
    else:
        where = str(tmp_path / "server.db")
        storage = SQLiteSyncStorage(where)
    with running_server(api_keys=api_keys, storage=storage) as s:
        s.kind, s.where, s.pushed = request.param, where, []
        orig = s.service.push

        def push(space: str, payload: Any) -> Any:
            s.pushed.append(json.dumps(payload, ensure_ascii=False))
            return orig(space, payload)

        s.service.push = push
        yield s


def stored_bytes(srv: Any) -> bytes:
    """Everything the server stored: the SQLite files, or every row of every PostgreSQL table."""
    if srv.kind == "postgres":
        import psycopg  # type: ignore[import-not-found]

        out = []
        with psycopg.connect(srv.where) as conn:
            tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
            for (t,) in tables:
                out += [repr(row) for row in conn.execute(f'SELECT * FROM "{t}"').fetchall()]
        return "\n".join(out).encode("utf-8")
    return b"".join(
        Path(srv.where + sfx).read_bytes() for sfx in ("", "-wal") if Path(srv.where + sfx).exists()
    )
