"""Which ``SyncStorage`` a ``--db`` value names: ``open_storage(db)``."""

from __future__ import annotations

from .sqlite import SQLiteSyncStorage
from .storage import SyncStorage

__all__ = ["SQLiteSyncStorage", "is_postgres_url", "open_storage"]


def is_postgres_url(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


def open_storage(db: str, *, pool_size: int = 10) -> SyncStorage:
    """``PostgresSyncStorage`` for a ``postgresql://`` URL, else ``SQLiteSyncStorage`` (a file
    or ``:memory:``). Either is migrated to the current schema before it is returned."""
    if is_postgres_url(db):
        from .postgres import PostgresSyncStorage

        return PostgresSyncStorage(db, pool_size=pool_size)
    return SQLiteSyncStorage(db)
