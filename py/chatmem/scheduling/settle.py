"""Waiting for work that outlives its caller's cancellation.

A query running in a worker thread, a Web Worker or another tab does not stop when the
task awaiting it is cancelled. The engines cancel it at its source and then wait here
until it has really stopped, so the engine is free when the cancellation propagates.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

__all__ = ["settle"]


async def settle(
    fut: asyncio.Future[Any], *, poke: Callable[[], None] | None = None, interval: float | None = None
) -> None:
    """Wait until ``fut`` is done, ignoring further cancellation of the waiting task, and
    retrieve its outcome (an error is the expected end of a cancelled call, not a bug).

    ``poke`` is called before each wait of at most ``interval`` seconds (an interruption
    that may arrive before the call started must be repeated)."""
    while not fut.done():
        if poke is not None:
            poke()
        try:
            await asyncio.wait({fut}, timeout=interval)
        except asyncio.CancelledError:
            continue
    if not fut.cancelled():
        fut.exception()
