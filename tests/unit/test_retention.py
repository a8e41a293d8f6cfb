"""Retention planners: session archive/delete/limit with an injected clock, pinned exempt,
exact plans; message-level summarize-and-archive plans that the window then uses."""

from __future__ import annotations

from typing import Any

import pytest

from chatmem.context.summaries import (
    SUMMARY_PREFIX,
    ExtractiveSummarizer,
    MessagePlan,
    MessageRetentionPolicy,
    plan_message_retention,
    summary_message_fields,
)
from chatmem.context.window import fit_window
from chatmem.conversations.retention import (
    DAY_MS,
    RetentionPlan,
    RetentionPolicy,
    RetentionReport,
    plan_retention,
)
from chatmem.errors import ValidationError
from chatmem.records.models import ChatMessage, SessionMeta, estimate_tokens

NOW = 1_000 * DAY_MS


def sess(
    sid: str, *, updated_days_ago: float, created_days_ago: float | None = None, **kw: Any
) -> SessionMeta:
    created = created_days_ago if created_days_ago is not None else updated_days_ago
    return SessionMeta(
        session_id=sid,
        title=sid,
        created_at=int(NOW - created * DAY_MS),
        updated_at=int(NOW - updated_days_ago * DAY_MS),
        **kw,
    )


def test_defaults_are_the_originals():
    """1000 sessions, 90 days max age, archive after 30 days, archived kept; message policy 200/50."""
    p = RetentionPolicy()
    assert (p.max_sessions, p.max_age, p.archive_after, p.delete_archived) == (
        1000,
        90 * DAY_MS,
        30 * DAY_MS,
        False,
    )
    m = MessageRetentionPolicy()
    assert (m.keep_system_messages, m.max_messages_per_session, m.summarize_old, m.summary_threshold) == (
        True,
        200,
        True,
        50,
    )


def test_archives_inactive_sessions_but_not_pinned_or_already_archived():
    """Sessions inactive beyond archive_after are archived; pinned and archived ones are left alone."""
    sessions = [
        sess("fresh", updated_days_ago=1),
        sess("stale", updated_days_ago=31),
        sess("edge", updated_days_ago=30),  # exactly archive_after: not "more than"
        sess("pinned", updated_days_ago=400, pinned=True),
        sess("done", updated_days_ago=50, archived=True),
    ]
    assert plan_retention(sessions, RetentionPolicy(), NOW) == RetentionPlan(archive=["stale"], delete=[])


def test_deletes_old_archived_sessions_by_creation_time_when_asked():
    """With delete_archived, archived sessions created before max_age go; a stale one too, deleted not archived."""
    sessions = [
        sess("old-archived", updated_days_ago=10, created_days_ago=100, archived=True),
        sess("young-archived", updated_days_ago=10, created_days_ago=80, archived=True),
        sess("old-active", updated_days_ago=95, created_days_ago=95),
        sess("old-pinned", updated_days_ago=200, created_days_ago=200, archived=True, pinned=True),
    ]
    keep = plan_retention(sessions, RetentionPolicy(), NOW)
    assert keep == RetentionPlan(archive=["old-active"], delete=[])
    purge = plan_retention(sessions, RetentionPolicy(delete_archived=True), NOW)
    assert purge == RetentionPlan(archive=[], delete=["old-archived", "old-active"])


def test_limits_active_sessions_archiving_least_recently_updated():
    """Beyond max_sessions, the least recently updated unpinned sessions are archived; pinned take slots."""
    sessions = [sess(f"s{i}", updated_days_ago=i) for i in range(6)] + [
        sess("pin", updated_days_ago=20, pinned=True)
    ]
    plan = plan_retention(sessions, RetentionPolicy(max_sessions=4), NOW)
    assert plan == RetentionPlan(archive=["s3", "s4", "s5"], delete=[])
    assert plan_retention(sessions, RetentionPolicy(max_sessions=7), NOW) == RetentionPlan()


def test_zero_is_no_limit_in_every_bound():
    """max_sessions=0, archive_after=0 and max_age=0 each mean no limit, as the server's flags
    do: nothing is archived or deleted by that step (before, 0 archived every session)."""
    sessions = [sess(f"s{i}", updated_days_ago=400 + i, created_days_ago=900) for i in range(5)]
    assert plan_retention(sessions, RetentionPolicy(max_sessions=0, archive_after=0), NOW) == RetentionPlan()
    archived = [sess(f"a{i}", updated_days_ago=400, created_days_ago=900, archived=True) for i in range(3)]
    assert plan_retention(archived, RetentionPolicy(max_age=0, delete_archived=True), NOW) == RetentionPlan()
    # one bound at 0, the others still apply
    plan = plan_retention(sessions, RetentionPolicy(max_sessions=0, archive_after=500 * DAY_MS), NOW)
    assert plan == RetentionPlan()
    plan = plan_retention(sessions, RetentionPolicy(max_sessions=2, archive_after=0), NOW)
    assert plan == RetentionPlan(archive=["s2", "s3", "s4"], delete=[])


def test_limit_ties_are_broken_by_id_and_records_are_accepted():
    """Equal updated_at are ordered by id; stored records work like SessionMeta."""
    sessions = [sess(s, updated_days_ago=1).to_record() for s in ("c", "a", "b")]
    assert plan_retention(sessions, RetentionPolicy(max_sessions=1), NOW).archive == ["b", "c"]


def test_plan_is_a_fixed_point():
    """Applying a plan and planning again finds nothing more to do."""
    sessions = [sess(f"s{i}", updated_days_ago=i * 7, created_days_ago=i * 20) for i in range(12)]
    policy = RetentionPolicy(max_sessions=3, delete_archived=True)
    plan = plan_retention(sessions, policy, NOW)
    assert plan
    after = []
    for s in sessions:
        if s.session_id in plan.delete:
            continue
        if s.session_id in plan.archive:
            s = SessionMeta.from_record({**s.to_record(), "archived": True})
        after.append(s)
    assert not plan_retention(after, policy, NOW)


def test_report_shape():
    """A report lists archived and deleted ids and says whether it was a dry run."""
    r = RetentionReport(archived=["a"], deleted=["b"], dry_run=True)
    assert (r.archived, r.deleted, r.dry_run) == (["a"], ["b"], True)
    assert RetentionReport() == RetentionReport([], [], False)


@pytest.mark.parametrize(
    "kwargs",
    [{"max_sessions": -1}, {"max_age": 1.5}, {"archive_after": "30d"}, {"delete_archived": 1}],
)
def test_bad_policies_are_refused(kwargs):
    """Negative, non-int durations and non-bool flags raise ValidationError."""
    with pytest.raises(ValidationError):
        RetentionPolicy(**kwargs)


def test_plan_needs_a_policy_and_a_time():
    """A missing policy or a bad clock value is refused before planning."""
    with pytest.raises(ValidationError):
        plan_retention([], {"max_sessions": 1}, NOW)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        plan_retention([], RetentionPolicy(), -1)


# ------------------------------------------------------------------ message level


def convo(n: int, *, system: bool = True) -> list[ChatMessage]:
    out = []
    if system:
        out.append(
            ChatMessage(id="sys", session_id="s", seq=0, role="system", content="You are kind.", created_at=0)
        )
    for i in range(len(out), len(out) + n):
        role = "user" if i % 2 else "assistant"
        text = f"Message {i}: the user talks about topic {i % 5}."
        out.append(
            ChatMessage(
                id=f"m{i}",
                session_id="s",
                seq=i,
                role=role,
                content=text,
                created_at=i,
                token_count=estimate_tokens(text),
            )
        )
    return out


def test_nothing_to_do_under_the_threshold():
    """At or under summary_threshold conversation messages, the plan is empty."""
    plan = plan_message_retention(convo(50), MessageRetentionPolicy())
    assert not plan and plan.summarize == [] and len(plan.keep) == 51


def test_summarizes_older_messages_keeping_system_and_newest_threshold():
    """Beyond the threshold, older conversation is summarized and archived; system and the newest N stay."""
    msgs = convo(60)
    plan = plan_message_retention(msgs, MessageRetentionPolicy(summary_threshold=50))
    assert plan.summarize == [f"m{i}" for i in range(1, 11)]
    assert plan.remove == plan.summarize and plan.action == "archive"
    assert plan.covers == {"fromSeq": 1, "toSeq": 10, "count": 10}
    assert plan.keep == ["sys"] + [f"m{i}" for i in range(11, 61)]
    assert plan.previous_summary_id is None


def test_system_messages_summarized_when_not_kept_and_delete_action():
    """keep_system_messages=False lets later system messages be summarized, never the system prompt
    at seq 0; archive_originals=False deletes."""
    msgs = convo(4)
    msgs[1] = ChatMessage(id="note", session_id="s", seq=1, role="system", content="Be brief.", created_at=1)
    plan = plan_message_retention(
        msgs, MessageRetentionPolicy(keep_system_messages=False, summary_threshold=2, archive_originals=False)
    )
    assert plan.summarize == ["note", "m2"] and plan.action == "delete"
    assert "sys" in plan.keep and "sys" not in plan.remove


def test_cap_without_summaries_removes_oldest():
    """summarize_old=False: messages beyond max_messages_per_session are removed, not summarized."""
    plan = plan_message_retention(
        convo(10), MessageRetentionPolicy(summarize_old=False, max_messages_per_session=4)
    )
    assert plan.summarize == [] and plan.covers is None
    assert plan.remove == [f"m{i}" for i in range(1, 7)]
    assert plan.keep == ["sys", "m7", "m8", "m9", "m10"]


def test_cap_bounds_the_threshold():
    """With a cap below the threshold, only the cap's worth of recent messages stays."""
    plan = plan_message_retention(
        convo(10), MessageRetentionPolicy(max_messages_per_session=3, summary_threshold=5)
    )
    assert plan.keep == ["sys", "m8", "m9", "m10"]


def test_cut_never_orphans_tool_results():
    """Tool results whose call falls in the summarized part are summarized with it."""
    msgs = convo(4, system=False)  # m0..m3
    call = ChatMessage(
        id="call",
        session_id="s",
        seq=4,
        role="assistant",
        content="",
        created_at=4,
        tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    )
    res = ChatMessage(
        id="res", session_id="s", seq=5, role="tool", content="42", created_at=5, tool_call_id="c1"
    )
    last = ChatMessage(id="last", session_id="s", seq=6, role="user", content="thanks", created_at=6)
    plan = plan_message_retention(msgs + [call, res, last], MessageRetentionPolicy(summary_threshold=2))
    assert plan.summarize == ["m0", "m1", "m2", "m3", "call", "res"]
    assert plan.keep == ["last"]


def test_incremental_plan_folds_the_previous_summary():
    """A second run folds the newest stored summary in and supersedes all older summaries."""
    msgs = convo(6)
    s1 = ChatMessage(
        id="s1",
        session_id="s",
        seq=7,
        role="system",
        content=SUMMARY_PREFIX + "a",
        created_at=7,
        metadata={"summary": True},
    )
    s2 = ChatMessage(
        id="s2",
        session_id="s",
        seq=8,
        role="system",
        content=SUMMARY_PREFIX + "b",
        created_at=8,
        metadata={"summary": True},
    )
    plan = plan_message_retention(msgs + [s1, s2], MessageRetentionPolicy(summary_threshold=4))
    assert plan.summarize == ["m1", "m2"]
    assert plan.previous_summary_id == "s2"
    assert plan.remove == ["m1", "m2", "s1", "s2"]
    assert plan.keep == ["sys", "m3", "m4", "m5", "m6"]


async def test_message_policy_summarizes_and_the_window_uses_the_summary():
    """End to end without a store: plan, summarize offline, store the summary message, window uses it."""
    msgs = convo(80)
    plan = plan_message_retention(msgs, MessageRetentionPolicy(summary_threshold=20))
    by_id = {m.id: m for m in msgs}
    text = await ExtractiveSummarizer(max_chars=400).summarize([by_id[i] for i in plan.summarize])
    fields = summary_message_fields(text, plan)
    assert fields["role"] == "system" and fields["content"] == SUMMARY_PREFIX + text
    assert fields["metadata"] == {
        "summary": True,
        "summaryOf": {"fromSeq": 1, "toSeq": 60, "count": 60, "ids": plan.summarize},
    }
    stored = ChatMessage(
        id="sum",
        session_id="s",
        seq=81,
        role="system",
        content=fields["content"],
        created_at=81,
        metadata=fields["metadata"],
        token_count=estimate_tokens(fields["content"]),
    )
    remaining = [by_id[i] for i in plan.keep]
    res = fit_window(
        "You are kind.", None, stored, None, [m for m in remaining if m.role != "system"], max_tokens=4096
    )
    assert res.messages[1] == {"role": "system", "content": SUMMARY_PREFIX + text}
    assert res.summary_id == "sum" and res.summary_covers["toSeq"] == 60
    assert res.kept_ids == [f"m{i}" for i in range(61, 81)]
    with pytest.raises(ValidationError):
        summary_message_fields("", plan)


def test_message_plan_default_is_empty():
    """An empty MessagePlan is falsy."""
    assert not MessagePlan()


def test_public_names_exist():
    """Every name in chatmem.conversations.retention.__all__ is defined (the export list cannot rot)."""
    import chatmem.conversations.retention as mod

    assert mod.__all__ and all(hasattr(mod, name) for name in mod.__all__)
