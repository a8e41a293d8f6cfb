"""The token-budgeted window: property tests of its guarantees, and exact cases."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatmem.context.summaries import SUMMARY_PREFIX
from chatmem.context.tokens import EstimateTokenizer
from chatmem.context.window import PRESETS, ModelBudget, fit_window, preset, tool_call_ids
from chatmem.errors import ContextOverflow, ValidationError
from chatmem.records.models import ChatMessage, estimate_tokens

TK = EstimateTokenizer()


class Builder:
    """Builds one session's ChatMessages with dense seq and stored token counts."""

    def __init__(self) -> None:
        self.msgs: list[ChatMessage] = []

    def add(self, role: str, text: str, **kw: Any) -> ChatMessage:
        i = len(self.msgs)
        kw.setdefault("token_count", estimate_tokens(text))
        m = ChatMessage(id=f"m{i}", session_id="s", seq=i, role=role, content=text, created_at=1000 + i, **kw)  # type: ignore[arg-type]
        self.msgs.append(m)
        return m

    def tool_turn(
        self, n_calls: int, result_len: int, *, answered: int | None = None, slices: bool = False
    ) -> None:
        i = len(self.msgs)
        ids = [f"call{i}_{k}" for k in range(n_calls)]
        if slices:
            self.add(
                "assistant",
                "",
                slices=[
                    {"type": "tool-call", "toolCall": {"toolCallId": c, "toolName": "f", "args": "{}"}}
                    for c in ids
                ],
            )
        else:
            self.add(
                "assistant",
                "",
                tool_calls=[
                    {"id": c, "type": "function", "function": {"name": "f", "arguments": "{}"}} for c in ids
                ],
            )
        for c in ids[: answered if answered is not None else n_calls]:
            self.add("tool", "r" * result_len, tool_call_id=c)


# ------------------------------------------------------------------ invariant checks


def _owner(msgs: list[ChatMessage]) -> dict[int, int]:
    """tool message index -> index of the assistant message that called it."""
    owner: dict[int, int] = {}
    for i, m in enumerate(msgs):
        if m.role == "tool":
            for j in range(i - 1, -1, -1):
                calls = tool_call_ids(msgs[j])
                if calls is not None and (m.tool_call_id is None or m.tool_call_id in calls):
                    owner[i] = j
                    break
    return owner


def check_invariants(
    res, msgs: list[ChatMessage], system: str, budget: int, retrieved: list[ChatMessage]
) -> None:
    # never over budget, and the reported total is the real total
    assert res.tokens <= budget
    assert res.tokens == sum(TK.count_message(m) for m in res.messages)
    # system prompt kept, first
    assert res.messages[0] == {"role": "system", "content": system}
    # newest user message kept
    users = [m for m in msgs if m.role == "user"]
    if users:
        assert users[-1].id in res.kept_ids
    # order preserved; recent part is the kept messages in seq order, at the end
    index = {m.id: i for i, m in enumerate(msgs)}
    kept_idx = [index[k] for k in res.kept_ids]
    assert kept_idx == sorted(kept_idx)
    tail = res.messages[len(res.messages) - len(kept_idx) :] if kept_idx else []
    assert tail == [msgs[i].to_provider() for i in kept_idx]
    # tool pairs intact among recent messages
    owner = _owner(msgs)
    kept = set(kept_idx)
    for t, a in owner.items():
        assert (t in kept) == (a in kept), f"tool {t} separated from its call {a}"
    for i in kept:
        if msgs[i].role == "tool":
            assert i in owner, "orphan tool message sent"
    # recent history is a contiguous tail of non-tool messages (plus the newest user message)
    rest = kept - ({index[users[-1].id]} if users else set())
    if rest:
        lo = min(rest)
        for i in range(lo, len(msgs)):
            if msgs[i].role != "tool":
                assert i in kept
    # a message is sent once
    assert not set(res.retrieved_ids) & set(res.kept_ids)
    rindex = {m.id: i for i, m in enumerate(retrieved)}
    sent = [rindex[r] for r in res.retrieved_ids]
    assert sent == sorted(sent)
    # tool pairs intact among retrieved messages too
    rowner = _owner(retrieved)
    sent_set = set(sent)
    for t, a in rowner.items():
        assert (t in sent_set) == (a in sent_set), f"retrieved tool {t} separated from its call {a}"
    for i in sent_set:
        if retrieved[i].role == "tool":
            assert i in rowner, "orphan retrieved tool message sent"


@st.composite
def sessions(draw) -> list[ChatMessage]:
    b = Builder()
    n = draw(st.integers(0, 40))
    for _ in range(n):
        kind = draw(st.sampled_from(["user", "user", "assistant", "tools", "system", "orphan"]))
        size = draw(st.integers(0, 300))
        if kind == "tools":
            b.tool_turn(
                draw(st.integers(1, 3)),
                draw(st.integers(0, 200)),
                answered=draw(st.none() | st.integers(0, 3)),
                slices=draw(st.booleans()),
            )
        elif kind == "orphan":
            b.add("tool", "x" * size, tool_call_id=draw(st.sampled_from(["nope", None])))
        else:
            b.add(kind, "w" * size)
    return b.msgs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    msgs=sessions(),
    max_tokens=st.integers(1, 3000),
    reserve_frac=st.floats(0, 0.9),
    system=st.text(max_size=200),
    ctx_len=st.none() | st.integers(0, 400),
    summary_len=st.none() | st.integers(1, 400),
    data=st.data(),
)
def test_window_guarantees_hold_for_random_sessions(
    msgs, max_tokens, reserve_frac, system, ctx_len, summary_len, data
):
    """Random sessions with tool calls and random budgets: never over budget, system and
    newest user kept, tool pairs intact, order preserved, nothing sent twice."""
    reserve = min(max_tokens - 1, int(max_tokens * reserve_frac))
    budget = max_tokens - reserve
    ctx = (
        {"role": "user", "content": [{"type": "text", "text": "c" * ctx_len}]}
        if ctx_len is not None
        else None
    )
    summary = "s" * summary_len if summary_len else None
    retrieved = (
        data.draw(st.lists(st.sampled_from(msgs), unique_by=lambda m: m.id, max_size=6)) if msgs else []
    )
    retrieved.sort(key=lambda m: m.seq)
    users = [m for m in msgs if m.role == "user"]
    mandatory = TK.count_message({"role": "system", "content": system}) + (
        TK.count_message(users[-1]) if users else 0
    )
    if mandatory > budget:
        with pytest.raises(ContextOverflow) as e:
            fit_window(system, ctx, summary, retrieved, msgs, max_tokens=max_tokens, reserve_tokens=reserve)
        assert e.value.needed == mandatory and e.value.budget == budget
        return
    res = fit_window(system, ctx, summary, retrieved, msgs, max_tokens=max_tokens, reserve_tokens=reserve)
    check_invariants(res, msgs, system, budget, retrieved)
    # the parts come in the original's order
    pos = 1
    if ctx is not None and "context" not in res.dropped_parts:
        assert res.messages[pos] == ctx
        pos += 1
    if summary and "summary" not in res.dropped_parts:
        assert res.messages[pos] == {"role": "system", "content": SUMMARY_PREFIX + summary}


@settings(max_examples=100, deadline=None)
@given(msgs=sessions(), max_tokens=st.integers(200, 3000))
def test_records_and_chat_messages_give_the_same_window(msgs, max_tokens):
    """Stored records and ChatMessage objects are windowed identically."""
    if not any(m.role == "user" for m in msgs):
        msgs = msgs + [
            ChatMessage(
                id="u", session_id="s", seq=len(msgs), role="user", content="hi", created_at=0, token_count=1
            )
        ]
    a = fit_window("sys", None, None, None, msgs, max_tokens=max_tokens)
    b = fit_window("sys", None, None, None, [m.to_record() for m in msgs], max_tokens=max_tokens)
    assert a.messages == b.messages and a.kept_ids == b.kept_ids and a.tokens == b.tokens


# ------------------------------------------------------------------ exact cases


def test_keeps_newest_messages_that_fit_like_the_original():
    """Walking newest to oldest, the first message that does not fit ends the window."""
    b = Builder()
    for i in range(6):
        b.add("user" if i % 2 == 0 else "assistant", "x" * 40)  # 10 + 4 tokens each
    # system "S" costs 1 + 4 = 5; budget 50 leaves 45 = three messages of 14
    res = fit_window("S", None, None, None, b.msgs, max_tokens=50)
    assert res.kept_ids == ["m3", "m4", "m5"]
    assert res.tokens == 5 + 3 * 14 and res.budget == 50
    assert res.dropped_ids == ["m0", "m1", "m2"] and res.dropped_count == 3
    assert res.parts == {"system": 5, "context": 0, "summary": 0, "retrieved": 0, "recent": 42}


def test_reserve_tokens_come_off_the_budget():
    """reserve_tokens is subtracted from max_tokens before fitting."""
    b = Builder()
    for i in range(6):
        b.add("user" if i % 2 == 0 else "assistant", "x" * 40)
    res = fit_window("S", None, None, None, b.msgs, max_tokens=60, reserve_tokens=10)
    assert res.budget == 50 and res.kept_ids == ["m3", "m4", "m5"]


def test_overflow_when_system_and_newest_user_cannot_fit():
    """ContextOverflow (a ValidationError) says what was needed and what the budget was."""
    b = Builder()
    b.add("user", "x" * 400)  # 100 + 4
    with pytest.raises(ContextOverflow) as e:
        fit_window("S", None, None, None, b.msgs, max_tokens=100)
    assert isinstance(e.value, ValidationError)
    assert (e.value.needed, e.value.budget) == (109, 100)
    assert "109" in str(e.value) and "100" in str(e.value)


def test_tool_group_is_kept_or_dropped_whole():
    """An assistant tool call and its results are both in or both out."""
    b = Builder()
    b.add("user", "q")  # 5
    b.tool_turn(2, 40)  # assistant (overhead + its tool_calls JSON) + 2 results of 14
    b.add("assistant", "done")  # 5
    group = sum(TK.count_message(m) for m in b.msgs[1:4])
    assert group > 2 * 14 + 4  # the tool calls themselves are counted
    tight = fit_window(None, None, None, None, b.msgs, max_tokens=5 + 5 + group - 1)
    assert tight.kept_ids == ["m0", "m4"]
    roomy = fit_window(None, None, None, None, b.msgs, max_tokens=5 + 5 + group)
    assert roomy.kept_ids == ["m0", "m1", "m2", "m3", "m4"]
    assert roomy.messages[1]["tool_calls"][0]["id"] == "call1_0"
    assert roomy.messages[2] == {"role": "tool", "content": "r" * 40, "tool_call_id": "call1_0"}


def test_slices_tool_calls_are_grouped_too():
    """AIRI-style tool-call slices bind tool results like tool_calls do."""
    b = Builder()
    b.add("user", "q")
    b.tool_turn(1, 400, slices=True)  # results cost 104
    res = fit_window(None, None, None, None, b.msgs, max_tokens=60)
    assert res.kept_ids == ["m0"]


def test_newest_user_message_kept_even_when_newer_group_does_not_fit():
    """The newest user message survives although the walk stopped after it."""
    b = Builder()
    b.add("user", "old question")
    b.add("assistant", "old answer")
    b.add("user", "new question")  # m2
    b.tool_turn(1, 800)  # m3, m4: far too big
    res = fit_window("S", None, None, None, b.msgs, max_tokens=100)
    assert res.kept_ids == ["m2"]
    assert res.messages == [{"role": "system", "content": "S"}, {"role": "user", "content": "new question"}]


def test_orphan_tool_results_are_never_sent():
    """A tool message whose call is not in the input is left out."""
    b = Builder()
    b.add("tool", "result of a call we no longer have", tool_call_id="gone")
    b.add("user", "hi")
    res = fit_window("S", None, None, None, b.msgs, max_tokens=1000)
    assert res.kept_ids == ["m1"] and res.dropped_ids == ["m0"]


def test_optional_parts_dropped_in_documented_order():
    """Budget goes to context, then summary, then retrieved; a part that does not fit is dropped
    and a later, smaller part may still use what is left."""
    b = Builder()
    b.add("user", "x" * 40)  # 14
    old = ChatMessage(
        id="r1", session_id="s0", seq=0, role="assistant", content="y" * 40, created_at=0, token_count=10
    )
    ctx = {"role": "user", "content": [{"type": "text", "text": "c" * 40}]}  # 14
    summary = "z" * 96  # prefix 31 chars + 96 = 127 chars -> 32 + 4 = 36
    args = ("S", ctx, summary, [old], b.msgs)
    full = fit_window(*args, max_tokens=5 + 14 + 14 + 36 + 14)
    assert full.dropped_parts == [] and full.retrieved_ids == ["r1"]
    assert [m["role"] for m in full.messages] == ["system", "user", "system", "assistant", "user"]
    no_ret = fit_window(*args, max_tokens=5 + 14 + 14 + 36)
    assert no_ret.dropped_parts == ["retrieved"] and no_ret.dropped_retrieved_ids == ["r1"]
    no_sum = fit_window(*args, max_tokens=5 + 14 + 14 + 20)
    assert no_sum.dropped_parts == ["summary"]  # the smaller retrieved part still fits after it
    assert no_sum.messages == [
        {"role": "system", "content": "S"},
        ctx,
        {"role": "assistant", "content": "y" * 40},
        {"role": "user", "content": "x" * 40},
    ]
    bare = fit_window(*args, max_tokens=5 + 14 + 13)
    assert bare.dropped_parts == ["context", "summary", "retrieved"]
    assert len(bare.messages) == 2


def test_retrieved_message_already_recent_is_sent_once():
    """A retrieved message inside the recent tail is not duplicated; its tokens go to recent."""
    b = Builder()
    for i in range(4):
        b.add("user" if i % 2 == 0 else "assistant", "x" * 40)
    res = fit_window(None, None, None, [b.msgs[2]], b.msgs, max_tokens=14 * 3)
    assert res.retrieved_ids == [] and res.dropped_retrieved_ids == ["m2"]
    assert res.kept_ids == ["m1", "m2", "m3"]


def test_retrieved_max_tokens_caps_retrieved():
    """retrieved_max_tokens bounds the retrieved part; recent fills the rest."""
    b = Builder()
    b.add("user", "x" * 40)
    olds = [
        ChatMessage(
            id=f"r{i}", session_id="o", seq=i, role="user", content="y" * 40, created_at=0, token_count=10
        )
        for i in range(3)
    ]
    res = fit_window(None, None, None, olds, b.msgs, max_tokens=1000, retrieved_max_tokens=28)
    assert res.retrieved_ids == ["r0", "r1"] and res.dropped_retrieved_ids == ["r2"]


def test_stored_summary_message_reports_its_coverage():
    """A stored summary message is sent as is and its id and coverage are reported."""
    b = Builder()
    b.add("user", "hi")
    sm = ChatMessage(
        id="sum1",
        session_id="s",
        seq=99,
        role="system",
        content=SUMMARY_PREFIX + "they met",
        created_at=0,
        token_count=estimate_tokens(SUMMARY_PREFIX + "they met"),
        metadata={"summary": True, "summaryOf": {"fromSeq": 0, "toSeq": 40, "count": 41}},
    )
    res = fit_window("S", None, sm, None, b.msgs, max_tokens=1000)
    assert res.messages[1] == {"role": "system", "content": SUMMARY_PREFIX + "they met"}
    assert res.summary_id == "sum1" and res.summary_covers == {"fromSeq": 0, "toSeq": 40, "count": 41}


def test_default_tokenizer_uses_stored_counts_and_others_recount():
    """The default tokenizer trusts stored token_count; a different tokenizer recounts."""
    b = Builder()
    b.add("user", "short", token_count=500)
    with pytest.raises(ContextOverflow):
        fit_window(None, None, None, None, b.msgs, max_tokens=100)
    res = fit_window(
        None, None, None, None, b.msgs, max_tokens=100, tokenizer=EstimateTokenizer(trust_stored=False)
    )
    assert res.tokens == 4 + 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_tokens": 0},
        {"max_tokens": 10, "reserve_tokens": 10},
        {"max_tokens": 10, "reserve_tokens": -1},
        {"max_tokens": True},
        {"max_tokens": 10, "retrieved_max_tokens": -5},
    ],
)
def test_bad_budgets_are_refused(kwargs):
    """Budgets that leave no room, or are not ints, raise ValidationError."""
    with pytest.raises(ValidationError):
        fit_window("S", None, None, None, [], **kwargs)


def test_presets_are_the_original_defaults():
    """GPT-4o 120k/8k, Claude 3.5 180k/20k, local 4k and 8k exist as presets."""
    assert PRESETS["gpt-4o"] == ModelBudget("gpt-4o", 120_000, 8_000)
    assert PRESETS["claude-3.5"] == ModelBudget("claude-3.5", 180_000, 20_000)
    assert preset("local-4k").max_tokens == 4_096 and preset("local-8k").max_tokens == 8_192
    assert all(0 < p.budget < p.max_tokens for p in PRESETS.values())
    with pytest.raises(ValidationError):
        preset("gpt-9")


def test_ten_thousand_messages_under_an_8k_budget_is_fast():
    """A 10,000-message session windows into 8k in well under 10 ms (best of 5)."""
    b = Builder()
    for i in range(10_000):
        if i % 10 == 5:
            b.tool_turn(1, 60)
        else:
            b.add("user" if i % 2 == 0 else "assistant", f"message {i} " * (1 + i % 9))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        res = fit_window("You are helpful.", None, None, None, b.msgs, max_tokens=8192)
        best = min(best, time.perf_counter() - t0)
    assert res.tokens <= 8192 and res.dropped_count > 9000
    assert best < 0.010, f"best of 5 took {best * 1000:.2f} ms"


def test_public_names_exist():
    """Every name in chatmem.context.window.__all__ is defined (the export list cannot rot)."""
    import chatmem.context.window as mod

    assert mod.__all__ and all(hasattr(mod, name) for name in mod.__all__)
