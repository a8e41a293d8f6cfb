"""Cloud sync, the pure parts: hybrid logical clocks, operations, config,
backoff, status and the protocol client. ``Synchronizer`` (``mem.sync``) is the
drain loop and the puller built on them; ``apply`` holds the merge rules a
store runs when it applies pulled changes. ``encryption`` is the end-to-end
ciphertext format (``Passphrase``, ``EncryptionKey``), ``cipher`` its AES-GCM /
PBKDF2 per runtime, ``keyring`` the device's key for its space.
"""

from __future__ import annotations

from ..records.hlc import HybridLogicalClock, compare_hlc, format_hlc, is_hlc, parse_hlc
from .backoff import BackoffPolicy, backoff_delay, parse_retry_after, retry_delay
from .config import SyncConfig, normalize_endpoint
from .encryption import EncryptionKey, Passphrase
from .ops import SyncOp, make_op, op_session_id, validate_op
from .protocol import (
    Change,
    ChangesPage,
    OpResult,
    PushResponse,
    SyncClient,
    error_for_status,
    error_for_transport,
)
from .status import SYNC_STATES, SyncState, SyncStatus
from .synchronizer import PullReport, PushReport, Synchronizer

__all__ = [
    "Passphrase",
    "EncryptionKey",
    "Synchronizer",
    "PushReport",
    "PullReport",
    "BackoffPolicy",
    "backoff_delay",
    "parse_retry_after",
    "retry_delay",
    "SyncConfig",
    "normalize_endpoint",
    "HybridLogicalClock",
    "compare_hlc",
    "format_hlc",
    "is_hlc",
    "parse_hlc",
    "SyncOp",
    "make_op",
    "op_session_id",
    "validate_op",
    "Change",
    "ChangesPage",
    "OpResult",
    "PushResponse",
    "SyncClient",
    "error_for_status",
    "error_for_transport",
    "SYNC_STATES",
    "SyncState",
    "SyncStatus",
]
