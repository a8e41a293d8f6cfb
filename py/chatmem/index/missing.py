"""Embedding the stored messages that have no vector yet (``QueryIndex.embed_missing``):
found oldest first with the turn before each, embedded outside the index's lock (the
embedder yields to the event loop), written under it a batch at a time. Nothing here is
durable: the vectors are derived, and a lost batch is found missing again."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

from ..embedding.embedders import Embedder
from .embeddings import EMBEDDING_COLUMNS, embedding_rows
from .protocols import SearchIndex

__all__ = ["READ", "embed_missing"]

#: at most this many missing messages' text crosses to Python in one answer (in the page
#: a bigger answer is one long task); more are found by one statement and read in parts
READ = 256


async def _parts(
    index: SearchIndex, sql: str, params: list[Any], limit: int | None
) -> AsyncIterator[list[dict[str, Any]]]:
    """The rows of ``sql`` (ordered, at most ``limit``) ``READ`` at a time: past ``READ``
    the statement runs once into a temporary table, which is read a part at a time."""
    if limit is not None and limit <= READ:
        yield await index.execute(sql, params)
        return
    # the engine may be another tab's (a guest's fallback runs on the owner's connection)
    name = f"embed_todo_{secrets.token_hex(6)}"
    await index.execute(f"CREATE TEMP TABLE {name} AS {sql}", params)
    try:
        offset = 0
        while True:
            rows = await index.execute(
                f"SELECT * FROM {name} ORDER BY created_at, id LIMIT {READ} OFFSET {offset}"
            )
            if rows:
                yield rows
            if len(rows) < READ:
                return
            offset += READ
    finally:
        await index.execute(f"DROP TABLE IF EXISTS {name}")


async def embed_missing(
    index: SearchIndex,
    embedder: Embedder,
    *,
    session_id: str | None = None,
    batch_size: int = 256,
    limit: int | None = None,
) -> int:
    """Embed the messages that have no vector for ``embedder.model`` yet (at most
    ``limit``, oldest first); return how many. ``embed_progress`` is then
    ``(messages with a vector, messages)`` of the scope.

    Cheap when nothing is missing: two counts, and none at all once a whole-index
    check found every message embedded and no message was written since.
    """
    await index.setup()
    if not embedder.dimensions:
        await embedder.embed(["dimension probe"])  # an HTTP embedder learns its size
    key = (embedder.model, embedder.dimensions)
    if key in index.embedded:
        return 0
    where, params = ("WHERE session_id = ?", [session_id]) if session_id else ("", [])
    total = await index.execute(f"SELECT count(*) AS n FROM messages {where}", params)
    done = await index.execute(
        "SELECT count(*) AS n FROM embeddings e WHERE e.model = ? AND e.dim = ?"
        + (" AND e.message_id IN (SELECT id FROM messages WHERE session_id = ?)" if session_id else ""),
        [embedder.model, embedder.dimensions] + params,
    )
    n_total, n_done = int(total[0]["n"]), int(done[0]["n"])
    index.embed_progress = (min(n_done, n_total), n_total)
    if n_total <= n_done:
        if not session_id:
            index.embedded.add(key)
        return 0
    sql = (
        "SELECT m.id, m.text, p.text AS prev, m.session_id, m.role, m.created_at FROM messages m "
        "LEFT JOIN messages p ON p.session_id = m.session_id AND p.seq = m.seq - 1 "
        + ("WHERE m.session_id = ? AND " if session_id else "WHERE ")
        + "NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.message_id = m.id "
        f"AND e.model = ? AND e.dim = ?) ORDER BY m.created_at, m.id{f' LIMIT {int(limit)}' if limit else ''}"
    )
    count = 0
    async for rows in _parts(index, sql, params + [embedder.model, embedder.dimensions], limit):
        # a vector of another dimension under the same model name is stale: replace it
        for i in range(0, len(rows), batch_size):
            part = rows[i : i + batch_size]
            # embedded outside the lock (it yields to the event loop); written under it
            vec_rows = await embedding_rows(
                embedder,
                [(r["id"], r["text"], r["prev"]) for r in part],
                {r["id"]: (r["session_id"], r["role"], r["created_at"]) for r in part},
            )
            async with index.write_lock:
                await index.engine.execute(
                    f"DELETE FROM embeddings WHERE model = ? AND message_id IN ({', '.join('?' for _ in part)})",
                    [embedder.model] + [r["id"] for r in part],
                )
                await index.engine.load_rows("embeddings", EMBEDDING_COLUMNS, vec_rows)
            count += len(part)
            index.embed_progress = (min(n_done + count, n_total), n_total)
    return count
