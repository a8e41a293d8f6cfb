"""Clock and ids.

A ``Clock`` is any zero-argument callable returning integer milliseconds since
the epoch; tests inject a fake one. Ids are 26-character ULIDs (Crockford
base32: 48-bit time, 80 random bits), so they are unique, and sort by
creation time; within one millisecond a generator stays monotonic.
``derived_id`` makes the same ULID every time from a time and a key (an
imported record's source and its id there), so importing a file again finds
what the first import wrote.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Callable

__all__ = ["Clock", "system_clock", "IdGenerator", "new_id", "derived_id"]

Clock = Callable[[], int]

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def system_clock() -> int:
    """Wall-clock time in integer milliseconds."""
    return time.time_ns() // 1_000_000


#: every two-character run of the alphabet, indexed by its 10-bit value
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]


def _encode(value: int, length: int) -> str:
    """``value`` as ``length`` base32 characters, most significant first."""
    if length % 2:
        return _ALPHABET[(value >> (5 * (length - 1))) & 31] + _encode(value, length - 1)
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in range(5 * (length - 2), -1, -10)])


class IdGenerator:
    """Monotonic ULID generator over an injected clock."""

    def __init__(self, clock: Clock = system_clock):
        self._clock = clock
        self._last_ms = -1
        self._last_rand = 0

    def __call__(self) -> str:
        ms = max(self._clock(), self._last_ms)
        if ms == self._last_ms:
            self._last_rand = (self._last_rand + 1) & ((1 << 80) - 1)
        else:
            self._last_ms = ms
            self._last_rand = int.from_bytes(os.urandom(10), "big") >> 1  # room to count up
        return _encode((ms << 80) | self._last_rand, 26)


_default = IdGenerator()


def new_id() -> str:
    """A new ULID from the system clock."""
    return _default()


def derived_id(ms: int, key: str) -> str:
    """The ULID of time ``ms`` whose 80 random bits are a hash of ``key``: the same
    arguments always give the same id, different keys practically never collide."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    ms = min(max(ms, 0), (1 << 48) - 1)
    return _encode((ms << 80) | int.from_bytes(digest[:10], "big"), 26)
