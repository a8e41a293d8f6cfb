"""The outbox side of a push, as plain functions over outbox records: which
operations go next (per-session FIFO, leases, due times), what a dead letter
holds, and how a failed attempt is recorded (backoff, or the dead-letter
store). ``Synchronizer`` drives them; nothing here talks HTTP.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import SyncError, SyncTransientError, ValidationError
from .backoff import BackoffPolicy
from .config import SyncConfig
from .status import SyncState
from .wire import WIRE_FIELDS, resolve

if TYPE_CHECKING:
    from ..stores.base import Store
    from .protocol import PushResponse

__all__ = [
    "WIRE_FIELDS",
    "LEASE_MARGIN_MS",
    "PushReport",
    "PullReport",
    "strip_lease",
    "select_batch",
    "resolve_batch",
    "dead_record",
    "op_ids",
    "record_failures",
    "apply_answer",
    "dead_letter_error",
]


log = logging.getLogger("chatmem.sync")

#: a lease outlives the request's timeout by this much (ms)
LEASE_MARGIN_MS = 5_000


@dataclass(frozen=True)
class PushReport:
    """What one push did: requests made, operations acknowledged, dead-lettered or left."""

    #: push requests made
    requests: int = 0
    #: operations the server acknowledged (applied or duplicate)
    acknowledged: int = 0
    #: operations moved to the dead-letter store
    dead_lettered: int = 0
    #: operations still in the outbox
    remaining: int = 0
    state: SyncState = "idle"
    #: False when another tab/synchronizer holds the drain lock (nothing was done here)
    drained: bool = True


@dataclass(frozen=True)
class PullReport:
    """What one pull did: pages and changes applied, the cursor reached, the state."""

    pages: int = 0
    changes: int = 0
    cursor: str | None = None
    state: SyncState = "idle"
    drained: bool = True


def strip_lease(op: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in op.items() if k not in ("lease_owner", "lease_until", "key")}


def select_batch(
    ops: list[dict[str, Any]], now: int, limit: int, *, owner: str, exclusive: bool
) -> tuple[list[dict[str, Any]], int | None]:
    """The next batch (per-session FIFO) and, if something waits, when it is due.

    ``owner`` is this drainer's lease name; with an ``exclusive`` lock the
    leases of others are stale (their drainer is gone) and are ignored.
    """
    blocked: set[str] = set()
    batch: list[dict[str, Any]] = []
    wake: int | None = None
    for op in ops:
        sid = str(op.get("session_id") or op.get("id"))
        if sid in blocked:
            continue
        lease_owner, until = op.get("lease_owner"), int(op.get("lease_until") or 0)
        if lease_owner not in (None, owner) and until > now and not exclusive:
            blocked.add(sid)
            wake = until if wake is None else min(wake, until)
            continue
        due = int(op.get("next_attempt_at") or 0)
        if due > now:
            blocked.add(sid)
            wake = due if wake is None else min(wake, due)
            continue
        batch.append(op)
        if len(batch) >= limit:
            break
    return batch, wake


async def resolve_batch(
    store: Store, batch: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(payload, the ops it carries): reads the messages the batch refers to
    (``chatmem.sync.wire``); a create whose message was deleted before it was
    pushed is acknowledged here, unsent (its delete follows in the outbox)."""
    payload, gone = await resolve(store, batch)
    if not gone:
        return payload, batch
    await store.outbox_ack([op["op_id"] for op in gone])
    dropped = {op["op_id"] for op in gone}
    return payload, [op for op in batch if op["op_id"] not in dropped]


def dead_record(
    op: Mapping[str, Any], reason: str, response: str | None, status: int | None, now: int
) -> dict[str, Any]:
    """The dead-letter record of ``op``: its fields plus why and when it failed for good."""
    return dict(strip_lease(op), reason=reason, response=response, status=status, failed_at=now)


async def record_failures(
    store: Store,
    ops: list[dict[str, Any]],
    err: SyncError,
    cfg: SyncConfig,
    policy: BackoffPolicy,
    now: int,
    rand: Callable[[], float],
) -> int:
    """Count a failed attempt on each op: schedule its retry, or dead-letter it. Returns how many died."""
    retry: list[dict[str, Any]] = []
    dead: list[dict[str, Any]] = []
    delays: dict[int, int] = {}
    for op in ops:
        attempts = int(op.get("attempts") or 0) + 1
        if attempts > cfg.max_retries:
            reason = f"gave up after {attempts} failed attempts: {err}"
            dead.append(
                dict(
                    dead_record(op, reason, err.response, err.status, now),
                    attempts=attempts,
                    last_error=str(err),
                )
            )
            continue
        # one draw per retry number: ops that failed together stay one batch (same due time)
        if attempts not in delays:
            delays[attempts] = policy.delay(attempts - 1, err.retry_after_ms, now, rand)
        retry.append(
            dict(
                strip_lease(op),
                attempts=attempts,
                next_attempt_at=now + delays[attempts],
                last_error=str(err),
            )
        )
    if retry:
        await store.outbox_update(retry)
    if dead:
        await store.outbox_to_dead(dead)
    log.info("sync push failed (%s): %d to retry, %d dead-lettered", err, len(retry), len(dead))
    return len(dead)


def op_ids(which: str | Iterable[str]) -> list[str] | None:
    """Dead-letter selection: one ``op_id``, several, or ``"all"`` (None)."""
    if which == "all":
        return None
    if isinstance(which, str):
        if not which:
            raise ValidationError("op_id must be a non-empty string or 'all'", field="op_id")
        return [which]
    ids = list(which)
    if not all(isinstance(i, str) and i for i in ids):
        raise ValidationError("op ids must be non-empty strings", field="op_id")
    return ids


async def apply_answer(
    store: Store,
    batch: list[dict[str, Any]],
    resp: PushResponse,
    cfg: SyncConfig,
    policy: BackoffPolicy,
    now: int,
    rand: Callable[[], float],
) -> tuple[int, int]:
    """Apply the server's per-operation answer to a pushed batch: acknowledged ops leave the
    outbox, rejected ones are dead-lettered, unmentioned ones count a failed attempt.
    Returns (acknowledged, dead-lettered)."""
    by_id = resp.by_op_id()
    ok = [r.op_id for r in resp.results if r.delivered]
    rejected = [
        dead_record(
            op,
            by_id[op["op_id"]].reason or "rejected by the server",
            json.dumps({"op_id": op["op_id"], "status": "rejected", "reason": by_id[op["op_id"]].reason}),
            200,
            now,
        )
        for op in batch
        if op["op_id"] in by_id and by_id[op["op_id"]].status == "rejected"
    ]
    if ok:
        await store.outbox_ack(ok)
    if rejected:
        await store.outbox_to_dead(rejected)
    dead = len(rejected)
    missing = [op for op in batch if op["op_id"] in set(resp.missing)]
    if missing:
        err = SyncTransientError("the server's answer did not mention these operations")
        dead += await record_failures(store, missing, err, cfg, policy, now, rand)
    return len(ok), dead


async def dead_letter_error(store: Store) -> str | None:
    """``last_error`` while dead letters wait for ``replay``/``discard`` (count and last reason), else None."""
    if not (await store.outbox_counts())[1]:
        return None
    letters = await store.dead_list()
    if not letters:
        return None
    last = max(letters, key=lambda d: int(d.get("failed_at") or 0))
    return f"{len(letters)} operation(s) dead-lettered; last: {last.get('reason')}"
