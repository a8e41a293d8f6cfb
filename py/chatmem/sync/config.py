"""``SyncConfig``: where and how to sync, as in the original design (plus limits).

Durations are integer milliseconds, like the original's ``syncInterval``.
The ``api_key`` is a secret: it is not in ``repr()``, not in
``to_public_dict()`` (what the UI and exports see), never in a URL. Only
``to_storage_dict()`` holds it, for the local settings store.

Validation (``validate()``, also run by ``from_dict``) raises
``ValidationError`` naming the field: the endpoint must be ``https://``,
except ``http://`` to ``localhost`` / ``127.0.0.1`` / ``[::1]``; it carries no
credentials, query or fragment.

``encryption`` (``Passphrase`` / ``EncryptionKey``, see ``chatmem.sync.encryption``)
turns on end-to-end encryption. Its secret is in no dict: the public and the
storage dicts say only ``{"kind", "remember"}``, and a config read back from
storage holds a *locked* passphrase (the device then uses the derived key it
remembered, if the person asked for that, or waits for the passphrase).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ValidationError, shown
from ..records.validation import INT64_MAX
from .encryption import EncryptionKey, Passphrase

__all__ = ["SyncConfig", "CONFIG_KEY", "LOCAL_HOSTS", "normalize_endpoint"]

#: where ``mem.sync`` keeps its config in the store's ``kv``
CONFIG_KEY = "sync.config"

LOCAL_HOSTS: frozenset[str] = frozenset({"localhost", "127.0.0.1", "::1"})

# camelCase (the original's names) -> field name
_ALIASES = {
    "apiKey": "api_key",
    "autoSync": "auto_sync",
    "syncInterval": "sync_interval",
    "maxRetries": "max_retries",
    "batchSize": "batch_size",
    "backoffBase": "backoff_base",
    "backoffMax": "backoff_max",
}
_CAMEL = {v: k for k, v in _ALIASES.items()}


def normalize_endpoint(endpoint: str) -> str:
    """Check an endpoint URL and return it without a trailing slash.

    ``ValidationError(field="endpoint")`` unless it is https, or http to a
    loopback host; user info, query and fragment are refused.
    """
    if not isinstance(endpoint, str) or not endpoint.strip():
        raise ValidationError("endpoint must be a non-empty URL", field="endpoint")
    import urllib.parse  # here, not at import: it loads ipaddress (costly at a page's start-up)

    try:
        parts = urllib.parse.urlsplit(endpoint.strip())
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as e:
        raise ValidationError(f"endpoint is not a valid URL: {e}", field="endpoint") from e
    if parts.scheme not in ("https", "http") or not host:
        raise ValidationError("endpoint must be an https:// URL", field="endpoint")
    if parts.scheme == "http" and host not in LOCAL_HOSTS:
        raise ValidationError(
            "endpoint must use https (http is allowed only for localhost / 127.0.0.1)",
            field="endpoint",
        )
    if parts.username is not None or parts.password is not None:
        raise ValidationError("endpoint must not contain credentials; set api_key instead", field="endpoint")
    if parts.query or parts.fragment:
        raise ValidationError("endpoint must not have a query or fragment", field="endpoint")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _int(value: Any, name: str, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValidationError(f"{name} must be an int >= {shown(minimum)}", field=name)
    if value > (INT64_MAX if maximum is None else maximum):
        raise ValidationError(
            f"{name} must be at most {shown(INT64_MAX if maximum is None else maximum)}", field=name
        )


@dataclass(frozen=True)
class SyncConfig:
    """How a memory syncs: the server, its key, automatic runs, live following, encryption."""

    enabled: bool = False
    endpoint: str = ""
    api_key: str = field(default="", repr=False)
    auto_sync: bool = False
    #: ms between automatic sync runs
    sync_interval: int = 60_000
    #: retries after the first failed attempt before an operation is dead-lettered
    max_retries: int = 3
    #: operations per push request
    batch_size: int = 100
    #: ms to wait for one HTTP request
    timeout: int = 30_000
    #: ms of the first backoff delay; doubles per retry up to ``backoff_max``
    backoff_base: int = 1_000
    backoff_max: int = 60_000
    #: with ``auto_sync``: follow the server's ``/v1/stream`` (if it has one) and pull as
    #: soon as another device pushed, instead of waiting for the next ``sync_interval``
    live: bool = True
    #: end-to-end encryption of pushed data: ``Passphrase("…")`` or ``EncryptionKey(bytes)``
    encryption: Passphrase | EncryptionKey | None = field(default=None, repr=False, hash=False)

    def validate(self) -> SyncConfig:
        """Return self if valid, else raise ``ValidationError`` naming the field."""
        for name in ("enabled", "auto_sync", "live"):
            if not isinstance(getattr(self, name), bool):
                raise ValidationError(f"{name} must be a bool", field=name)
        if not isinstance(self.api_key, str):
            raise ValidationError("api_key must be a string", field="api_key")
        if self.api_key and not all(0x21 <= ord(c) <= 0x7E for c in self.api_key):
            raise ValidationError("api_key must be printable ASCII without spaces", field="api_key")
        if not isinstance(self.endpoint, str):
            raise ValidationError("endpoint must be a string", field="endpoint")
        if self.endpoint:
            normalize_endpoint(self.endpoint)
        if self.enabled:
            if not self.endpoint:
                raise ValidationError("sync is enabled but endpoint is empty", field="endpoint")
            if not self.api_key:
                raise ValidationError("sync is enabled but api_key is empty", field="api_key")
        _int(self.sync_interval, "sync_interval", 1_000)
        _int(self.max_retries, "max_retries", 0, 100)
        _int(self.batch_size, "batch_size", 1, 1_000)
        _int(self.timeout, "timeout", 100)
        _int(self.backoff_base, "backoff_base", 0)
        _int(self.backoff_max, "backoff_max", self.backoff_base)
        if self.encryption is not None and not isinstance(self.encryption, (Passphrase, EncryptionKey)):
            raise ValidationError(
                "encryption must be chatmem.Passphrase(...) or chatmem.EncryptionKey(...)",
                field="encryption",
            )
        return self

    def __post_init__(self) -> None:
        if isinstance(self.endpoint, str) and self.endpoint:
            object.__setattr__(self, "endpoint", normalize_endpoint(self.endpoint))
        self.validate()

    @property
    def timeout_seconds(self) -> float:
        return self.timeout / 1000

    def url(self, path: str) -> str:
        """``endpoint`` joined with an API path such as ``/v1/push``."""
        return self.endpoint + "/" + path.lstrip("/")

    def replace(self, **changes: Any) -> SyncConfig:
        """A copy with ``changes`` (field names or the original's camelCase), validated."""
        return dataclasses.replace(self, **{_ALIASES.get(k, k): v for k, v in changes.items()})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SyncConfig:
        """Build from snake_case or the original's camelCase keys; unknown keys are refused."""
        if not isinstance(data, Mapping):
            raise ValidationError("sync config must be an object", field="config")
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key == "hasApiKey":
                continue  # present in public dicts; carries no value
            name = _ALIASES.get(key, key)
            if name not in names:
                raise ValidationError(
                    f"unknown sync config field {shown(key)}", field=key if isinstance(key, str) else "config"
                )
            kwargs[name] = _encryption(value) if name == "encryption" else value
        return cls(**kwargs)

    def to_public_dict(self) -> dict[str, Any]:
        """camelCase settings without the key (``hasApiKey`` says whether one is set)."""
        out = {
            _CAMEL.get(f.name, f.name): getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("api_key", "encryption")
        }
        out["hasApiKey"] = bool(self.api_key)
        enc = self.encryption
        out["encryption"] = (
            None if enc is None else {"kind": enc.kind, "remember": enc.remember, "locked": enc.is_locked}
        )
        return out

    def to_storage_dict(self) -> dict[str, Any]:
        """Everything, the key included: only for the local settings store, never for export."""
        out = self.to_public_dict()
        del out["hasApiKey"]
        if out["encryption"] is not None:
            del out["encryption"]["locked"]
        out["apiKey"] = self.api_key
        return out


def _encryption(value: Any) -> Passphrase | EncryptionKey | None:
    """``encryption`` from a dict: an instance, None, ``{"passphrase", "remember"}`` (a form),
    or ``{"kind", "remember"}`` (stored: no secret, so a locked passphrase)."""
    if value is None or isinstance(value, (Passphrase, EncryptionKey)):
        return value
    if not isinstance(value, Mapping):
        raise ValidationError("encryption must be an object or null", field="encryption")
    remember = value.get("remember", False)
    if not isinstance(remember, bool):
        raise ValidationError("encryption.remember must be a bool", field="encryption")
    if value.get("passphrase"):
        return Passphrase(value["passphrase"], remember=remember)
    if value.get("kind") in ("passphrase", "key"):
        return Passphrase.locked(remember=remember)
    raise ValidationError("encryption needs a passphrase", field="encryption")
