"""Who drains the sync outbox: the ``DrainLock`` protocol each runtime gives (a Web
Lock in the page, where tabs share one store) and ``LocalDrainLock``, one drainer per
synchronizer."""

from __future__ import annotations

from typing import Protocol

__all__ = ["DrainLock", "LocalDrainLock"]


class DrainLock(Protocol):
    """Who may drain the sync outbox: ``acquire()`` never waits; False means someone else drains."""

    #: True if holding it proves no other drainer exists (leases of others can be ignored)
    exclusive: bool

    async def acquire(self) -> bool: ...

    async def release(self) -> None: ...


class LocalDrainLock:
    """One drainer per engine (CPython); engines sharing a file respect each other's leases."""

    exclusive = False

    def __init__(self) -> None:
        self._held = False

    async def acquire(self) -> bool:
        if self._held:
            return False
        self._held = True
        return True

    async def release(self) -> None:
        self._held = False
