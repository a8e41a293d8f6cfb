"""Live sync: follow the server's ``GET /v1/stream`` and wake the synchronizer when
another device moved the change feed, so it pulls within a second instead of
at the next ``sync_interval``.

The stream only says *that* the feed moved (a cursor); the synchronizer then pulls
``/v1/changes`` from its stored cursor as always, so a dropped connection or
a missed event costs latency, never a change. Broken connections reconnect
with exponential backoff and jitter (0.5 s doubling to 30 s; back to 0.5 s once
an event arrived); every (re)connection announces the current cursor, which
makes the synchronizer catch up on anything pushed while it was away. A server
without a stream (404/405/501 or not ``text/event-stream``) ends following:
polling goes on. A revoked key ends it too (the synchronizer pauses on its next
request). Runs unchanged on CPython (urllib) and in the page (``fetch``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import SyncAuthError, SyncError, SyncPermanentError
from .protocol import SyncClient

__all__ = ["StreamFollower", "follow_stream", "LIVE_BACKOFF_BASE", "LIVE_BACKOFF_MAX"]

log = logging.getLogger("chatmem.sync")

LIVE_BACKOFF_BASE = 0.5
LIVE_BACKOFF_MAX = 30.0
_UNSUPPORTED = (None, 404, 405, 501)


async def follow_stream(
    client: SyncClient,
    on_cursor: Callable[[str], None],
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rand: Callable[[], float] = random.random,
) -> str:
    """Call ``on_cursor(cursor)`` for every announced cursor until cancelled; reconnect
    with backoff. Returns why it stopped for good: ``"unsupported"`` or ``"auth"``."""
    failures = 0
    while True:
        try:
            async for cursor in client.stream():
                failures = 0
                on_cursor(cursor)
            failures += 1  # the server closed the stream (e.g. a restart): reconnect
        except SyncAuthError:
            return "auth"
        except SyncPermanentError as e:
            if e.status in _UNSUPPORTED:
                log.info("the sync server has no live stream; polling only")
                return "unsupported"
            failures += 1
        except SyncError as e:
            failures += 1
            log.debug("live stream broke (%s); reconnecting", e)
        delay = min(LIVE_BACKOFF_MAX, LIVE_BACKOFF_BASE * 2 ** max(0, failures - 1))
        await sleep(delay * (0.5 + rand() / 2))


class StreamFollower:
    """The live half of one synchronizer's auto-sync: a local write pokes the loop (push now),
    and a followed stream pokes it when the server's cursor is not the last one pulled."""

    def __init__(self, poke: Callable[[], None], listeners: list[Callable[[str, str, Any], None]]):
        self._poke = poke
        self._listeners = listeners
        self._task: asyncio.Task[None] | None = None
        #: the cursor of the last completed pull
        self.pulled: str | None = None
        #: "off", "following", "unsupported" (no stream: polling) or "auth" (key refused)
        self.state = "off"

    def on_write(self, kind: str, session_id: str, payload: Any) -> None:
        if kind != "session-synced":
            self._poke()

    def start(
        self, ready: Callable[[], Awaitable[tuple[Any, SyncClient]]], rand: Callable[[], float]
    ) -> None:
        """Listen for local writes and follow the stream (once; ``cancel``/``stop`` end both)."""
        if self.on_write not in self._listeners:
            self._listeners.append(self.on_write)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._follow(ready, rand))

    async def _follow(
        self, ready: Callable[[], Awaitable[tuple[Any, SyncClient]]], rand: Callable[[], float]
    ) -> None:
        def seen(cursor: str) -> None:
            if cursor != self.pulled:
                self._poke()

        _, client = await ready()
        self.state = "following"
        self.state = await follow_stream(client, seen, rand=rand)

    def cancel(self) -> asyncio.Task[None] | None:
        """Stop listening and following now; returns the cancelled task."""
        if self.on_write in self._listeners:
            self._listeners.remove(self.on_write)
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
        self.state = "off"
        return task

    async def stop(self) -> None:
        """``cancel`` and wait until the follower has ended."""
        task = self.cancel()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
