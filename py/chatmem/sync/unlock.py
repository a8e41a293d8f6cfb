"""End-to-end encryption in ``mem.sync``: the synchronizer's part (``Synchronizer``
inherits it). The format is ``chatmem.sync.encryption``, the device's key and the
re-encryption ``chatmem.sync.keyring``.

- Before a push or a pull the device's key is checked against the space's key
  check value; a mismatch raises ``WrongPassphrase`` and sets the state
  ``wrong-passphrase`` (or ``locked`` when no passphrase was entered here),
  with nothing sent or applied.
- The outbox keeps plain records: ``data`` is encrypted when a push is built
  and decrypted when a pulled page is applied; a record that does not
  authenticate is quarantined alone (``chatmem.sync.quarantine``) and the
  rest of its page applies.
- ``change_passphrase`` re-encrypts the space (resumable, each record once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import (
    DecryptionError,
    SyncAuthError,
    SyncError,
    SyncOffline,
    SyncTransientError,
    ValidationError,
    WrongPassphrase,
)
from .config import CONFIG_KEY, SyncConfig
from .encryption import EncryptionKey, Passphrase
from .keyring import Keyring
from .protocol import SyncClient
from .push import WIRE_FIELDS
from .status import SyncState

if TYPE_CHECKING:
    from ..core import Core
    from ..runtime.base import Sleep
    from .push import DrainLock

__all__ = ["EncryptedSync"]


class EncryptedSync:
    """The encryption steps of ``Synchronizer`` (a mixin: it uses the synchronizer's state)."""

    keyring: Keyring
    _config: SyncConfig | None
    _paused: bool
    _closed: bool
    _last_error: str | None
    _last_success: int | None
    _lock: DrainLock
    _core: Core
    sleep: Sleep
    rand: Callable[[], float]

    if TYPE_CHECKING:

        def _now(self) -> int: ...

        async def _set_state(
            self, state: SyncState, *, error: str | None = None, success: bool = False, write: bool = True
        ) -> None: ...

        async def _ready(self) -> tuple[SyncConfig, SyncClient]: ...

        async def _load(self) -> None: ...

        def _set_config(self, cfg: SyncConfig) -> None: ...

    async def _unlock(self, cfg: SyncConfig, client: SyncClient) -> SyncState | None:
        """Check this device's end-to-end key (a no-op without encryption). Returns the
        state to stop in when the server could not be asked; ``WrongPassphrase`` if it
        does not match (state ``wrong-passphrase`` / ``locked``, nothing sent)."""
        if cfg.encryption is None:
            self.keyring.key = None
            return None
        try:
            await self.keyring.ensure(cfg.encryption, client)
        except WrongPassphrase as e:
            await self._wrong_key(e)
            raise
        except SyncOffline as e:
            await self._set_state("offline", error=str(e))
            return "offline"
        except SyncAuthError as e:
            self._paused = True
            await self._set_state("paused-auth", error=str(e))
            return "paused-auth"
        except SyncError as e:
            await self._set_state("error", error=str(e))
            return "error"
        return None

    async def _configured_encryption(self, cfg: SyncConfig) -> None:
        """After ``configure``: drop a remembered key that is no longer wanted; check a
        newly entered passphrase again before the next push or pull."""
        if cfg.encryption is None or not cfg.encryption.remember:
            await self.keyring.forget()
        elif not cfg.encryption.is_locked:
            self.keyring.key = None

    async def _wire(self, payload: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What goes on the wire for ``payload`` (resolved ops, ``chatmem.sync.wire``): its wire
        fields, ``data`` encrypted when configured."""
        return await self.keyring.seal([{k: op.get(k) for k in WIRE_FIELDS} for op in payload])

    async def _encryption_failed(self, e: WrongPassphrase | DecryptionError) -> None:
        if isinstance(e, WrongPassphrase):
            await self._wrong_key(e)
        else:
            await self._set_state("error", error=str(e))

    async def _wrong_key(self, e: WrongPassphrase) -> None:
        enc = self._config.encryption if self._config else None
        locked = enc is None or enc.is_locked
        await self._set_state("locked" if locked else "wrong-passphrase", error=str(e))

    async def unlocked(self) -> bool:
        """Whether this device can read and write its encrypted sync now: sync is not
        encrypted, a passphrase was entered in this session, or a key is remembered here
        (``remember=True``). False means "Unlock sync": ``unlock(passphrase)``."""
        await self._load()
        enc = self._config.encryption if self._config is not None else None
        if enc is None or not enc.is_locked:
            return True
        return await self.keyring.remembered_key_id() is not None

    async def _encrypted(
        self, secret: Passphrase | EncryptionKey, what: str
    ) -> tuple[SyncConfig, SyncClient, Passphrase | EncryptionKey]:
        """The config, the client and the current encryption of an encrypted sync, ``secret``
        being a secret; else ``ValidationError`` (``what`` names the argument)."""
        if not isinstance(secret, (Passphrase, EncryptionKey)):
            raise ValidationError(f"{what} must be a Passphrase or EncryptionKey", field="encryption")
        cfg, client = await self._ready()
        if cfg.encryption is None:
            raise ValidationError("sync is not encrypted: configure encryption first", field="encryption")
        return cfg, client, cfg.encryption

    async def _keep_encryption(self, cfg: SyncConfig, secret: Passphrase | EncryptionKey) -> SyncConfig:
        """``secret`` as this device's encryption from now on (durable when this returns)."""
        updated = cfg.replace(encryption=secret)
        await self._core.store.kv_set(CONFIG_KEY, updated.to_storage_dict())
        self._set_config(updated)
        return updated

    async def unlock(self, secret: Passphrase | EncryptionKey) -> SyncConfig:
        """Enter the passphrase of this device's encrypted sync: checked at once against
        the space's key check value on the server. ``WrongPassphrase`` when it does not
        match (nothing kept, the device stays locked); ``SyncOffline`` when the server
        cannot be asked now (nothing kept: try again online). When it matches it becomes
        this device's encryption (its key remembered if ``secret.remember``), the state
        is idle and sync goes on. A space that is still plain has nothing to check
        against: ``secret`` is kept and the next sync encrypts the space with it.
        Durable when it returns."""
        cfg, client, _ = await self._encrypted(secret, "the passphrase")
        if not await self._lock.acquire():
            raise SyncTransientError("another tab is syncing: try again in a moment")
        try:
            try:
                await self.keyring.verify(secret, client)
            except WrongPassphrase as e:
                await self._wrong_key(e)
                raise
            updated = await self._keep_encryption(cfg, secret)
            await self._set_state("idle")
            return updated
        finally:
            await self._lock.release()

    async def change_passphrase(self, new: Passphrase | EncryptionKey) -> SyncConfig:
        """Re-encrypt the space under ``new`` and keep it as this device's encryption.

        Resumable: if it is interrupted, call it again with the same ``new``; every
        record is rewritten exactly once. ``WrongPassphrase`` if the current
        passphrase does not match, or another change (to another passphrase) is in
        progress. Other devices get ``WrongPassphrase`` until given the new one.
        Durable when this returns: the space's key on the server, the config here.
        """
        cfg, client, current = await self._encrypted(new, "the new passphrase")
        if not await self._lock.acquire():
            raise SyncTransientError("another tab is syncing: try again in a moment")
        try:
            await self._set_state("syncing")
            try:
                await self.keyring.change(current, new, client)
            except WrongPassphrase as e:
                await self._wrong_key(e)
                raise
            except SyncError as e:
                await self._set_state("error", error=str(e))
                raise
            updated = await self._keep_encryption(cfg, new)
            await self._set_state("idle", success=True)
            return updated
        finally:
            await self._lock.release()
