"""``messages`` filled in the background after a derivation that left the texts out.

A large derivation in the page (``sql_engine.EngineDerivation.texts_later``) loads only
``docs``, ``postings`` and ``terms``: a keyword search reads nothing else (a semantic one
embeds from ``messages`` and waits), and moving every text into the engine was about half
of the derivation. ``MessagesFill`` then
appends the stored messages, texts and all, a step at a time, each step under the index's
lock and once no search is under way, so a search waits for one step at most.

What reads ``messages`` waits until it is complete (``QueryIndex`` holds the gate). The
writes applied between steps change ``messages`` themselves and are noted here
(``wrote_sessions``, ``wrote_messages``): the fill leaves those records out, so a record
it read before the write neither undoes nor doubles it.

Nothing here is durable: the cache file of an index whose fill did not end is not
marked complete, and the next opening derives it again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from enum import Enum

from ..scheduling.settle import settle
from .sql_engine import TextFill

__all__ = ["FILL_DELAY", "FILL_STEP", "FillState", "MessagesFill"]

#: about this many messages a step: a query asked during the fill waits for one step at most
FILL_STEP = 40_000
#: seconds before the first step: the search that waited for the derivation goes first
FILL_DELAY = 0.25


class FillState(Enum):
    FILLING = "filling"
    #: every stored message is in ``messages``
    DONE = "done"
    #: a step failed (``error``): ``messages`` lacks what was not filled
    FAILED = "failed"
    #: stopped before the end (the index closed, or is derived again)
    STOPPED = "stopped"


class MessagesFill:
    """The background fill of ``messages`` by ``fill`` (made with ``FILL_STEP``), each step
    holding ``lock``, taken once ``idle`` returns."""

    def __init__(self, fill: TextFill, lock: asyncio.Lock, idle: Callable[[], Awaitable[None]] | None = None):
        self._fill = fill
        self._lock = lock
        #: returns once no search is under way (``gate.AnswerGate.idle``)
        self._idle = idle
        self.state = FillState.FILLING
        #: messages appended so far
        self.filled = 0
        self.error: Exception | None = None
        #: milliseconds from the start to the end (so far, while filling)
        self.ms = 0.0
        self._skip_sessions: set[str] = set()
        self._skip_ids: set[str] = set()
        self._task = asyncio.ensure_future(self._run())

    @property
    def filling(self) -> bool:
        return self.state is FillState.FILLING

    def wrote_sessions(self, session_ids: Iterable[str]) -> None:
        """These sessions' messages were dropped from ``messages`` (and maybe loaded again)
        by a write: the fill leaves them out."""
        self._skip_sessions.update(session_ids)

    def wrote_messages(self, ids: Iterable[str]) -> None:
        """These messages were put into ``messages`` by a write: the fill leaves them out."""
        self._skip_ids.update(ids)

    async def _run(self) -> None:
        start = time.perf_counter()
        try:
            await asyncio.sleep(FILL_DELAY)
            while True:
                if self._idle is not None:
                    await self._idle()
                async with self._lock:  # asyncio's lock goes to the queries waiting for it first
                    n, done = await self._fill.step(sorted(self._skip_sessions), sorted(self._skip_ids))
                self.filled += n
                self.ms = (time.perf_counter() - start) * 1000
                if done:
                    self.state = FillState.DONE
                    return
        except asyncio.CancelledError:
            self.state = FillState.STOPPED
            raise
        except Exception as e:  # noqa: BLE001 - kept for whoever waits for the texts
            self.error = e
            self.state = FillState.FAILED

    async def ended(self) -> FillState:
        """Wait until the fill ends (never raises): how it ended."""
        await asyncio.wait({self._task})
        return self.state

    async def cancel(self) -> None:
        """Stop it. The caller holds the lock, so no step is under way: the fill waits for
        the lock, or has ended."""
        self._task.cancel()
        await settle(self._task)
        if self.state is FillState.FILLING:
            self.state = FillState.STOPPED
