"""Hybrid logical clocks: timestamps that order every change of every device.

An HLC is a string ``"{wall_ms:013d}-{counter:04d}-{device_id}"``, e.g.
``"1767225600000-0000-dev-A"``. Wall time and counter have fixed widths, so the
**plain string order is the HLC order**: a server or a store can compare
(and index) them without parsing. The device id breaks ties between devices,
so two different devices never produce equal HLCs.

A clock never goes backwards: ``now()`` is strictly greater than every HLC it
produced or received through ``update()`` before. When the counter would pass
9999 within one millisecond, the clock borrows the next millisecond.

**Skew bound.** ``update()`` refuses (``ClockSkew``) an HLC whose wall time
is more than ``max_skew_ms`` (default 5 minutes) ahead of this clock's own
physical time, and changes nothing then: one device with a wild clock (or a
forged HLC such as ``9999999999999-9999-x``) can never drag every other
device's clock into the far future. Every method computes its new state and
checks it before it stores it, so a failed call leaves the clock as it was.

Nothing here is durable: the owner persists ``last`` (e.g. in the ``kv``
store) if it wants monotonicity across reloads, and passes it back as
``last=`` when it builds the clock again.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..errors import ClockSkew, ValidationError, shown
from .ids import Clock, system_clock

__all__ = [
    "HLC_PATTERN",
    "DEFAULT_MAX_SKEW_MS",
    "check_skew",
    "MAX_DEVICE_ID_LENGTH",
    "HLCParts",
    "HybridLogicalClock",
    "format_hlc",
    "parse_hlc",
    "is_hlc",
    "compare_hlc",
    "validate_device_id",
]

#: the whole grammar of an HLC string
HLC_PATTERN = re.compile(r"^(\d{13})-(\d{4})-([!-~]{1,128})$")
MAX_DEVICE_ID_LENGTH = 128
_MAX_COUNTER = 9999
_MAX_WALL = 10**13 - 1
_DEVICE_RE = re.compile(r"^[!-~]{1,128}$")
#: how far (ms) a received HLC may be ahead of the local clock (``Limits.max_clock_skew_ms``)
DEFAULT_MAX_SKEW_MS = 5 * 60 * 1000


class HLCParts(NamedTuple):
    wall_ms: int
    counter: int
    device_id: str


def validate_device_id(device_id: object) -> str:
    """Return ``device_id`` if it is 1-128 printable ASCII characters without spaces."""
    if not isinstance(device_id, str) or not _DEVICE_RE.match(device_id):
        raise ValidationError(
            "device_id must be 1-128 printable ASCII characters without spaces",
            field="device_id",
        )
    return device_id


def format_hlc(wall_ms: int, counter: int, device_id: str) -> str:
    if not 0 <= wall_ms <= _MAX_WALL:
        raise ValidationError(f"HLC wall time out of range: {wall_ms}", field="hlc")
    if not 0 <= counter <= _MAX_COUNTER:
        raise ValidationError(f"HLC counter out of range: {counter}", field="hlc")
    return f"{wall_ms:013d}-{counter:04d}-{validate_device_id(device_id)}"


def parse_hlc(value: object) -> HLCParts:
    """Split an HLC string; ``ValidationError`` (field ``hlc``) if it is not one."""
    m = HLC_PATTERN.match(value) if isinstance(value, str) else None
    if m is None:
        raise ValidationError(
            f"not an HLC (want '<13-digit ms>-<4-digit counter>-<device id>'): {shown(value)}",
            field="hlc",
        )
    return HLCParts(int(m.group(1)), int(m.group(2)), m.group(3))


def is_hlc(value: object) -> bool:
    return isinstance(value, str) and HLC_PATTERN.match(value) is not None


def check_skew(hlc: object, now_ms: int, max_skew_ms: int = DEFAULT_MAX_SKEW_MS) -> HLCParts:
    """Parse ``hlc``; ``ClockSkew`` if its wall time is more than ``max_skew_ms`` after ``now_ms``."""
    parts = parse_hlc(hlc)
    ahead = parts.wall_ms - now_ms
    if ahead > max_skew_ms:
        raise ClockSkew(
            f"HLC {hlc!s:.60} is {ahead} ms ahead of this clock (at most {max_skew_ms} ms allowed)",
            ahead_ms=ahead,
            bound_ms=max_skew_ms,
        )
    return parts


def compare_hlc(a: str, b: str) -> int:
    """-1, 0 or 1 as ``a`` is before, equal to or after ``b`` (both must be valid HLCs)."""
    parse_hlc(a)
    parse_hlc(b)
    return (a > b) - (a < b)


class HybridLogicalClock:
    """A monotonic HLC for one device, over an injected millisecond ``clock``."""

    def __init__(
        self,
        device_id: str,
        clock: Clock = system_clock,
        *,
        last: str | None = None,
        max_skew_ms: int = DEFAULT_MAX_SKEW_MS,
    ):
        self.device_id = validate_device_id(device_id)
        self._clock = clock
        self.max_skew_ms = max_skew_ms
        self._wall = 0
        self._counter = -1
        if last is not None:
            self._observe(check_skew(last, int(clock()), max_skew_ms))

    @property
    def last(self) -> str | None:
        """The latest HLC produced or observed (persist it to stay monotonic across restarts)."""
        if self._counter < 0:
            return None
        return format_hlc(self._wall, self._counter, self.device_id)

    def _tick(self, wall: int, counter: int) -> str:
        if counter > _MAX_COUNTER:
            wall, counter = wall + 1, 0
        out = format_hlc(wall, counter, self.device_id)  # raises before anything changes
        self._wall, self._counter = wall, counter
        return out

    def _observe(self, remote: HLCParts) -> None:
        self._wall, self._counter = max((self._wall, self._counter), (remote.wall_ms, remote.counter))

    def now(self) -> str:
        """A new HLC, strictly after every HLC this clock produced or received."""
        physical = int(self._clock())
        if physical > self._wall:
            return self._tick(physical, 0)
        return self._tick(self._wall, self._counter + 1)

    def update(self, remote_hlc: str) -> str:
        """Merge an HLC received from elsewhere; return a new local HLC after both.

        ``ValidationError`` if ``remote_hlc`` is not an HLC, ``ClockSkew`` if it is
        more than ``max_skew_ms`` ahead of the physical clock; nothing changes then.
        """
        physical = int(self._clock())
        remote = check_skew(remote_hlc, physical, self.max_skew_ms)
        wall = max(physical, self._wall, remote.wall_ms)
        if wall == self._wall and wall == remote.wall_ms:
            counter = max(self._counter, remote.counter) + 1
        elif wall == self._wall:
            counter = self._counter + 1
        elif wall == remote.wall_ms:
            counter = remote.counter + 1
        else:
            counter = 0
        return self._tick(wall, counter)

    @staticmethod
    def compare(a: str, b: str) -> int:
        return compare_hlc(a, b)

    def __repr__(self) -> str:
        return f"HybridLogicalClock(device_id={self.device_id!r}, last={self.last!r})"
