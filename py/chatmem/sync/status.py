"""``SyncStatus``: what ``mem.sync.status()`` answers, and what other tabs see.

A snapshot, not live state: the drain loop builds a new one after each step
(``dataclasses.replace``) and may store ``to_dict()`` in the ``kv`` store so
tabs that do not hold the drain lock can show it.

States:

- ``idle``: nothing in flight (there may be pending operations waiting for
  their next attempt or the next interval);
- ``syncing``: a push or pull is in flight;
- ``offline``: no network / server unreachable: waiting, nothing counted as a failure;
- ``paused-auth``: the server refused the key (401/403); nothing is sent until
  the config changes;
- ``locked``: the space is end-to-end encrypted and no passphrase was entered
  on this device (nothing is sent or applied);
- ``wrong-passphrase``: the passphrase does not match the space's key check
  value, or was changed on another device (nothing is sent or applied);
- ``error``: the last run failed (transient errors being retried, or an
  unexpected failure); ``last_error`` says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from ..errors import ValidationError, shown

__all__ = ["SyncState", "SYNC_STATES", "SyncStatus"]

SyncState = Literal["idle", "syncing", "offline", "paused-auth", "locked", "wrong-passphrase", "error"]
SYNC_STATES: frozenset[str] = frozenset(
    {"idle", "syncing", "offline", "paused-auth", "locked", "wrong-passphrase", "error"}
)


@dataclass(frozen=True)
class SyncStatus:
    """Where sync stands (``mem.sync.status()``): its state, what is pending, dead-lettered
    or quarantined, and the last success and error."""

    state: SyncState = "idle"
    #: operations in the outbox (in flight included), plus the history still to upload
    #: after sync was first turned on (an upper bound: one per session and message)
    pending: int = 0
    #: operations in the dead-letter store
    dead_letters: int = 0
    #: ms since the epoch of the last run that reached the server and succeeded
    last_success: int | None = None
    #: human-readable reason of the last failure (never contains the api key)
    last_error: str | None = None
    #: pulled records quarantined because this device cannot use them (``mem.sync.quarantined()``)
    quarantined: int = 0
    #: how many of them for each reason: ``"decryption"``, ``"invalid"``, ``"unknown-type"``,
    #: ``"clock-skew"``, ``"malformed"`` (reasons with none are left out)
    quarantine_reasons: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.state not in SYNC_STATES:
            raise ValidationError(
                f"state must be one of {sorted(SYNC_STATES)}, got {shown(self.state)}", field="state"
            )
        for name in ("pending", "dead_letters", "quarantined"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValidationError(f"{name} must be a non-negative int", field=name)

    def to_dict(self) -> dict[str, Any]:
        """camelCase, JSON-ready (for the UI and other tabs)."""
        return {
            "state": self.state,
            "pending": self.pending,
            "deadLetters": self.dead_letters,
            "lastSuccess": self.last_success,
            "lastError": self.last_error,
            "quarantined": self.quarantined,
            "quarantineReasons": dict(self.quarantine_reasons),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SyncStatus:
        return cls(
            state=cast(SyncState, d.get("state", "idle")),
            pending=int(d.get("pending", 0)),
            dead_letters=int(d.get("deadLetters", d.get("dead_letters", 0))),
            last_success=d.get("lastSuccess", d.get("last_success")),
            last_error=d.get("lastError", d.get("last_error")),
            quarantined=int(d.get("quarantined", 0)),
            quarantine_reasons=dict(d.get("quarantineReasons") or {}),
        )
