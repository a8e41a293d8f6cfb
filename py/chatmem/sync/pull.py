"""The pull side of sync: read the server's change feed page by page and
apply each page to the store in one transaction, with the new cursor
(``Store.apply_changes``; the merge rules are in ``chatmem.records.merge``).
Nothing is enqueued: pulled changes are never echoed back to the server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ClockSkew, SyncPermanentError, SyncTransientError
from ..records.hlc import check_skew
from .backoff import BackoffPolicy
from .config import SyncConfig
from .protocol import SyncClient
from .quarantine import QUARANTINE_KEY, Quarantined, quarantined, screen, set_aside

if TYPE_CHECKING:
    from ..stores.shared import Core

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
    decode: Callable[[Sequence[dict[str, Any]]], Awaitable[tuple[list[dict[str, Any]], list[Quarantined]]]]
    | None = None,
) -> tuple[int, int, str | None]:
    """Pull until the feed has no more; returns (pages, changes, cursor).

    Transient failures are retried with backoff (``cfg.max_retries``), then
    raised; a 400 for a stored cursor means the server's feed was reset: the
    pull starts over from the beginning, once. Touched sessions are
    invalidated in the caches and reported to listeners as ``session-synced``.
    ``decode`` (end-to-end decryption) turns each page's changes into plain ones
    and quarantines those it cannot open; what it raises (no key for the space)
    stops the pull there. Then each change is checked: one that fails, or whose
    HLC is past the clock-skew bound, is quarantined (``chatmem.sync.quarantine``)
    in the same transaction as the cursor, never applied, and the pull moves on;
    a good version of a quarantined record takes it out of the quarantine.
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
        bad: list[Quarantined] = []
        if decode is not None:
            changes, bad = await decode(changes)
        changes, invalid = screen(changes, core.limits)
        bad += invalid
        bad += [
            quarantined(
                m.get("change"),
                "unknown-type" if m.get("kind") == "unknown-type" else "malformed",
                str(m.get("reason")),
            )
            for m in page.malformed
        ]
        changes = _within_skew(changes, bad, core.now(), core.limits.max_clock_skew_ms)
        if hlc is not None:
            for c in changes:
                try:
                    hlc.update(str(c["hlc"]))
                except ClockSkew as e:  # within the bound a moment ago: applied, the clock stays
                    log.warning("pulled change %s %s: %s", c["resource"], c["id"], e)
        kv: dict[str, Any] = {CURSOR_KEY: page.cursor}
        stored_quarantine = await store.kv_get(QUARANTINE_KEY)
        quarantine = set_aside(stored_quarantine, bad, core.now(), cursor, changes)
        if quarantine is not None:
            kv[QUARANTINE_KEY] = quarantine
        if bad:
            log.warning("pull: %d record(s) quarantined: %s", len(bad), bad[0]["reason"])
        touched = await store.apply_changes(changes, kv)
        for sid in touched:
            core.invalidate(sid)
            core.changed("session-synced", sid, None)
        if any(c["resource"] == "fact" for c in changes):
            core.changed("facts-synced", "", None)
        pages += 1
        n += len(changes)
        cursor = page.cursor
        if not page.more:
            break
    return pages, n, cursor


def _within_skew(
    changes: list[dict[str, Any]], bad: list[Quarantined], now_ms: int, max_skew_ms: int
) -> list[dict[str, Any]]:
    """``changes`` but those whose HLC is more than ``max_skew_ms`` ahead of this clock,
    which go to ``bad``: applied, such a record would win every later write."""
    kept = []
    for c in changes:
        try:
            check_skew(c["hlc"], now_ms, max_skew_ms)
        except ClockSkew as e:
            bad.append(quarantined(c, "clock-skew", str(e), "hlc"))
            continue
        kept.append(c)
    return kept
