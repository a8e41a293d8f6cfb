"""The server's settings, from flags or from the environment (``CHATMEM_SYNC_*``).

Every flag of ``python -m chatmem.server`` has an environment variable: the
flag's name upper-cased with ``-`` as ``_`` after ``CHATMEM_SYNC_``
(``--db`` is ``CHATMEM_SYNC_DB``, ``--max-body`` ``CHATMEM_SYNC_MAX_BODY``);
repeatable flags take a comma-separated list (``CHATMEM_SYNC_API_KEYS``,
``CHATMEM_SYNC_CORS_ORIGINS``). ``create_app()`` without arguments reads them,
so ``uvicorn --factory chatmem.server:create_app`` runs with the same settings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import ValidationError, shown
from .quotas import DEFAULT_MAX_BYTES, DEFAULT_OPS_PER_MINUTE, Quotas

__all__ = ["ServerSettings", "DEFAULT_MAX_BODY"]

DEFAULT_MAX_BODY = 16 * 1024 * 1024


def _list(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError(f"{name} must be an integer, not {shown(raw)}", field=name) from None
    if value < 0:
        raise ValidationError(f"{name} must be >= 0", field=name)
    return value


@dataclass
class ServerSettings:
    #: SQLite file, ":memory:", or a postgresql:// URL
    db: str = "sync.db"
    api_keys: list[str] = field(default_factory=list, repr=False)
    cors_origins: list[str] = field(default_factory=lambda: ["*"])
    #: largest request body in bytes (413 beyond)
    max_body: int = DEFAULT_MAX_BODY
    #: default per-account quotas (0: unlimited)
    ops_per_minute: int = DEFAULT_OPS_PER_MINUTE
    max_bytes: int = DEFAULT_MAX_BYTES
    #: PostgreSQL connections per instance
    pool_size: int = 10
    #: seconds between keep-alive pings on /v1/stream (and token re-checks)
    heartbeat: float = 15.0
    faults: str = ""
    log_level: str = "info"

    @property
    def quotas(self) -> Quotas:
        return Quotas(self.ops_per_minute, self.max_bytes)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServerSettings:
        e = os.environ if env is None else env
        d = cls()
        return cls(
            db=e.get("CHATMEM_SYNC_DB", "").strip() or d.db,
            api_keys=_list(e.get("CHATMEM_SYNC_API_KEYS")),
            cors_origins=_list(e.get("CHATMEM_SYNC_CORS_ORIGINS")) or d.cors_origins,
            max_body=_int(e, "CHATMEM_SYNC_MAX_BODY", d.max_body),
            ops_per_minute=_int(e, "CHATMEM_SYNC_OPS_PER_MINUTE", d.ops_per_minute),
            max_bytes=_int(e, "CHATMEM_SYNC_MAX_BYTES", d.max_bytes),
            pool_size=max(1, _int(e, "CHATMEM_SYNC_POOL_SIZE", d.pool_size)),
            heartbeat=float(_int(e, "CHATMEM_SYNC_HEARTBEAT", int(d.heartbeat))) or d.heartbeat,
            faults=e.get("CHATMEM_SYNC_FAULTS", ""),
            log_level=e.get("CHATMEM_SYNC_LOG_LEVEL", "") or d.log_level,
        )
