"""Per-account quotas, enforced inside the push transaction (so they hold across
instances: the counters live in the database, under the space's lock).

- ``ops_per_minute`` (default 6,000): operations pushed per calendar minute. A
  push that arrives when the minute's budget is spent answers 429 with
  ``Retry-After`` (seconds to the next minute) and changes nothing; the one
  push that crosses the limit is still served whole, so a batch is never split.
- ``max_bytes`` (default 1 GiB): bytes of record data the space holds. A push
  that would leave the space above it (and larger than before) answers 413
  and changes nothing; deletes always pass.

0 means unlimited. Server-wide defaults come from ``--ops-per-minute`` /
``--max-bytes``; ``accounts add``/``accounts quota`` override them per account.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..errors import RateLimited, StorageFull

if TYPE_CHECKING:
    from .storage import Account, SpaceTransaction

__all__ = ["Quotas", "DEFAULT_OPS_PER_MINUTE", "DEFAULT_MAX_BYTES"]

DEFAULT_OPS_PER_MINUTE = 6_000
DEFAULT_MAX_BYTES = 1 << 30


@dataclass(frozen=True)
class Quotas:
    ops_per_minute: int = DEFAULT_OPS_PER_MINUTE
    max_bytes: int = DEFAULT_MAX_BYTES

    def for_account(self, acct: Account) -> Quotas:
        """These defaults with the account's own overrides."""
        return replace(
            self,
            ops_per_minute=self.ops_per_minute if acct.ops_per_minute is None else acct.ops_per_minute,
            max_bytes=self.max_bytes if acct.max_bytes is None else acct.max_bytes,
        )

    def admit(self, txn: SpaceTransaction, n_ops: int, now_ms: int) -> int:
        """Count ``n_ops`` against this minute; ``RateLimited`` if the budget was spent.
        Returns the space's stored bytes before the push (for ``check_bytes``)."""
        if self.ops_per_minute and n_ops:
            minute = now_ms // 60_000
            if txn.count_ops(minute, n_ops) >= self.ops_per_minute:
                wait = max(1, 60 - (now_ms % 60_000) // 1000)
                raise RateLimited(f"at most {self.ops_per_minute} operations per minute", wait)
        return txn.stored_bytes()

    def check_bytes(self, txn: SpaceTransaction, before: int) -> None:
        """``StorageFull`` if the push grew the space beyond ``max_bytes``."""
        after = txn.stored_bytes()
        if self.max_bytes and after > self.max_bytes and after > before:
            raise StorageFull(f"the account's storage quota of {self.max_bytes} bytes is full")
