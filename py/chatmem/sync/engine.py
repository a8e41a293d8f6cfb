"""``SyncEngine`` (``mem.sync``): drains the outbox to a sync server and pulls
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
- ``pull()`` applies one page of ``/v1/changes`` per store transaction
  (``Store.apply_changes``, rules in ``chatmem.sync.apply``) and stores the
  new cursor in that same transaction; nothing is enqueued. The device's HLC
  clock advances past every pulled HLC (and is kept in ``kv`` as ``sync.hlc``).
- One drainer at a time: in the browser a Web Lock per database (the tab
  holding it drains; the others answer ``status()`` from the ``kv`` record
  ``sync.status`` that the drainer writes); on CPython a lock per engine,
  plus the leases between engines sharing one SQLite file.

Everything that depends on where it runs is injected (``Memory`` passes its
runtime's): the transport, the drain lock, ``online``/``on_online``, the
``clock`` (ms, via the core), ``sleep`` (seconds) and ``rand``, so tests
never really wait for a backoff.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import (
    SyncAuthError,
    SyncError,
    SyncOffline,
    SyncPermanentError,
    SyncTransientError,
    ValidationError,
)
from ..http import Transport
from .backoff import BackoffPolicy
from .config import SyncConfig
from .protocol import SyncClient
from .pull import CURSOR_KEY, pull_changes
from .push import (
    LEASE_MARGIN_MS,
    WIRE_FIELDS,
    DrainLock,
    LocalDrainLock,
    PullReport,
    PushReport,
    dead_record,
    op_ids,
    record_failures,
    select_batch,
    strip_lease,
)
from .status import SyncState, SyncStatus

if TYPE_CHECKING:
    from ..core import Core

__all__ = [
    "CONFIG_KEY",
    "CURSOR_KEY",
    "HLC_KEY",
    "STATUS_KEY",
    "DrainLock",
    "LocalDrainLock",
    "PullReport",
    "PushReport",
    "SyncEngine",
]

log = logging.getLogger("chatmem.sync")

CONFIG_KEY = "sync.config"
STATUS_KEY = "sync.status"
HLC_KEY = "sync.hlc"


Sleep = Callable[[float], Awaitable[None]]


class SyncEngine:
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

    def __repr__(self) -> str:
        ep = self._config.endpoint if self._config else None
        return f"<SyncEngine endpoint={ep!r} state={self._state!r}>"

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
        await self._core.store.kv_set(CONFIG_KEY, cfg.to_storage_dict())
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
        st = await self._core.store.kv_get(STATUS_KEY)
        if isinstance(st, dict) and st.get("owner") != self.owner:
            return SyncStatus(
                state=st.get("state", "idle"),
                pending=pending,
                dead_letters=dead,
                last_success=st.get("lastSuccess"),
                last_error=st.get("lastError"),
            )
        return SyncStatus(self._state, pending, dead, self._last_success, self._last_error)

    # ------------------------------------------------------------------ dead letters
    async def dead_letters(self) -> list[dict[str, Any]]:
        """Dead-lettered operations: the op fields plus ``reason``, ``response``, ``status``, ``failed_at``."""
        return await self._core.store.dead_list()

    async def replay(self, which: str | Iterable[str]) -> int:
        """Move dead letters (an ``op_id``, several, or ``"all"``) back to the end of the
        outbox with ``attempts`` reset; durable when this returns. Returns how many."""
        n = await self._core.store.dead_replay(op_ids(which))
        self._poke()
        return n

    async def discard(self, which: str | Iterable[str]) -> int:
        """Delete dead letters for good (an ``op_id``, several, or ``"all"``). Returns how many."""
        return await self._core.store.dead_discard(op_ids(which))

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
        requests = acked = dead = 0
        final: SyncState = "idle"
        await self._set_state("syncing")
        while True:
            now = self._now()
            ops = await store.outbox_list()
            batch, wake = select_batch(ops, now, cfg.batch_size, owner=self.owner, exclusive=self._lock.exclusive)
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
                resp = await client.push([{k: op.get(k) for k in WIRE_FIELDS} for op in batch])
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
                    [dead_record(op, f"the server refused the batch: {e}", response, status, self._now()) for op in batch]
                )
                dead += len(batch)
                self._last_error = str(e)
                continue
            by_id = resp.by_op_id()
            ok = [r.op_id for r in resp.results if r.delivered]
            rejected = [
                dead_record(op, by_id[op["op_id"]].reason or "rejected by the server",
                            json.dumps({"op_id": op["op_id"], "status": "rejected",
                                        "reason": by_id[op["op_id"]].reason}), 200, self._now())
                for op in batch
                if op["op_id"] in by_id and by_id[op["op_id"]].status == "rejected"
            ]
            if ok:
                await store.outbox_ack(ok)
            if rejected:
                await store.outbox_to_dead(rejected)
            missing = [op for op in batch if op["op_id"] in set(resp.missing)]
            if missing:
                err = SyncTransientError("the server's answer did not mention these operations")
                dead += await record_failures(store, missing, err, cfg, policy, self._now(), self.rand)
            acked += len(ok)
            dead += len(rejected)
            self._last_success = self._now()
        await self._set_state(final, success=final == "idle" and requests > 0)
        await self._save_hlc()
        return PushReport(requests, acked, dead, await self._pending(), final)

    async def _pending(self) -> int:
        return (await self._core.store.outbox_counts())[0]

    # ------------------------------------------------------------------ pull
    async def pull(self) -> PullReport:
        """Apply the server's change feed page by page (see the module docstring)."""
        cfg, client = await self._ready()
        if self._paused:
            return await self._pull_skipped()
        if not await self._lock.acquire():
            return await self._pull_skipped()
        try:
            return await self._pull_guarded(cfg, client)
        finally:
            await self._lock.release()

    async def _pull_guarded(self, cfg: SyncConfig, client: SyncClient) -> PullReport:
        try:
            return await self._pull(cfg, client)
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
        pages, n, cursor = await pull_changes(self._core, client, cfg, sleep=self.sleep, rand=self.rand)
        await self._save_hlc()
        await self._set_state("idle", success=True)
        return PullReport(pages, n, cursor, "idle")

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
                report = await self._push(cfg, client, wait=True)
                if report.state not in ("offline", "paused-auth"):
                    await self._pull_guarded(cfg, client)
            finally:
                await self._lock.release()
        return await self.status()

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
                return
            self._wake.clear()
            try:
                await self.run()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - keep the loop alive; the status says why
                log.warning("auto-sync run failed: %s", e)
                self._last_error = str(e)
                self._state = "error"
            try:
                await asyncio.wait_for(self._wake.wait(), cfg.sync_interval / 1000)
            except TimeoutError:
                pass

    async def stop(self) -> None:
        """Stop auto-sync (a request in flight is abandoned; its ops stay leased and are resent)."""
        task, self._auto = self._auto, None
        if self._stop_online is not None:
            self._stop_online()
            self._stop_online = None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception as e:  # noqa: BLE001 - a stopped loop's failure is only logged
                log.warning("auto-sync ended with an error: %s", e)

    @property
    def running(self) -> bool:
        """True while auto-sync is on."""
        return self._auto is not None and not self._auto.done()

    async def close(self) -> None:
        """Stop auto-sync and release the drain lock (called by ``Memory.close``)."""
        self._closed = True
        await self.stop()
        await self._lock.release()
