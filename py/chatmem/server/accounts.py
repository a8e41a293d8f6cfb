"""Accounts, bearer tokens and who a request is.

A token looks like ``cmt_<id>_<secret>``: the id is public (``tokens list``
shows it, ``tokens revoke`` takes it), the secret is 32 random bytes. The
database keeps only the SHA-256 of the whole token, so a leaked database
leaks no token. Every request looks its token up in the database (no
cache): a revoked token answers 401 at once, on every instance.

``--api-key KEY`` keeps working as a single-account shortcut: such a key is
checked in memory and maps to the space ``space_for_key(KEY)`` (a hash), as
before accounts existed, so its data stays where it was.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import NotFound, ValidationError, shown
from ..records.ids import Clock, system_clock
from .quotas import Quotas
from .storage import Account, SyncStorage, TokenRecord

__all__ = [
    "Principal",
    "Authenticator",
    "add_account",
    "issue_token",
    "revoke_token",
    "list_tokens",
    "hash_token",
    "space_for_key",
    "TOKEN_PREFIX",
]

TOKEN_PREFIX = "cmt"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
_TOKEN = re.compile(r"^cmt_([0-9a-f]{16})_[A-Za-z0-9_-]{20,}$")


def space_for_key(api_key: str) -> str:
    """The data space of an ``--api-key`` key: a hash, so keys are never stored."""
    return hashlib.sha256(("chatmem-space:" + api_key).encode("utf-8")).hexdigest()


def hash_token(token: str) -> str:
    return hashlib.sha256(("chatmem-token:" + token).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who a request is: the space it reads and writes and the quotas it is held to."""

    space: str
    account: str
    quotas: Quotas
    token_id: str | None = None


def add_account(
    storage: SyncStorage,
    name: str,
    *,
    ops_per_minute: int | None = None,
    max_bytes: int | None = None,
    clock: Clock = system_clock,
) -> Account:
    """Create an account with its own (empty) space; ``ValidationError`` for a bad or taken name."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValidationError(
            "account name: 1-128 of letters, digits, '.', '_', '@', '-' (not first)", field="name"
        )
    for v, f in ((ops_per_minute, "ops_per_minute"), (max_bytes, "max_bytes")):
        if v is not None and v < 0:
            raise ValidationError(f"{f} must be >= 0 (0: unlimited)", field=f)
    if storage.account(name) is not None:
        raise ValidationError(f"account {shown(name)} already exists", field="name")
    acct = Account(
        id=secrets.token_hex(8),
        name=name,
        space="acct-" + secrets.token_hex(16),
        created_at=clock(),
        ops_per_minute=ops_per_minute,
        max_bytes=max_bytes,
    )
    storage.add_account(acct)
    return acct


def _account(storage: SyncStorage, name: str) -> Account:
    acct = storage.account(name)
    if acct is None:
        raise NotFound(f"no account named {shown(name)}")
    return acct


def issue_token(
    storage: SyncStorage, account: str, *, label: str = "", clock: Clock = system_clock
) -> tuple[TokenRecord, str]:
    """A new token for the named account: its stored record and the token (shown once)."""
    acct = _account(storage, account)
    if not isinstance(label, str) or len(label) > 200:
        raise ValidationError("label must be a string of at most 200 characters", field="label")
    token_id = secrets.token_hex(8)
    token = f"{TOKEN_PREFIX}_{token_id}_{secrets.token_urlsafe(32)}"
    rec = TokenRecord(token_id, acct.id, label, hash_token(token), clock())
    storage.add_token(rec)
    return rec, token


def revoke_token(storage: SyncStorage, token_id: str, *, clock: Clock = system_clock) -> None:
    """Revoke a token by id (at once, for every instance); ``NotFound`` if there is none."""
    if not storage.revoke_token(token_id, clock()):
        raise NotFound(f"no token with id {shown(token_id)}")


def list_tokens(storage: SyncStorage, account: str) -> list[TokenRecord]:
    """The account's tokens (ids, labels, dates; the hashes are never shown)."""
    return storage.tokens(_account(storage, account).id)


class Authenticator:
    """Maps an ``Authorization: Bearer ...`` header to a ``Principal`` (or None)."""

    def __init__(self, storage: SyncStorage, api_keys: Sequence[str] = (), quotas: Quotas | None = None):
        self.storage = storage
        self.quotas = quotas or Quotas()
        self._keys = [(k.encode("utf-8"), space_for_key(k)) for k in api_keys]

    def authenticate(self, header: str | None) -> Principal | None:
        """Blocking (a database read): call from a worker thread."""
        scheme, _, token = (header or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        m = _TOKEN.match(token)
        if m is not None:
            found = self.storage.token(m.group(1))
            if found is None:
                return None
            rec, acct = found
            if rec.revoked_at is not None or not hmac.compare_digest(rec.hash, hash_token(token)):
                return None
            return Principal(acct.space, acct.name, self.quotas.for_account(acct), rec.id)
        given = token.encode("utf-8")
        space = None
        for key, sp in self._keys:  # compare with every key, in constant time each
            if hmac.compare_digest(key, given):
                space = sp
        return Principal(space, "api-key", self.quotas) if space is not None else None
