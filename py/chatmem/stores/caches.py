"""Small caches bounded by count, with a time-to-live (the original's
``CacheConfig``: 100 items, one hour, ``strategy`` ``"lru"`` or ``"lfu"``).

``LRUCache`` evicts the least recently used entry; ``LFUCache`` the least
frequently used one (ties: the least recently used of those). Both are
process memory only: nothing here is durable. Values are returned as stored:
callers that hand them out copy them first."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Generic, Hashable, TypeVar

from ..errors import ValidationError
from ..records.ids import Clock, system_clock

__all__ = ["LRUCache", "LFUCache", "CACHE_STRATEGIES", "make_cache"]

#: the eviction strategies ``open(cache_strategy=...)`` accepts
CACHE_STRATEGIES = ("lru", "lfu")

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """At most ``max_size`` entries, each kept ``ttl`` ms; the least recently used go first."""

    def __init__(self, max_size: int = 100, ttl: int = 3_600_000, clock: Clock = system_clock):
        self.max_size = max_size
        self.ttl = ttl
        self._clock = clock
        self._data: OrderedDict[K, tuple[int, V]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: K) -> V | None:
        item = self._data.get(key)
        if item is None or self._clock() >= item[0]:
            if item is not None:
                del self._data[key]
            self.misses += 1
            return None
        self._data.move_to_end(key)
        self.hits += 1
        return item[1]

    def set(self, key: K, value: V) -> None:
        if self.max_size <= 0:
            return
        self._data[key] = (self._clock() + self.ttl, value)
        self._data.move_to_end(key)
        while len(self._data) > self.max_size:
            self._data.popitem(last=False)

    def discard(self, key: K) -> None:
        self._data.pop(key, None)

    def discard_where(self, pred: Callable[[K], bool]) -> None:
        for k in [k for k in self._data if pred(k)]:
            del self._data[k]

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


class LFUCache(LRUCache[K, V]):
    """Evicts the entry read the fewest times (the oldest-used among equals)."""

    def __init__(self, max_size: int = 100, ttl: int = 3_600_000, clock: Clock = system_clock):
        super().__init__(max_size, ttl, clock)
        self._uses: dict[K, int] = {}

    def get(self, key: K) -> V | None:
        value = super().get(key)
        if value is not None:
            self._uses[key] = self._uses.get(key, 0) + 1
        else:
            self._uses.pop(key, None)
        return value

    def set(self, key: K, value: V) -> None:
        if self.max_size <= 0:
            return
        if key not in self._data:
            while len(self._data) >= self.max_size:
                # OrderedDict order is recency: min() keeps the first (least recent) of equals
                victim = min(self._data, key=lambda k: self._uses.get(k, 0))
                del self._data[victim]
                self._uses.pop(victim, None)
        self._uses.setdefault(key, 0)
        super().set(key, value)

    def discard(self, key: K) -> None:
        super().discard(key)
        self._uses.pop(key, None)

    def discard_where(self, pred: Callable[[K], bool]) -> None:
        super().discard_where(pred)
        self._uses = {k: n for k, n in self._uses.items() if k in self._data}

    def clear(self) -> None:
        super().clear()
        self._uses.clear()


def make_cache(strategy: str, max_size: int, ttl: int, clock: Clock) -> LRUCache[Any, Any]:
    """An ``LRUCache`` or ``LFUCache``; ``ValidationError`` for another strategy."""
    if strategy == "lru":
        return LRUCache(max_size, ttl, clock)
    if strategy == "lfu":
        return LFUCache(max_size, ttl, clock)
    raise ValidationError(f"cache_strategy must be one of {CACHE_STRATEGIES}", field="cache_strategy")
