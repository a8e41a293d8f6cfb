"""A small LRU cache bounded by count, with a time-to-live (the original's
``CacheConfig``: 100 items, one hour). Values are returned as stored: callers
that hand them out copy them first."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

from .ids import Clock, system_clock

__all__ = ["LRUCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
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
