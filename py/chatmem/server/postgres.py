"""``SyncStorage`` in PostgreSQL (psycopg 3 and its connection pool), for many
server processes on many machines over one database.

- A space's transaction locks the space's row (``SELECT ... FOR UPDATE``):
  pushes to one space from every instance are serialized, so its ``seq``
  stays gap-free and becomes visible in order, and an ``op_id`` is checked
  and recorded under that lock (applied once, whichever instance got it).
  Pushes to different spaces run in parallel.
- A transaction that moved a cursor sends ``NOTIFY chatmem_changes,
  '<space>:<cursor>'``; PostgreSQL delivers it at commit (never for a
  rollback) to every instance that ``listen()``s — the live stream's source.
- Migrations run under an advisory lock, so instances may start together.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from .sqlbase import Execute, SQLSyncStorage

__all__ = ["PostgresSyncStorage", "CHANNEL"]

log = logging.getLogger("chatmem.server")

#: the NOTIFY channel that announces new cursors
CHANNEL = "chatmem_changes"
_MIGRATION_LOCK = 0x63686D  # any fixed bigint shared by every instance


@functools.lru_cache(maxsize=256)
def _pg(sql: str) -> str:
    return sql.replace("?", "%s")


class PostgresSyncStorage(SQLSyncStorage):
    """``SyncStorage`` over a ``postgresql://`` URL with a pool of ``pool_size`` connections."""

    space_lock = " FOR UPDATE"
    integrity_errors = (psycopg.IntegrityError,)

    def __init__(self, url: str, *, pool_size: int = 10, connect_timeout: float = 10.0):
        self.url = url
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            open=False,
            timeout=connect_timeout,
            name="chatmem-sync",
            kwargs={"connect_timeout": max(1, int(connect_timeout))},
        )
        self._pool.open(wait=True, timeout=connect_timeout)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.migrate()

    @contextmanager
    def _session(self) -> Iterator[Execute]:
        with self._pool.connection() as conn, conn.transaction():

            def ex(sql: str, params: Sequence[Any], many: bool = False) -> list[tuple[Any, ...]]:
                if many:
                    with conn.cursor() as c:
                        c.executemany(_pg(sql), params)
                    return []
                cur = conn.execute(_pg(sql), tuple(params))
                return cur.fetchall() if cur.description is not None else []

            yield ex

    def _migration_lock(self, ex: Execute) -> None:
        ex("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))

    def _announce(self, ex: Execute, space: str, cursor: int) -> None:
        ex("SELECT pg_notify(?, ?)", (CHANNEL, f"{space}:{cursor}"))

    def listen(self, callback: Callable[[str, int], None]) -> None:
        """Call ``callback(space, cursor)`` (from a daemon thread) for every change committed
        by any instance, until ``close()``; reconnects with backoff if the connection drops."""
        t = threading.Thread(target=self._listen, args=(callback,), daemon=True, name="chatmem-listen")
        self._threads.append(t)
        t.start()

    def _listen(self, callback: Callable[[str, int], None]) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    delay = 0.5
                    while not self._stop.is_set():
                        for n in conn.notifies(timeout=0.5):
                            space, _, cursor = n.payload.rpartition(":")
                            if space and cursor.isdigit():
                                callback(space, int(cursor))
            except Exception as e:  # noqa: BLE001 - keep listening; the cursor is authoritative
                if self._stop.is_set():
                    return
                log.warning("change listener lost its connection (%s); reconnecting", type(e).__name__)
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        self._pool.close()
