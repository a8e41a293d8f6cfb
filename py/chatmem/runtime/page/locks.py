"""Web Locks (who drains the outbox, who owns the index file) and online status."""

from __future__ import annotations

from typing import Any, Callable

from pyodide.ffi import create_proxy  # type: ignore[import-not-found]

from .bridge import bridge

__all__ = ["WebLock", "is_online", "on_online"]


class WebLock:
    """A Web Lock taken without waiting: ``acquire()`` is False while another tab holds it.

    Holding it proves no other tab of this origin drains the same outbox; the
    browser releases it when the tab goes away (reload, crash, close).
    """

    exclusive = True

    def __init__(self, name: str):
        self.name = name
        self._release: Any = None

    async def acquire(self) -> bool:
        if self._release is not None:
            return True
        release = await bridge().tryLock(self.name)
        if release is False or release is None:
            return False
        self._release = release
        return True

    async def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            await release()  # settles once the lock is free (a re-acquire right after succeeds)


def is_online() -> bool:
    """The browser's ``navigator.onLine``."""
    return bool(bridge().isOnline())


def on_online(fn: Callable[[], None]) -> Callable[[], None]:
    """Call ``fn()`` on the window's ``online`` event; returns a function that stops it."""
    proxy = create_proxy(fn)
    stop_js = bridge().onOnline(proxy)

    def stop() -> None:
        stop_js()
        proxy.destroy()

    return stop
