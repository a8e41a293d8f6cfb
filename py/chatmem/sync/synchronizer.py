"""``Synchronizer`` (``mem.sync``): drains the outbox to a sync server and pulls
its change feed back, with the delivery rules of the protocol.

What is durable, and when:

- ``configure(config)`` stores the config (the api key included) in the
  store's ``kv`` under ``sync.config``; it is never exported, logged or put
  in a URL. ``status()``, ``repr()`` and errors never show it.
- An operation leaves the ``outbox`` only when the server answered
  ``applied`` or ``duplicate`` for its ``op_id``. Before a request its
  operations are *leased* (``lease_owner``/``lease_until`` written to the
  outbox); a crash, reload or cancelled request leaves them in the outbox and
  the next drain sends them again with the **same** ``op_id``.
- A failed attempt (timeout, dropped connection, 5xx, 429, unreadable answer)
  increments the operation's ``attempts`` and stores ``next_attempt_at``
  (exponential backoff with jitter, or the server's ``Retry-After``) and
  ``last_error``. When ``attempts`` passes ``max_retries`` (default 3: the
  fourth failed attempt) or the server rejects the operation, it moves to
  ``dead_letter`` with ``reason`` and ``response`` (the last answer).
- Offline (no connection at all) is waiting: nothing is counted or moved.
  401/403 set ``paused-auth`` (kept in ``kv``): nothing is sent, nothing is
  dead-lettered, until ``configure()`` is called again.
- Operations of one session go in order: an operation waiting for a retry
  (or leased by another drainer) holds back the later operations of its
  session only; other sessions go on.
- History written before sync was first turned on is pushed from the store
  before the outbox, and before a pull (``chatmem.sync.backfill``).
- ``pull()`` applies one page of ``/v1/changes`` per store transaction
  (``Store.apply_changes``, rules in ``chatmem.stores.changes``) and stores the
  new cursor in that same transaction; nothing is enqueued. The device's HLC
  clock advances past every pulled HLC (and is kept in ``kv`` as ``sync.hlc``).
  A record this device cannot use is quarantined alone (``chatmem.sync.quarantine``);
  ``retry_quarantined()`` pulls again from where the earliest one's page began.
- End-to-end encryption (format: ``chatmem.sync.encryption``; the device's key
  and re-encryption: ``chatmem.sync.keyring``). Before a push or a pull the
  device's key is checked against the space's key check value; a mismatch
  raises ``WrongPassphrase`` and sets the state ``wrong-passphrase`` (or
  ``locked`` when no passphrase was entered here), with nothing sent or
  applied. The outbox keeps plain records: ``data`` is encrypted when a push
  is built and decrypted when a pulled page is applied. ``change_passphrase``
  re-encrypts the space (resumable, each record once).
- Auto-sync (``start``/``stop``): ``run()`` now, then every ``sync_interval``,
  on a poke (a local write, with live sync, ``chatmem.sync.stream``) and, in
  the browser, on the ``online`` event; the config that turns it on is durable.
- One drainer at a time: in the browser a Web Lock per database (the tab
  holding it drains; the others answer ``status()`` from the ``kv`` record
  ``sync.status`` that the drainer writes); on CPython a lock per synchronizer,
  plus the leases between engines sharing one SQLite file.

Everything that depends on where it runs is injected (``Memory`` passes its
runtime's): the transport, the drain lock, ``online``/``on_online``, the
``clock`` (ms, via the core), ``sleep`` (seconds) and ``rand``, so tests
never really wait for a backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import (
    DecryptionError,
    SyncAuthError,
    SyncError,
    SyncOffline,
    SyncPermanentError,
    SyncTransientError,
    ValidationError,
    WrongPassphrase,
)
from ..http import Transport
from .backfill import Backfill
from .backoff import BackoffPolicy
from .cipher import default_suite
from .config import CONFIG_KEY, SyncConfig
from .encryption import EncryptionKey, Passphrase
from .keyring import Keyring
from .lock import DrainLock, LocalDrainLock
from .protocol import SyncClient
from .pull import CURSOR_KEY, pull_changes
from .push import (
    LEASE_MARGIN_MS,
    WIRE_FIELDS,
    PullReport,
    PushReport,
    apply_answer,
    dead_letter_error,
    dead_record,
    op_ids,
    record_failures,
    resolve_batch,
    select_batch,
    strip_lease,
)
from .quarantine import QUARANTINE_KEY, retry_from
from .quarantine import kinds as quarantine_kinds
from .status import SyncState, SyncStatus
from .stream import StreamFollower
from .wire import resolve

if TYPE_CHECKING:
    from ..stores.shared import Core
    from .encryption import CipherSuite

__all__ = [
    "CONFIG_KEY",
    "CURSOR_KEY",
    "HLC_KEY",
    "STATUS_KEY",
    "DrainLock",
    "LocalDrainLock",
    "PullReport",
    "PushReport",
    "Synchronizer",
]

log = logging.getLogger("chatmem.sync")

STATUS_KEY = "sync.status"
HLC_KEY = "sync.hlc"

Sleep = Callable[[float], Awaitable[None]]


class Synchronizer:
    """Push, pull and auto-sync for one ``Memory`` (``mem.sync``)."""

    def __init__(
        self,
        core: Core,
        *,
        transport: Transport | None = None,
        sleep: Sleep | None = None,
        rand: Callable[[], float] | None = None,
        lock: DrainLock | None = None,
        online: Callable[[], bool] | None = None,
        on_online: Callable[[Callable[[], None]], Callable[[], None] | None] | None = None,
        cipher: Callable[[], CipherSuite] | None = None,
    ):
        self._core = core
        self.transport = transport
        self.sleep: Sleep = sleep or asyncio.sleep
        self.rand = rand or random.random
        self.owner = "e" + core.ids()
        self._lock: DrainLock = lock or LocalDrainLock()
        self._online = online
        self._on_online = on_online
        self._config: SyncConfig | None = None
        self._client: SyncClient | None = None
        self._loaded = False
        self._state: SyncState = "idle"
        self._last_success: int | None = None
        self._last_error: str | None = None
        self._paused = False
        self._auto: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._stop_online: Callable[[], None] | None = None
        self._closed = False
        self._stream = StreamFollower(self._poke, core.listeners)
        #: the device's end-to-end key for the space (``chatmem.sync.keyring``)
        self.keyring = Keyring(core.store, cipher or default_suite, core.ids)
        self._backfill = Backfill(core)

    def __repr__(self) -> str:
        ep = self._config.endpoint if self._config else None
        return f"<Synchronizer endpoint={ep!r} state={self._state!r}>"

    # ------------------------------------------------------------------ config
    @property
    def config(self) -> SyncConfig | None:
        """The current config (its ``repr`` hides the key), once loaded or configured."""
        return self._config

    async def configure(self, config: SyncConfig | Mapping[str, Any]) -> SyncConfig:
        """Validate and store ``config`` (durable in ``kv`` when this returns).

        ``ValidationError`` naming the field if it is not valid (nothing stored).
        Clears a ``paused-auth`` state; starts or stops auto-sync as configured.
        """
        cfg = config if isinstance(config, SyncConfig) else SyncConfig.from_dict(config)
        cfg.validate()
        await self._load()
        if cfg.enabled:  # from here on writes queue their ops; the history before is backfilled
            await self._core.store.outbox_activate(self._now())
        await self._core.store.kv_set(CONFIG_KEY, cfg.to_storage_dict())
        await self._configured_encryption(cfg)
        self._set_config(cfg)
        self._paused = False
        self._last_error = None
        await self._set_state("idle", write=True)
        if cfg.enabled and cfg.auto_sync:
            self.start()
        else:
            await self.stop()
        return cfg

    def _set_config(self, cfg: SyncConfig) -> None:
        self._config = cfg
        self._client = None  # built by _ready(), once the device id is known
        self._stream.cancel()  # the auto-sync loop follows again with the new config

    live_state = property(
        lambda self: self._stream.state, doc="the stream: off, following, unsupported, auth"
    )

    async def _load(self) -> None:
        """Read config, status and the HLC high-water mark from ``kv`` (once)."""
        if self._loaded:
            return
        store = self._core.store
        await self._core.outbox.device_id()  # the device's HLC clock exists from here on
        last = await store.kv_get(HLC_KEY)
        if isinstance(last, str) and self._core.outbox.hlc is not None:
            try:
                self._core.outbox.hlc.update(last)
            except ValidationError:
                pass
        raw = await store.kv_get(CONFIG_KEY)
        if isinstance(raw, dict) and self._config is None:
            try:
                self._set_config(SyncConfig.from_dict(raw))
            except ValidationError as e:
                log.warning("stored sync config is not valid: %s", e)
        st = await store.kv_get(STATUS_KEY)
        if isinstance(st, dict):
            self._last_success = st.get("lastSuccess")
            self._last_error = st.get("lastError")
            self._paused = st.get("state") == "paused-auth"
            if self._paused:
                self._state = "paused-auth"
        self._loaded = True

    async def _ready(self) -> tuple[SyncConfig, SyncClient]:
        await self._load()
        if self._config is None:
            raise ValidationError(
                "sync is not configured: call mem.sync.configure(SyncConfig(...)) first",
                field="config",
            )
        if not self._config.enabled:
            raise ValidationError("sync is not enabled in the config", field="enabled")
        if self._client is None:
            self._client = SyncClient(
                self._config,
                self.transport,
                device_id=await self._core.outbox.device_id(),
                clock=self._core.clock,
                online=self._online,
            )
        return self._config, self._client

    # ------------------------------------------------------------------ auto-sync
    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def start(self) -> None:
        """Start auto-sync: ``run()`` now, then every ``sync_interval`` (and, in the
        browser, on the ``online`` event), if the (stored) config enables it. Call it
        after reopening to resume; ``configure()`` calls it. Needs a running event loop."""
        if self._auto is not None and not self._auto.done():
            self._poke()
            return
        self._wake = asyncio.Event()
        if self._on_online is not None and self._stop_online is None:
            self._stop_online = self._on_online(self._poke)
        self._auto = asyncio.get_running_loop().create_task(self._auto_loop())

    async def _auto_loop(self) -> None:
        assert self._wake is not None
        await self._load()  # after a reload: the stored config says whether to run
        while not self._closed:
            cfg = self._config
            if cfg is None or not cfg.enabled or not cfg.auto_sync:
                self._stream.cancel()
                return
            self._wake.clear()
            if cfg.live:
                self._stream.start(self._ready, self.rand)
            try:
                await self.run()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - keep the loop alive; the status says why
                log.warning("auto-sync run failed: %s", e)
                self._last_error = str(e)
                self._state = "error"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), cfg.sync_interval / 1000)

    async def stop(self) -> None:
        """Stop auto-sync (a request in flight is abandoned; its ops stay leased and are resent)."""
        await self._stream.stop()
        task, self._auto = self._auto, None
        if self._stop_online is not None:
            self._stop_online()
            self._stop_online = None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                try:
                    await task
                except Exception as e:  # noqa: BLE001 - a stopped loop's failure is only logged
                    log.warning("auto-sync ended with an error: %s", e)

    @property
    def running(self) -> bool:
        """True while auto-sync is on."""
        return self._auto is not None and not self._auto.done()

    # ------------------------------------------------------------------ end-to-end encryption
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
        except (SyncOffline, SyncAuthError) as e:
            return await self._stopped_by(e)
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

    # ------------------------------------------------------------------ status
    def _now(self) -> int:
        return int(self._core.clock())

    async def _stopped_by(self, e: SyncOffline | SyncAuthError) -> SyncState:
        """The state a request that found no server (``offline``) or was refused its key
        (``paused-auth``: nothing is sent until ``configure()``) stops sync in, set and kept."""
        state: SyncState = "paused-auth" if isinstance(e, SyncAuthError) else "offline"
        self._paused = self._paused or state == "paused-auth"
        await self._set_state(state, error=str(e))
        return state

    async def _set_state(
        self, state: SyncState, *, error: str | None = None, success: bool = False, write: bool = True
    ) -> None:
        self._state = state
        if error is not None:
            self._last_error = error
        if success:
            self._last_success = self._now()
            self._last_error = None
        if write:
            await self._core.store.kv_set(
                STATUS_KEY,
                {
                    "state": state,
                    "lastSuccess": self._last_success,
                    "lastError": self._last_error,
                    "owner": self.owner,
                    "at": self._now(),
                },
            )

    async def status(self) -> SyncStatus:
        """Counts from the store, state from the drainer's ``kv`` record (any tab's)."""
        await self._load()
        pending, dead = await self._core.store.outbox_counts()
        pending += await self._backfill.remaining()
        st = await self._core.store.kv_get(STATUS_KEY)
        q = await self._core.store.kv_get(QUARANTINE_KEY)
        reasons = quarantine_kinds(q)
        quarantined = sum(reasons.values())
        if isinstance(st, dict) and st.get("owner") != self.owner:
            out = SyncStatus(
                state=st.get("state", "idle"),
                pending=pending,
                dead_letters=dead,
                last_success=st.get("lastSuccess"),
                last_error=st.get("lastError"),
                quarantined=quarantined,
                quarantine_reasons=reasons,
            )
        else:
            out = SyncStatus(
                self._state, pending, dead, self._last_success, self._last_error, quarantined, reasons
            )
        if dead and out.state == "idle":
            # dead letters wait for the user: that is an error until replayed or discarded
            out = dataclasses.replace(
                out, state="error", last_error=await dead_letter_error(self._core.store)
            )
        return out

    async def quarantined(self) -> list[dict[str, Any]]:
        """The pulled records this device could not use, one entry each (newest last):
        ``{resource, id, kind, reason, field, change, at, since}`` (``chatmem.sync.quarantine``);
        ``change`` holds the change as received, as JSON text (``{"json": ...}``)."""
        q = await self._core.store.kv_get(QUARANTINE_KEY)
        items = q.get("items") if isinstance(q, dict) else None
        return [dict(x) for x in items if isinstance(x, dict)] if isinstance(items, list) else []

    async def retry_quarantined(self) -> PullReport:
        """Try the quarantined records again: pull again from where the earliest one's page
        began. A record that now decrypts and passes (e.g. once the right passphrase was
        entered, or the sender fixed it) is applied and leaves the quarantine; one that
        still fails stays, with its new reason. ``status().quarantined`` says how many are left."""
        return await self._pull_locked(rewind=True)

    async def clear_quarantine(self) -> int:
        """Forget every quarantined record (they are never applied); returns how many there
        were. Durable when it returns."""
        q = await self._core.store.kv_get(QUARANTINE_KEY)
        n = sum(quarantine_kinds(q).values())
        await self._core.store.kv_set(QUARANTINE_KEY, {"count": 0, "items": []})
        return n

    # ------------------------------------------------------------------ dead letters
    async def dead_letters(self) -> list[dict[str, Any]]:
        """Dead-lettered operations: the op fields plus ``reason``, ``response``, ``status``, ``failed_at``."""
        return await self._core.store.dead_list()

    async def replay(self, which: str | Iterable[str]) -> int:
        """Move dead letters (an ``op_id``, several, or ``"all"``) back to the end of the
        outbox with ``attempts`` reset; durable when this returns. Returns how many."""
        n = await self._core.store.dead_replay(op_ids(which))
        await self._after_dead_change()
        self._poke()
        return n

    async def discard(self, which: str | Iterable[str]) -> int:
        """Delete dead letters for good (an ``op_id``, several, or ``"all"``). Returns how many."""
        n = await self._core.store.dead_discard(op_ids(which))
        await self._after_dead_change()
        return n

    # ------------------------------------------------------------------ push
    async def push(self, *, wait: bool = True) -> PushReport:
        """Send the outbox in batches until it is empty or nothing more can be sent.

        ``wait=True`` sleeps through backoff delays (with the injected ``sleep``)
        until every operation is acknowledged or dead-lettered; ``wait=False``
        sends only what is due now. Returns early, with nothing counted as failed,
        when offline, paused by 401/403, or when another drainer holds the lock.
        """
        cfg, client = await self._ready()
        if self._paused:
            return await self._push_skipped()
        if not await self._lock.acquire():
            return await self._push_skipped()
        try:
            skipped = await self._unlock(cfg, client)
            if skipped is not None:
                return PushReport(remaining=await self._pending(), state=skipped)
            return await self._push(cfg, client, wait)
        finally:
            await self._lock.release()

    async def _push_skipped(self) -> PushReport:
        """Nothing was done here (paused, or another drainer holds the lock): the status."""
        st = await self.status()
        return PushReport(remaining=st.pending, state=st.state, drained=False)

    async def _pull_skipped(self) -> PullReport:
        return PullReport(state=(await self.status()).state, drained=False)

    async def _push(self, cfg: SyncConfig, client: SyncClient, wait: bool) -> PushReport:
        store = self._core.store
        policy = BackoffPolicy(cfg.backoff_base, cfg.backoff_max)
        final: SyncState = "idle"
        await self._set_state("syncing")
        stopped, requests, acked, dead = await self._push_history(cfg, client, policy, wait)
        if stopped is not None:  # the history goes first (chatmem.sync.backfill)
            return PushReport(requests, acked, dead, await self._pending(), stopped)
        while True:
            now = self._now()
            ops = await store.outbox_list()
            batch, wake = select_batch(
                ops, now, cfg.batch_size, owner=self.owner, exclusive=self._lock.exclusive
            )
            if batch:
                payload, batch = await resolve_batch(store, batch)
                if not batch:
                    continue
            if not batch:
                if wake is not None and wait and not self._closed:
                    await self.sleep(max(0, wake - now) / 1000)
                    continue
                # something still waits for a retry: the last attempt at it failed
                final = "error" if any(op.get("attempts") for op in ops) else "idle"
                break
            lease_until = now + cfg.timeout + LEASE_MARGIN_MS
            leased = [dict(op, lease_owner=self.owner, lease_until=lease_until) for op in batch]
            await store.outbox_update(leased)
            requests += 1
            try:
                resp = await client.push(await self._wire(payload))
            except WrongPassphrase as e:  # the key changed under us: keep every op
                await store.outbox_update([strip_lease(op) for op in batch])
                await self._wrong_key(e)
                raise
            except (SyncOffline, SyncAuthError) as e:
                await store.outbox_update([strip_lease(op) for op in batch])
                stopped = await self._stopped_by(e)
                return PushReport(requests, acked, dead, await self._pending(), stopped)
            except SyncTransientError as e:
                dead += await record_failures(store, batch, e, cfg, policy, self._now(), self.rand)
                self._last_error = str(e)
                continue
            except (SyncPermanentError, ValidationError) as e:
                status, response = (e.status, e.response) if isinstance(e, SyncError) else (None, None)
                await store.outbox_to_dead(
                    [
                        dead_record(op, f"the server refused the batch: {e}", response, status, self._now())
                        for op in batch
                    ]
                )
                dead += len(batch)
                self._last_error = str(e)
                continue
            ok, died = await apply_answer(store, batch, resp, cfg, policy, self._now(), self.rand)
            acked += ok
            dead += died
            self._last_success = self._now()
        dead_error = await dead_letter_error(store)  # dead letters wait for the user: an error
        final = "error" if dead_error else final
        await self._set_state(final, error=dead_error, success=final == "idle" and requests > 0)
        await self._save_hlc()
        return PushReport(requests, acked, dead, await self._pending(), final)

    async def _push_history(
        self,
        cfg: SyncConfig,
        client: SyncClient,
        policy: BackoffPolicy,
        wait: bool,
    ) -> tuple[SyncState | None, int, int, int]:
        """Push the history (``chatmem.sync.backfill``) through ``client``, under the drain lock:
        (state if it stopped early, requests, acknowledged, dead-lettered)."""
        store = self._core.store
        counts = [0, 0, 0]
        stop: list[SyncState] = []

        async def send(batch: list[dict[str, Any]], known: dict[str, dict[str, Any]]) -> bool:
            payload, _gone = await resolve(store, batch, known)
            by_op = {op["op_id"]: op for op in batch}
            failures = 0
            while payload:
                counts[0] += 1
                try:
                    resp = await client.push(await self._wire(payload))
                except WrongPassphrase as e:  # nothing was sent: the history waits for the right key
                    await self._wrong_key(e)
                    raise
                except (SyncOffline, SyncAuthError) as e:
                    stop.append(await self._stopped_by(e))
                    return False
                except SyncTransientError as e:
                    failures += 1
                    self._last_error = str(e)
                    if failures > cfg.max_retries or not wait or self._closed:
                        stop.append("error")
                        return False
                    await self.sleep(
                        policy.delay(failures - 1, e.retry_after_ms, self._now(), self.rand) / 1000
                    )
                    continue
                except (SyncPermanentError, ValidationError) as e:
                    await store.outbox_to_dead(
                        [
                            dead_record(
                                by_op[p["op_id"]],
                                f"the server refused the batch: {e}",
                                e.response if isinstance(e, SyncError) else None,
                                e.status if isinstance(e, SyncError) else None,
                                self._now(),
                            )
                            for p in payload
                        ]
                    )
                    counts[2] += len(payload)
                    return True
                results = resp.by_op_id()
                rejected = [
                    p for p in payload if p["op_id"] in results and results[p["op_id"]].status == "rejected"
                ]
                if rejected:
                    await store.outbox_to_dead(
                        [
                            dead_record(
                                by_op[p["op_id"]],
                                results[p["op_id"]].reason or "rejected by the server",
                                json.dumps(
                                    {
                                        "op_id": p["op_id"],
                                        "status": "rejected",
                                        "reason": results[p["op_id"]].reason,
                                    }
                                ),
                                200,
                                self._now(),
                            )
                            for p in rejected
                        ]
                    )
                counts[1] += sum(1 for r in resp.results if r.delivered)
                counts[2] += len(rejected)
                self._last_success = self._now()
                missing = set(resp.missing)
                payload = [p for p in payload if p["op_id"] in missing]
            for op in batch:
                known.pop(op["id"], None)
            return True

        if await self._backfill.run(send, cfg.batch_size):
            return None, counts[0], counts[1], counts[2]
        if not stop or stop[0] == "error":
            await self._set_state("error", error=self._last_error)
        return (stop[0] if stop else "error"), counts[0], counts[1], counts[2]

    async def _after_dead_change(self) -> None:
        """Replayed or discarded: an ``error`` state that only the dead letters held ends."""
        await self._load()
        if self._state == "error" and await dead_letter_error(self._core.store) is None:
            self._last_error = None
            await self._set_state("idle")

    async def _pending(self) -> int:
        return (await self._core.store.outbox_counts())[0] + await self._backfill.remaining()

    # ------------------------------------------------------------------ pull
    async def pull(self) -> PullReport:
        """Apply the server's change feed page by page (see the module docstring)."""
        return await self._pull_locked(rewind=False)

    async def _pull_locked(self, *, rewind: bool) -> PullReport:
        """A pull under the drain lock; ``rewind``: from where the earliest quarantined
        record's page began (the cursor is moved back under the lock, so no other pull
        moves it meanwhile)."""
        cfg, client = await self._ready()
        if self._paused:
            return await self._pull_skipped()
        if not await self._lock.acquire():
            return await self._pull_skipped()
        try:
            skipped = await self._unlock(cfg, client)
            if skipped is not None:
                return PullReport(state=skipped)
            if rewind:
                anything, since = retry_from(await self._core.store.kv_get(QUARANTINE_KEY))
                if anything:
                    await self._core.store.kv_set(CURSOR_KEY, since or "")
            return await self._pull_guarded(cfg, client)
        finally:
            await self._lock.release()

    async def _pull_guarded(self, cfg: SyncConfig, client: SyncClient) -> PullReport:
        policy = BackoffPolicy(cfg.backoff_base, cfg.backoff_max)  # the history first: see backfill.py
        try:
            if (stopped := (await self._push_history(cfg, client, policy, True))[0]) is not None:
                return PullReport(state=stopped)
            return await self._pull(cfg, client)
        except (WrongPassphrase, DecryptionError) as e:
            await self._encryption_failed(e)
            raise
        except (SyncOffline, SyncAuthError) as e:
            return PullReport(state=await self._stopped_by(e))
        except SyncError as e:
            await self._set_state("error", error=str(e))
            return PullReport(state="error")

    async def _pull(self, cfg: SyncConfig, client: SyncClient) -> PullReport:
        await self._set_state("syncing")
        pages, n, cursor = await pull_changes(
            self._core, client, cfg, sleep=self.sleep, rand=self.rand, decode=self.keyring.open
        )
        await self._save_hlc()
        self._stream.pulled = cursor
        dead_error = await dead_letter_error(self._core.store)
        await self._set_state("error" if dead_error else "idle", error=dead_error, success=not dead_error)
        return PullReport(pages, n, cursor, "error" if dead_error else "idle")

    async def _save_hlc(self) -> None:
        hlc = self._core.outbox.hlc
        if hlc is not None and hlc.last is not None:
            await self._core.store.kv_set(HLC_KEY, hlc.last)

    # ------------------------------------------------------------------ both
    async def run(self) -> SyncStatus:
        """Push, then pull (one drain-lock hold); returns the status after."""
        cfg, client = await self._ready()
        if not self._paused and await self._lock.acquire():
            try:
                if await self._unlock(cfg, client) is not None:
                    return await self.status()
                report = await self._push(cfg, client, wait=True)
                if report.state not in ("offline", "paused-auth"):
                    await self._pull_guarded(cfg, client)
            finally:
                await self._lock.release()
        return await self.status()

    async def close(self) -> None:
        """Stop auto-sync and release the drain lock (called by ``Memory.close``)."""
        self._closed = True
        await self.stop()
        await self._lock.release()
