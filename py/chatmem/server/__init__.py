"""The reference sync server (CPython only; needs the ``server`` extra:
Starlette and uvicorn; the ``postgres`` extra adds psycopg for PostgreSQL).
Nothing else in chatmem imports this package.

``python -m chatmem.server --port 8787 --db sync.db --api-key KEY`` serves
the protocol written down in docs/reference/protocol.md; ``--db postgresql://...``
lets several instances share one database (``uvicorn --factory
chatmem.server:create_app`` reads ``CHATMEM_SYNC_*``); tests use ``running_server``.
"""

from __future__ import annotations

from ..errors import RateLimited, StorageFull
from .accounts import Authenticator, Principal, add_account, issue_token, list_tokens, revoke_token
from .app import create_app, space_for_key
from .backends import SQLiteSyncStorage, open_storage
from .faults import Fault, FaultPlan
from .quotas import Quotas
from .runner import SyncServer, running_server
from .service import SyncService
from .settings import ServerSettings
from .storage import (
    Account,
    SpaceTransaction,
    StoredRecord,
    SyncStorage,
    TokenRecord,
)
from .stream import ChangeHub

__all__ = [
    "create_app",
    "space_for_key",
    "Fault",
    "FaultPlan",
    "SyncServer",
    "running_server",
    "SyncService",
    "SpaceTransaction",
    "SQLiteSyncStorage",
    "StoredRecord",
    "SyncStorage",
    "open_storage",
    "Account",
    "TokenRecord",
    "Authenticator",
    "Principal",
    "add_account",
    "issue_token",
    "list_tokens",
    "revoke_token",
    "Quotas",
    "RateLimited",
    "StorageFull",
    "ServerSettings",
    "ChangeHub",
]
