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
  (``Store.apply_changes``, rules in ``chatmem.sync.apply``) and stores the
  new cursor in that same transaction; nothing is enqueued. The device's HLC
  clock advances past every pulled HLC (and is kept in ``kv`` as ``sync.hlc``).
  A record this device cannot use is quarantined alone (``chatmem.sync.quarantine``);
  ``retry_quarantined()`` pulls again from where the earliest one's page began.
- End-to-end encryption: see ``chatmem.sync.unlock`` (key check before a push
  or pull; ``data`` encrypted when a push is built, decrypted per pulled page).
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
import dataclasses
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
from ..runtime.http import Transport
from .auto import AutoSync
from .backfill import Backfill, push_history
from .backoff import BackoffPolicy
from .cipher import default_suite
from .config import CONFIG_KEY, SyncConfig
from .keyring import Keyring
from .protocol import SyncClient
from .pull import CURSOR_KEY, pull_changes
from .push import (
    LEASE_MARGIN_MS,
    DrainLock,
    LocalDrainLock,
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
from .unlock import EncryptedSync

if TYPE_CHECKING:
    from ..core import Core
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


class Synchronizer(AutoSync, EncryptedSync):
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
        self._live = StreamFollower(self._poke, core.listeners)
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
        self._live.cancel()  # the auto-sync loop follows again with the new config

    live_state = property(lambda self: self._live.state, doc="the stream: off, following, unsupported, auth")

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

    # ------------------------------------------------------------------ status
    def _now(self) -> int:
        return int(self._core.clock())

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
        stopped, requests, acked, dead = await push_history(self, self._backfill, cfg, client, policy, wait)
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
            except SyncOffline as e:
                await store.outbox_update([strip_lease(op) for op in batch])
                await self._set_state("offline", error=str(e))
                return PushReport(requests, acked, dead, await self._pending(), "offline")
            except SyncAuthError as e:
                await store.outbox_update([strip_lease(op) for op in batch])
                self._paused = True
                await self._set_state("paused-auth", error=str(e))
                return PushReport(requests, acked, dead, await self._pending(), "paused-auth")
            except SyncTransientError as e:
                dead += await record_failures(store, batch, e, cfg, policy, self._now(), self.rand)
                self._last_error = str(e)
                continue
            except (SyncPermanentError, ValidationError) as e:
                status = getattr(e, "status", None)
                response = getattr(e, "response", None)
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
            if (
                stopped := (await push_history(self, self._backfill, cfg, client, policy, True))[0]
            ) is not None:
                return PullReport(state=stopped)
            return await self._pull(cfg, client)
        except (WrongPassphrase, DecryptionError) as e:
            await self._encryption_failed(e)
            raise
        except SyncOffline as e:
            await self._set_state("offline", error=str(e))
            return PullReport(state="offline")
        except SyncAuthError as e:
            self._paused = True
            await self._set_state("paused-auth", error=str(e))
            return PullReport(state="paused-auth")
        except SyncError as e:
            await self._set_state("error", error=str(e))
            return PullReport(state="error")

    async def _pull(self, cfg: SyncConfig, client: SyncClient) -> PullReport:
        await self._set_state("syncing")
        pages, n, cursor = await pull_changes(
            self._core, client, cfg, sleep=self.sleep, rand=self.rand, decode=self.keyring.open
        )
        await self._save_hlc()
        self._live.pulled = cursor
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
