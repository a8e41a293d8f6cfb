"""The pull side of sync: read the server's change feed page by page and
apply each page to the store in one transaction, with the new cursor
(``Store.apply_changes``; the merge rules are in ``chatmem.sync.merge``).
Nothing is enqueued: pulled changes are never echoed back to the server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ClockSkew, SyncPermanentError, SyncTransientError
from .backoff import BackoffPolicy
from .config import SyncConfig
from .protocol import SyncClient
from .quarantine import QUARANTINE_KEY, printable, screen, set_aside

if TYPE_CHECKING:
    from ..core import Core

__all__ = ["CURSOR_KEY", "PULL_LIMIT", "pull_changes"]

log = logging.getLogger("chatmem.sync")

CURSOR_KEY = "sync.cursor"
#: changes per pulled page
PULL_LIMIT = 500


async def pull_changes(
    core: Core,
    client: SyncClient,
    cfg: SyncConfig,
    *,
    sleep: Callable[[float], Awaitable[None]],
    rand: Callable[[], float],
    decode: Callable[[Sequence[dict[str, Any]]], Awaitable[list[dict[str, Any]]]] | None = None,
) -> tuple[int, int, str | None]:
    """Pull until the feed has no more; returns (pages, changes, cursor).

    Transient failures are retried with backoff (``cfg.max_retries``), then
    raised; a 400 for a stored cursor means the server's feed was reset: the
    pull starts over from the beginning, once. Touched sessions are
    invalidated in the caches and reported to listeners as ``session-synced``.
    ``decode`` (end-to-end decryption) turns each page's changes into plain ones
    before anything of it is applied; what it raises stops the pull there.
    Then each change is checked (``chatmem.sync.quarantine``): one that fails is
    set aside in ``kv`` in the same transaction as the cursor, never applied,
    and the pull moves on. The HLC clock never adopts an HLC past the skew bound.
    """
    store = core.store
    policy = BackoffPolicy(cfg.backoff_base, cfg.backoff_max)
    stored = await store.kv_get(CURSOR_KEY)
    cursor = stored if isinstance(stored, str) and stored else None
    pages = n = failures = 0
    restarted = False
    hlc = core.outbox.hlc
    while True:
        try:
            page = await client.changes(since=cursor, limit=PULL_LIMIT)
        except SyncPermanentError as e:
            if e.status == 400 and cursor is not None and not restarted:
                cursor, restarted = None, True  # the server's feed was reset
                continue
            raise
        except SyncTransientError as e:
            failures += 1
            if failures > cfg.max_retries:
                raise
            await sleep(policy.delay(failures - 1, e.retry_after_ms, core.now(), rand) / 1000)
            continue
        changes = [
            {"resource": c.resource, "id": c.id, "data": c.data, "deleted": c.deleted, "hlc": c.hlc}
            for c in page.changes
        ]
        if decode is not None:
            changes = await decode(changes)
        changes, bad = screen(changes, core.limits)
        bad += [{"change": printable(m.get("change")), "reason": m.get("reason"), "field": None}
                for m in page.malformed]
        if hlc is not None:
            for c in changes:
                try:
                    hlc.update(str(c["hlc"]))
                except ClockSkew as e:  # applied, but this clock stays where it is
                    log.warning("pulled change %s %s: %s", c["resource"], c["id"], e)
        kv: dict[str, Any] = {CURSOR_KEY: page.cursor}
        if bad:
            log.warning("pull: %d change(s) set aside: %s", len(bad), bad[0]["reason"])
            kv[QUARANTINE_KEY] = set_aside(await store.kv_get(QUARANTINE_KEY), bad, core.now(), page.cursor)
        touched = await store.apply_changes(changes, kv)
        for sid in touched:
            core.invalidate(sid)
            core.changed("session-synced", sid, None)
        pages += 1
        n += len(changes)
        cursor = page.cursor
        if not page.more:
            break
    return pages, n, cursor
