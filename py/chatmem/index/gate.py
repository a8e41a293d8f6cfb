"""``AnswerGate``: the searches an index is answering, counted, so that its
background reads (the whole vocabulary, the doc table) start only once none is:
a first answer never waits for them, however long it takes. Nothing here is durable."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

__all__ = ["AnswerGate"]


class AnswerGate:
    """``answering()`` marks a search under way (``search.search`` enters it);
    ``idle()`` returns once none is."""

    def __init__(self) -> None:
        self._under_way = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @contextlib.asynccontextmanager
    async def answering(self) -> AsyncIterator[None]:
        self._under_way += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._under_way -= 1
            if not self._under_way:
                self._idle.set()

    async def idle(self) -> None:
        await self._idle.wait()
