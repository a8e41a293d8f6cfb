"""Retention policies and their pure planners (the original's "Retention Policies").

Planning is pure: ``plan_retention`` and ``plan_message_retention`` (in
``chatmem.context.summaries``: the context builder reads the same plan to show a
summary in place of what it replaces) read the records they are given and say
what to do; ``Retention`` applies a plan to the
store (``mem.retention.apply`` / ``apply_messages``) and reports a
``RetentionReport``. Durations are milliseconds, as in the original.

Session retention, in the original's order, on the *effective* state (a
session archived by step 1 counts as archived in steps 2 and 3):

1. archive every unarchived session inactive for more than ``archive_after``
   (``now - updated_at > archive_after``);
2. if ``delete_archived``: delete every archived session created more than
   ``max_age`` ago (``now - created_at > max_age``);
3. keep at most ``max_sessions`` unarchived sessions: the most recently
   updated stay, the rest are archived.

0 in any of ``max_sessions``, ``max_age`` and ``archive_after`` means no limit
(as the sync server's flags do): that step does nothing.

Pinned sessions are never archived or deleted; they do count toward
``max_sessions`` (so unpinned sessions get ``max_sessions - pinned`` slots).
A session appears in at most one list of a plan (a session that step 1 would
archive and step 2 deletes is only deleted).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from ..context.summaries import (
    ExtractiveSummarizer,
    MessagePlan,
    MessageRetentionPolicy,
    Summarizer,
    plan_message_retention,
    summary_key,
    summary_message_fields,
    summary_text,
)
from ..errors import ValidationError
from ..records.models import ChatMessage, SessionMeta
from ..records.validation import check_nonneg_int

if TYPE_CHECKING:
    from ..records.ids import Clock
    from ..stores.base import Store
    from .messages import Messages
    from .sessions import Sessions

__all__ = [
    "DAY_MS",
    "RetentionPolicy",
    "RetentionPlan",
    "RetentionReport",
    "plan_retention",
    "Retention",
]

DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """The original's ``RetentionPolicy`` with its defaults; 0 in a bound is no limit."""

    max_sessions: int = 1000
    max_age: int = 90 * DAY_MS
    archive_after: int = 30 * DAY_MS
    delete_archived: bool = False

    def __post_init__(self) -> None:
        for name in ("max_sessions", "max_age", "archive_after"):
            check_nonneg_int(getattr(self, name), name)
        if not isinstance(self.delete_archived, bool):
            raise ValidationError("delete_archived must be a bool", field="delete_archived")


@dataclass(slots=True)
class RetentionPlan:
    """Session ids to archive and to delete, in the order the steps found them."""

    archive: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.archive or self.delete)


@dataclass(slots=True)
class RetentionReport:
    """What ``mem.retention.apply`` did (or, with ``dry_run``, would do)."""

    archived: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    dry_run: bool = False


def _meta(s: SessionMeta | Mapping[str, Any]) -> SessionMeta:
    if isinstance(s, SessionMeta):
        return s
    if isinstance(s, Mapping):
        return SessionMeta.from_record(s)
    raise ValidationError(
        f"expected a SessionMeta or a session record, got {type(s).__name__}", field="sessions"
    )


def plan_retention(
    sessions: Iterable[SessionMeta | Mapping[str, Any]], policy: RetentionPolicy, now: int
) -> RetentionPlan:
    """What ``policy`` does to ``sessions`` at time ``now`` (ms). Pure."""
    if not isinstance(policy, RetentionPolicy):
        raise ValidationError("policy must be a RetentionPolicy", field="policy")
    check_nonneg_int(now, "now")
    metas = [_meta(s) for s in sessions]
    archived = {m.session_id: m.archived for m in metas}
    plan = RetentionPlan()
    # 1. archive inactive
    for m in metas:
        if (
            policy.archive_after
            and not m.pinned
            and not archived[m.session_id]
            and now - m.updated_at > policy.archive_after
        ):
            archived[m.session_id] = True
            plan.archive.append(m.session_id)
    # 2. delete expired archived
    deleted: set[str] = set()
    if policy.delete_archived and policy.max_age:
        for m in metas:
            if not m.pinned and archived[m.session_id] and now - m.created_at > policy.max_age:
                deleted.add(m.session_id)
                plan.delete.append(m.session_id)
        plan.archive = [sid for sid in plan.archive if sid not in deleted]
    # 3. limit the number of active sessions
    active = [m for m in metas if not archived[m.session_id] and m.session_id not in deleted]
    if policy.max_sessions and len(active) > policy.max_sessions:
        slots = max(0, policy.max_sessions - sum(1 for m in active if m.pinned))
        unpinned = sorted((m for m in active if not m.pinned), key=lambda m: (-m.updated_at, m.session_id))
        plan.archive.extend(m.session_id for m in unpinned[slots:])
    return plan


# ---------------------------------------------------------------------------- applying plans


class Retention:
    """``mem.retention``: apply the policies to the store, on demand or on a schedule.

    Every archive, delete and summary is its own durable transaction (with its
    sync operation). ``dry_run`` plans and reports without writing anything.
    """

    def __init__(
        self,
        sessions: Sessions,
        messages: Messages,
        store: Store,
        clock: Clock,
        sleep: Callable[[float], Any] | None = None,
    ):
        self._sessions = sessions
        self._messages = messages
        self._store = store
        self._clock = clock
        self._sleep = sleep or asyncio.sleep
        self._task: asyncio.Task[None] | None = None
        self.last_report: RetentionReport | None = None
        self.last_error: BaseException | None = None

    async def plan(self, policy: RetentionPolicy | None = None, *, now: int | None = None) -> RetentionPlan:
        policy = policy or RetentionPolicy()
        metas = await self._sessions.list(limit=None, archived=None, pinned_first=False)
        return plan_retention(metas, policy, self._clock() if now is None else now)

    async def apply(
        self, policy: RetentionPolicy | None = None, *, dry_run: bool = False, now: int | None = None
    ) -> RetentionReport:
        """Archive and delete sessions as ``policy`` says (the original's defaults when None)."""
        if not isinstance(dry_run, bool):
            raise ValidationError("dry_run must be a bool", field="dry_run")
        plan = await self.plan(policy, now=now)
        if not dry_run:
            for sid in plan.archive:
                await self._sessions.archive(sid)
            for sid in plan.delete:
                await self._sessions.delete(sid, forget_facts=False)  # pruned, not forgotten
        report = RetentionReport(archived=list(plan.archive), deleted=list(plan.delete), dry_run=dry_run)
        self.last_report = report
        return report

    async def apply_messages(
        self,
        session_id: str,
        policy: MessageRetentionPolicy | None = None,
        *,
        summarizer: Summarizer | None = None,
        dry_run: bool = False,
    ) -> MessagePlan:
        """Summarize a session's older messages into one stored summary message.

        The summary is a ``system`` message marked ``metadata.summary`` and
        linked to the range it covers; the previous summary is folded in
        (incremental). Originals are then archived (copied into an archived
        session whose ``parent_id`` is this one) or deleted, as the policy says.
        """
        policy = policy or MessageRetentionPolicy()
        records = await self._messages.records(session_id, limit=None)
        plan = plan_message_retention(records, policy)
        if dry_run or not plan:
            return plan
        by_id = {r["id"]: ChatMessage.from_record(r) for r in records}
        if plan.summarize:
            prev = by_id.get(plan.previous_summary_id) if plan.previous_summary_id else None
            summarizer = summarizer or ExtractiveSummarizer()
            text = await summarizer.summarize(
                [by_id[i] for i in plan.summarize], previous_summary=summary_text(prev) if prev else None
            )
            fields = summary_message_fields(text, plan)
            msg = await self._messages.append(session_id, fields.pop("role"), fields.pop("content"), **fields)
            await self._store.kv_set(summary_key(session_id), msg.id)
        if plan.action == "archive":
            removed = [by_id[i] for i in plan.remove]
            if removed:
                await self._sessions.archive_copy(session_id, removed)
        await self._sessions.delete_messages(session_id, plan.remove, forget_facts=False)
        return plan

    async def delete_old_sessions(self, *, older_than: int, now: int | None = None) -> list[str]:
        """Delete unpinned sessions not updated for ``older_than`` ms (the original's quota remedy)."""
        check_nonneg_int(older_than, "older_than")
        now = self._clock() if now is None else now
        gone = []
        for m in await self._sessions.list(limit=None, archived=None, pinned_first=False):
            if not m.pinned and now - m.updated_at > older_than:
                await self._sessions.delete(m.session_id, forget_facts=False)
                gone.append(m.session_id)
        return gone

    # ------------------------------------------------------------------ schedule
    def schedule(
        self,
        policy: RetentionPolicy | None = None,
        *,
        interval: int = 3_600_000,
        sleep: Callable[[float], Any] | None = None,
    ) -> None:
        """Apply ``policy`` now and then every ``interval`` ms (the original: hourly) until ``stop()``."""
        check_nonneg_int(interval, "interval")
        self.stop()
        nap = sleep or self._sleep

        async def loop() -> None:
            while True:
                try:
                    await self.apply(policy)
                    self.last_error = None
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # keep running; the error is visible in last_error
                    self.last_error = e
                await nap(interval / 1000)

        self._task = asyncio.ensure_future(loop())

    @property
    def scheduled(self) -> bool:
        return self._task is not None and not self._task.done()

    def stop(self) -> None:
        """Turn the schedule off."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
