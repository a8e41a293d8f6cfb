"""Cooperative slicing: long Python work that yields to the event loop every few
milliseconds, so that a page's interface never waits more than one slice (in the page
Python runs on the main thread). On CPython the yields cost next to nothing."""

from __future__ import annotations

import asyncio
import time

__all__ = ["SLICE_S", "TimeSlicer"]

#: longest stretch of work between two yields to the event loop
SLICE_S = 0.010


class TimeSlicer:
    """Yields to the event loop once ``budget`` seconds of work ran since the last yield
    (``tick`` after each piece of work)."""

    def __init__(self, budget: float = SLICE_S):
        self.budget = budget
        self.start = time.perf_counter()

    def spent(self) -> float:
        return time.perf_counter() - self.start

    def restart(self) -> None:
        """The event loop ran just now (e.g. an awaited call came back)."""
        self.start = time.perf_counter()

    async def tick(self) -> None:
        if time.perf_counter() - self.start > self.budget:
            await asyncio.sleep(0)
            self.start = time.perf_counter()
