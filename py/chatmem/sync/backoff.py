"""When to try again: exponential backoff with jitter, and ``Retry-After``.

Pure functions over integer milliseconds; the random source and "now" are
injected so tests are exact. Nothing here sleeps.

- ``backoff_delay(retry)``: ``d = min(max_ms, base_ms * 2**retry)``, then
  "equal jitter": a uniform pick in ``[d/2, d]`` (never zero, never above
  ``max_ms``, spreads tabs and devices apart).
- ``parse_retry_after(value, now_ms)``: delta-seconds (``"120"``) or an
  HTTP-date (``"Wed, 21 Oct 2026 07:28:00 GMT"``); ``None`` if absent or
  unreadable; a date in the past is ``0``.
- ``retry_delay(retry, retry_after, now_ms)``: the server's ``Retry-After``
  when it gave one (capped at ``retry_after_cap_ms``), else the backoff.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ValidationError

__all__ = ["BackoffPolicy", "backoff_delay", "parse_retry_after", "retry_delay"]

Random = Callable[[], float]


def parse_retry_after(value: str | None, now_ms: int) -> int | None:
    """Milliseconds to wait according to a ``Retry-After`` header value."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if value.isascii() and value.isdigit():
        return int(value) * 1000 if len(value) <= 12 else None
    try:
        import email.utils  # only for an HTTP date; costly to import at start-up in the page

        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0, int(when.timestamp() * 1000) - now_ms)


@dataclass(frozen=True)
class BackoffPolicy:
    base_ms: int = 1_000
    max_ms: int = 60_000
    #: the longest ``Retry-After`` honoured as given (a server asking for more gets this)
    retry_after_cap_ms: int = 3_600_000

    def backoff(self, retry: int, rand: Random = random.random) -> int:
        """Delay before retry number ``retry`` (0 = the first retry), jittered."""
        if retry < 0:
            raise ValidationError("retry must be >= 0", field="retry")
        ceiling = min(self.max_ms, self.base_ms * (2 ** min(retry, 62)))
        half = ceiling / 2
        return int(half + rand() * half)

    def delay(
        self,
        retry: int,
        retry_after: str | int | None = None,
        now_ms: int = 0,
        rand: Random = random.random,
    ) -> int:
        """The server's ``Retry-After`` (header text, or ms as an int) if given, else ``backoff``."""
        wait = retry_after if isinstance(retry_after, int) else parse_retry_after(retry_after, now_ms)
        if wait is not None:
            return min(max(0, wait), self.retry_after_cap_ms)
        return self.backoff(retry, rand)


def backoff_delay(
    retry: int, *, base_ms: int = 1_000, max_ms: int = 60_000, rand: Random = random.random
) -> int:
    return BackoffPolicy(base_ms, max_ms).backoff(retry, rand)


def retry_delay(
    retry: int,
    retry_after: str | int | None,
    now_ms: int,
    *,
    base_ms: int = 1_000,
    max_ms: int = 60_000,
    rand: Random = random.random,
) -> int:
    return BackoffPolicy(base_ms, max_ms).delay(retry, retry_after, now_ms, rand)
