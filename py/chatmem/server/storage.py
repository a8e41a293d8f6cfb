"""Where the reference server keeps its data: the ``SyncStorage`` interface.
Implementations: ``SQLiteSyncStorage`` (one file, one process; ``sqlite.py``)
and ``PostgresSyncStorage`` (many processes and machines; ``postgres.py``);
``backends.open_storage(db)`` picks one by the ``--db`` value.

The storage is deliberately dumb: it keeps, per *space* (one per account),
the latest state of every record with the feed position (``seq``) of its
last change, and the set of applied ``op_id``s. The merge rules (LWW by HLC,
tombstones, immutability) live in ``service.py``, so another database only
has to implement these few methods. Methods are synchronous; the server
calls them from a worker thread. Accounts and tokens live beside the spaces
(``Account``, ``TokenRecord``; token secrets are stored only as hashes).

Durability: a ``transaction()`` block commits when it exits normally (one
push = one transaction) and rolls everything back when it raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "Account",
    "TokenRecord",
    "StoredRecord",
    "SpaceTransaction",
    "SyncStorage",
]


@dataclass
class StoredRecord:
    resource: str
    id: str
    #: the merged record; None for a tombstone
    data: dict[str, Any] | None
    deleted: bool
    #: the latest HLC that changed this record (the tombstone's for a deleted one)
    hlc: str
    #: the HLC of the create that started this record's current life
    birth_hlc: str
    #: per field, the HLC of the write that set it (session records)
    field_hlc: dict[str, str] = field(default_factory=dict)
    #: a message's session (for the cascade of a session delete)
    session_id: str | None = None
    #: position in the change feed (assigned by ``put``)
    seq: int = 0


class SpaceTransaction(Protocol):
    """One open transaction over one space."""

    def op_seen(self, op_id: str) -> bool: ...

    def seen_ops(self, op_ids: list[str]) -> set[str]:
        """Which of ``op_ids`` were applied in this space (one query for a whole push)."""
        ...

    def remember_op(self, op_id: str, device_id: str, now_ms: int) -> None: ...

    def prefetch(self, keys: list[tuple[str, str]]) -> None:
        """A hint: ``get`` will be asked for these (resource, id) keys; read them at once."""
        ...

    def get(self, resource: str, record_id: str) -> StoredRecord | None: ...

    def put(self, record: StoredRecord) -> int:
        """Insert or replace the record under a new, higher ``seq``; return that seq.

        Seqs of one space must become visible in order: a reader must never see
        seq N+1 committed while N is still uncommitted (else a pull could skip
        N). The SQLite implementation serializes a space's transactions; a
        concurrent database must do the same (e.g. lock the space's row).
        """
        ...

    def live_messages(self, session_id: str) -> list[StoredRecord]:
        """Messages of a session that are not tombstones."""
        ...

    def cursor(self) -> int:
        """The highest ``seq`` handed out in this space (0 if none)."""
        ...

    def stored_bytes(self) -> int:
        """The bytes of record data this space holds, as of this transaction."""
        ...

    def meta_get(self, name: str) -> Any:
        """A space setting (JSON value) or None, e.g. the end-to-end key parameters."""
        ...

    def meta_put(self, name: str, value: Any) -> None:
        """Set (or, with None, remove) a space setting."""
        ...

    def count_ops(self, minute: int, n: int) -> int:
        """Count ``n`` operations against ``minute`` (minutes since the epoch); return the count before."""
        ...


class SyncStorage(Protocol):
    def transaction(self, space: str) -> Any:
        """A context manager yielding a ``SpaceTransaction``: commit on exit, rollback on error."""
        ...

    def changes(self, space: str, since: int, limit: int) -> list[StoredRecord]:
        """Records whose ``seq`` > ``since``, by ``seq``, at most ``limit``."""
        ...

    def cursor(self, space: str) -> int: ...

    def purge(self) -> None:
        """Make replaced and deleted data unrecoverable from the database files
        (called after a space's records were re-encrypted)."""
        ...

    def ping(self) -> None:
        """Raise if the database cannot answer (``/v1/health``)."""
        ...

    def account(self, name: str) -> Account | None: ...

    def accounts(self) -> list[Account]: ...

    def add_account(self, account: Account) -> None: ...

    def set_account_quota(self, name: str, ops_per_minute: int | None, max_bytes: int | None) -> bool: ...

    def add_token(self, token: TokenRecord) -> None: ...

    def token(self, token_id: str) -> tuple[TokenRecord, Account] | None: ...

    def tokens(self, account_id: str) -> list[TokenRecord]: ...

    def revoke_token(self, token_id: str, now_ms: int) -> bool: ...

    def close(self) -> None: ...


@dataclass
class Account:
    """An account owns one data space; quotas of None mean "the server's default"."""

    id: str
    name: str
    space: str
    created_at: int
    ops_per_minute: int | None = None
    max_bytes: int | None = None


@dataclass
class TokenRecord:
    """A bearer token as stored: ``hash`` is the SHA-256 of the whole token, never the token."""

    id: str
    account: str
    label: str
    hash: str
    created_at: int
    revoked_at: int | None = None
