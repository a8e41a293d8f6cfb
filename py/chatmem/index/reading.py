"""Reading the whole store for a derivation of the index: every session's messages,
the sessions in the given order, each by ``seq``.

Small sessions are read many at a time (``Store.list_sessions_messages``, one
transaction for about ``BATCH`` messages: in the page a read per session cost
more than the records themselves), a big one a ``PAGE`` at a time, and the next
read is under way while the caller works on the records of the last (in the
page the store answers while Python tokenises). Each read sees the store as it
is then, as the per-session reads did: writes made meanwhile reach the index
through its change events.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any, AsyncIterator, Awaitable, Callable

from ..scheduling.settle import settle
from ..stores.base import Store

__all__ = ["BATCH", "PAGE", "each_message"]

#: messages of a big session per read
PAGE = 1000
#: about this many messages of small sessions per read
BATCH = 5000

Read = Callable[[], Awaitable[list[dict[str, Any]]]]


def _reads(store: Store, metas: list[dict[str, Any]]) -> list[tuple[Read, str | None]]:
    """The reads, in order: (read, the session whose next page follows if this one is full)."""
    out: list[tuple[Read, str | None]] = []
    group: list[str] = []
    size = 0

    def flush() -> None:
        nonlocal group, size
        if group:
            out.append((partial(store.list_sessions_messages, group), None))
            group, size = [], 0

    for meta in metas:
        sid, count = meta["sessionId"], int(meta.get("messageCount") or 0)
        if count >= PAGE:
            flush()
            out.append((partial(store.list_messages, sid, 0, PAGE, False), sid))
            continue
        group.append(sid)
        size += count
        if size >= BATCH:
            flush()
    flush()
    return out


async def each_message(store: Store, metas: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    """Every message of the sessions ``metas`` (store session records), read ahead by one read."""
    reads = _reads(store, metas)
    ahead: asyncio.Future[list[dict[str, Any]]] | None = None
    try:
        for i, (read, paged) in enumerate(reads):
            page = await (ahead if ahead is not None else read())
            ahead = asyncio.ensure_future(reads[i + 1][0]()) if i + 1 < len(reads) else None
            for rec in page:
                yield rec
            offset = len(page)
            while paged is not None and len(page) == PAGE:  # a big session: its next pages
                page = await store.list_messages(paged, offset, PAGE, False)
                offset += len(page)
                for rec in page:
                    yield rec
    finally:
        if ahead is not None and not ahead.done():
            ahead.cancel()
            await settle(ahead)
