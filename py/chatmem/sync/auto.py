"""Auto-sync in ``mem.sync``: the loop that runs ``run()`` now, then every
``sync_interval``, on a poke (a local write, with live sync) and, in the
browser, on the ``online`` event. ``Synchronizer`` inherits it; nothing here is
durable (the config that turns it on is, in ``kv``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import SyncConfig
    from .status import SyncState, SyncStatus
    from .stream import StreamFollower

__all__ = ["AutoSync"]

log = logging.getLogger("chatmem.sync")


class AutoSync:
    """The auto-sync loop of ``Synchronizer`` (a mixin: it uses the synchronizer's state)."""

    _auto: asyncio.Task[None] | None
    _wake: asyncio.Event | None
    _on_online: Callable[[Callable[[], None]], Callable[[], None] | None] | None
    _stop_online: Callable[[], None] | None
    _config: SyncConfig | None
    _closed: bool
    _live: StreamFollower
    _last_error: str | None
    _state: SyncState
    rand: Callable[[], float]

    if TYPE_CHECKING:

        async def _load(self) -> None: ...

        async def _ready(self) -> Any: ...

        async def run(self) -> SyncStatus: ...

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def start(self) -> None:
        """Start auto-sync: ``run()`` now, then every ``sync_interval`` (and, in the
        browser, on the ``online`` event), if the (stored) config enables it. Call it
        after reopening to resume; ``configure()`` calls it. Needs a running event loop."""
        if self._auto is not None and not self._auto.done():
            self._poke()
            return
        self._wake = asyncio.Event()
        if self._on_online is not None and self._stop_online is None:
            self._stop_online = self._on_online(self._poke)
        self._auto = asyncio.get_running_loop().create_task(self._auto_loop())

    async def _auto_loop(self) -> None:
        assert self._wake is not None
        await self._load()  # after a reload: the stored config says whether to run
        while not self._closed:
            cfg = self._config
            if cfg is None or not cfg.enabled or not cfg.auto_sync:
                self._live.cancel()
                return
            self._wake.clear()
            if cfg.live:
                self._live.start(self._ready, self.rand)
            try:
                await self.run()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - keep the loop alive; the status says why
                log.warning("auto-sync run failed: %s", e)
                self._last_error = str(e)
                self._state = "error"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), cfg.sync_interval / 1000)

    async def stop(self) -> None:
        """Stop auto-sync (a request in flight is abandoned; its ops stay leased and are resent)."""
        await self._live.stop()
        task, self._auto = self._auto, None
        if self._stop_online is not None:
            self._stop_online()
            self._stop_online = None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                try:
                    await task
                except Exception as e:  # noqa: BLE001 - a stopped loop's failure is only logged
                    log.warning("auto-sync ended with an error: %s", e)

    @property
    def running(self) -> bool:
        """True while auto-sync is on."""
        return self._auto is not None and not self._auto.done()
