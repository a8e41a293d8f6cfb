"""What the API objects of one ``Memory`` share: the store, the clock, the id
generator and the caches, with the one place that keeps the caches coherent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from ..records.ids import Clock, IdGenerator
from ..records.validation import DEFAULT_LIMITS, Limits
from .base import Store, clone
from .caches import LRUCache
from .outbox import Outbox

__all__ = ["Core"]

PageKey = tuple[str, int, int | None, bool]


@dataclass
class Core:
    store: Store
    clock: Clock
    ids: IdGenerator
    meta_cache: LRUCache[str, dict[str, Any]]
    page_cache: LRUCache[PageKey, list[dict[str, Any]]]
    outbox: Outbox
    #: called with (kind, session_id, payload) after every acknowledged write
    listeners: list[Callable[[str, str, Any], None]] = field(default_factory=list)
    #: bounds on what the API, import and sync accept
    limits: Limits = DEFAULT_LIMITS
    #: called (no arguments) when another process changed the store behind the caches
    external_listeners: list[Callable[[], None]] = field(default_factory=list)
    #: awaited with the ids of messages the user deleted (not pruned), once they are gone:
    #: what was learnt only from them is forgotten (``chatmem.facts``)
    forgetters: list[Callable[[list[str]], Awaitable[None]]] = field(default_factory=list)

    async def forget(self, message_ids: list[str]) -> None:
        """Tell the forgetters that these messages are gone for good."""
        if message_ids:
            for fn in list(self.forgetters):
                await fn(message_ids)

    async def check_external(self) -> None:
        """Before trusting a cache: if another process (or connection) wrote to the store
        since the last look (the store's ``changed_elsewhere``), forget every cached view."""
        if await self.store.changed_elsewhere():
            self.invalidate()
            for fn in list(self.external_listeners):
                fn()

    def now(self) -> int:
        return self.clock()

    # ------------------------------------------------------------------ cache
    def cached_meta(self, session_id: str) -> dict[str, Any] | None:
        rec = self.meta_cache.get(session_id)
        return clone(rec) if rec is not None else None

    def remember_meta(self, rec: dict[str, Any]) -> None:
        self.meta_cache.set(rec["sessionId"], clone(rec))

    def cached_page(self, key: PageKey) -> list[dict[str, Any]] | None:
        page = self.page_cache.get(key)
        return clone(page) if page is not None else None

    def remember_page(self, key: PageKey, page: list[dict[str, Any]]) -> None:
        self.page_cache.set(key, clone(page))

    def invalidate(self, session_id: str | None = None) -> None:
        """Forget what is cached about one session (or everything)."""
        if session_id is None:
            self.meta_cache.clear()
            self.page_cache.clear()
            return
        self.meta_cache.discard(session_id)
        self.page_cache.discard_where(lambda k: k[0] == session_id)

    def changed(self, kind: str, session_id: str, payload: Any = None) -> None:
        """Report an acknowledged write: drop stale pages, tell listeners."""
        self.page_cache.discard_where(lambda k: k[0] == session_id)
        if kind == "session-deleted":
            self.meta_cache.discard(session_id)
        for fn in list(self.listeners):
            fn(kind, session_id, payload)
