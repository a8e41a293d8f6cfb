"""Live changes: ``GET /v1/stream`` (Server-Sent Events) announces the new cursors
of the caller's space.

Each instance holds a ``ChangeHub``: the pushes it serves publish to it
directly, and with PostgreSQL a listener thread feeds it every commit of every
instance (``LISTEN/NOTIFY``). A stream sends the space's current cursor first,
then an ``event: cursor`` (``id`` and ``data`` = the cursor) whenever it moves,
and a ``: ping`` comment every ``heartbeat`` seconds, when it also checks that
its token was not revoked (a revoked token's stream ends). Events carry cursors,
never data: the client pulls ``/v1/changes`` as usual, so a missed event costs
latency, never a change.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable

__all__ = ["ChangeHub", "Subscription", "sse_events"]


class Subscription:
    """One stream's view of its space: the newest announced cursor and a wake-up."""

    def __init__(self, space: str, cursor: int):
        self.space = space
        self.cursor = cursor
        self.event = asyncio.Event()

    async def wait(self, timeout: float) -> bool:
        """True once the cursor moved (or the hub closed); False after ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        self.event.clear()
        return True


class ChangeHub:
    """Fan-out of ``(space, cursor)`` to this instance's streams (one event loop)."""

    def __init__(self) -> None:
        self._subs: dict[str, set[Subscription]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self.closed = False

    def subscribe(self, space: str, cursor: int) -> Subscription:
        self._loop = asyncio.get_running_loop()
        sub = Subscription(space, cursor)
        self._subs.setdefault(space, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.space)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.space]

    def publish(self, space: str, cursor: int) -> None:
        """Announce a cursor (on the event loop's thread)."""
        for sub in list(self._subs.get(space, ())):
            if cursor > sub.cursor:
                sub.cursor = cursor
                sub.event.set()

    def publish_threadsafe(self, space: str, cursor: int) -> None:
        """Announce a cursor from any thread (the PostgreSQL listener)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.publish, space, cursor)

    def close(self) -> None:
        """End every stream (from any thread)."""
        self.closed = True
        loop = self._loop

        def wake() -> None:
            for subs in list(self._subs.values()):
                for sub in subs:
                    sub.event.set()

        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake)

    @property
    def streams(self) -> int:
        """How many streams are open on this instance."""
        return sum(len(s) for s in self._subs.values())


def _event(cursor: int) -> str:
    return f"id: {cursor}\nevent: cursor\ndata: {json.dumps({'cursor': str(cursor)})}\n\n"


async def sse_events(
    hub: ChangeHub, sub: Subscription, heartbeat: float, still_valid: Callable[[], Awaitable[bool]]
) -> AsyncIterator[str]:
    """The body of one stream: the current cursor, then each new one, pings between."""
    try:
        yield "retry: 1000\n" + _event(sub.cursor)
        sent = sub.cursor
        while not hub.closed:
            moved = await sub.wait(heartbeat)
            if hub.closed:
                return
            if moved and sub.cursor > sent:
                sent = sub.cursor
                yield _event(sent)
            elif not moved:
                if not await still_valid():
                    yield "event: revoked\ndata: {}\n\n"
                    return
                yield ": ping\n\n"
    finally:
        hub.unsubscribe(sub)
