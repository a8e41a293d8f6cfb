"""The reference sync server (CPython only; needs the ``server`` extra:
Starlette and uvicorn). Nothing else in chatmem imports this package.

``python -m chatmem.server --port 8787 --db sync.db --api-key KEY`` serves
the protocol written down in the README ("Cloud sync"); tests use ``running_server``.
"""

from __future__ import annotations

from .app import create_app, space_for_key
from .faults import Fault, FaultPlan
from .runner import SyncServer, running_server
from .service import SyncService
from .storage import SpaceTransaction, SQLiteSyncStorage, StoredRecord, SyncStorage

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
]
