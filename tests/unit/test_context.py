"""Live context: strategies, caps, expiry, priority, providers and the injected text."""

from __future__ import annotations

import json
from datetime import timedelta, timezone

import pytest

from chatmem.context.providers import (
    ContextMessage,
    ContextUpdateStrategy,
    DatetimeProvider,
    LiveContext,
    ModuleStateProvider,
    UserProfileProvider,
    json_stringify,
    render_context_message,
)
from chatmem.errors import ValidationError

R = ContextUpdateStrategy.REPLACE_SELF
A = ContextUpdateStrategy.APPEND_SELF
T0 = 1_735_689_600_000


class FakeClock:
    def __init__(self, t: int = T0):
        self.t = t

    def __call__(self) -> int:
        return self.t


def test_strategy_values_match_the_original():
    """The enum values are the original's wire strings."""
    assert R.value == "replace-self" and A.value == "append-self"
    assert ContextMessage("s", "i", {}, "append-self").strategy is A


def test_replace_self_replaces_previous_context_of_the_source():
    """A replace-self message replaces what the source said before."""
    cm = LiveContext(FakeClock())
    cm.update(ContextMessage("module:discord", "d", {"channel": "a"}, R))
    cm.update(ContextMessage("module:discord", "d", {"channel": "b"}, R))
    assert cm.snapshot() == {"module:discord": {"channel": "b"}}


def test_append_self_appends_oldest_first_and_caps_per_source():
    """Append-self keeps a list, oldest first, at most append_cap entries per source."""
    cm = LiveContext(FakeClock(), append_cap=3)
    for i in range(5):
        cm.update(ContextMessage("sensor:chat", "c", {"n": i}, A))
    cm.update(ContextMessage("sensor:other", "o", {"n": 99}, A))
    snap = cm.snapshot()
    assert snap["sensor:chat"] == [{"n": 2}, {"n": 3}, {"n": 4}]
    assert snap["sensor:other"] == [{"n": 99}]


def test_replace_after_append_resets_the_list():
    """A replace-self update after appends leaves just its own content."""
    cm = LiveContext(FakeClock())
    cm.update(ContextMessage("k", "x", {"n": 1}, A))
    cm.update(ContextMessage("k", "x", {"n": 2}, A))
    cm.update(ContextMessage("k", "x", {"n": 3}, R))
    assert cm.snapshot() == {"k": {"n": 3}}


def test_expired_entries_are_dropped_with_injected_clock():
    """Entries disappear once the clock reaches expires_at; others stay."""
    clock = FakeClock()
    cm = LiveContext(clock)
    cm.update(ContextMessage("a", "1", {"v": 1}, R, expires_at=T0 + 1000))
    cm.update(ContextMessage("b", "1", {"v": 1}, A, expires_at=T0 + 500))
    cm.update(ContextMessage("b", "2", {"v": 2}, A))
    assert set(cm.snapshot()) == {"a", "b"}
    assert cm.snapshot(now=T0 + 500) == {"a": {"v": 1}, "b": [{"v": 2}]}
    clock.t = T0 + 1000
    assert cm.snapshot() == {"b": [{"v": 2}]}


def test_higher_priority_first_then_first_seen():
    """Snapshot keys are ordered by priority (highest first), ties by first appearance."""
    cm = LiveContext(FakeClock())
    cm.update(ContextMessage("low", "1", {}, R, priority=0))
    cm.update(ContextMessage("high", "1", {}, R, priority=5))
    cm.update(ContextMessage("mid1", "1", {}, R, priority=2))
    cm.update(ContextMessage("mid2", "1", {}, R, priority=2))
    assert list(cm.snapshot()) == ["high", "mid1", "mid2", "low"]


def test_remove_by_type_or_by_source_id():
    """remove() drops a whole source type, or only one emitter's entries."""
    cm = LiveContext(FakeClock())
    cm.update(ContextMessage("k", "x", {"n": 1}, A))
    cm.update(ContextMessage("k", "y", {"n": 2}, A))
    cm.update(ContextMessage("j", "z", {"n": 3}, R))
    assert cm.remove("k", "x") == 1
    assert cm.snapshot() == {"k": [{"n": 2}], "j": {"n": 3}}
    assert cm.remove("k") == 1
    assert cm.remove("missing") == 0
    assert cm.snapshot() == {"j": {"n": 3}}


def test_snapshot_is_a_copy():
    """Mutating a snapshot or the source dict does not change the live context."""
    cm = LiveContext(FakeClock())
    content = {"list": [1]}
    cm.update(ContextMessage("k", "x", content, R))
    content["list"].append(2)
    cm.snapshot()["k"]["list"].append(3)
    assert cm.snapshot() == {"k": {"list": [1]}}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"source_type": "", "source_id": "x", "content": {}},
        {"source_type": "k", "source_id": 1, "content": {}},
        {"source_type": "k", "source_id": "x", "content": []},
        {"source_type": "k", "source_id": "x", "content": {"f": float("nan")}},
        {"source_type": "k", "source_id": "x", "content": {"o": object()}},
        {"source_type": "k", "source_id": "x", "content": {}, "strategy": "merge"},
        {"source_type": "k", "source_id": "x", "content": {}, "priority": "1"},
        {"source_type": "k", "source_id": "x", "content": {}, "expires_at": 1.5},
    ],
)
def test_bad_context_messages_are_refused(kwargs):
    """Malformed context messages raise ValidationError on construction."""
    with pytest.raises(ValidationError):
        ContextMessage(**kwargs)


def test_injected_message_exact_text_matches_the_original():
    """The injected message is the original's: 'Module {key}: {JSON.stringify(value)}' lines."""
    snap = {
        "module:datetime": {
            "timestamp": 1735689600000,
            "formatted": "2026-03-04T18:00:00Z",
            "timezone": "UTC",
        },
        "module:discord": {"activeChannel": "general", "recentMentions": 3, "voiceConnected": False},
    }
    msg = render_context_message(snap)
    assert msg == {
        "role": "user",
        "content": [
            {
                "type": "text",
                "text": 'Module module:datetime: {"timestamp":1735689600000,"formatted":"2026-03-04T18:00:00Z","timezone":"UTC"}\n'
                'Module module:discord: {"activeChannel":"general","recentMentions":3,"voiceConnected":false}',
            }
        ],
    }
    assert render_context_message({}) is None


@pytest.mark.parametrize(
    "value, js",
    [
        (1.0, "1"),
        (0.1, "0.1"),
        (1e-7, "1e-7"),
        (0.000001, "0.000001"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (-2.5, "-2.5"),
        (float("inf"), "null"),
        ('é\u2028\x01"\\', '"é\u2028\\u0001\\"\\\\"'),
        ("\ud800", '"\\ud800"'),
        ({"b": 1, "10": 2, "2": 3, "a": None}, '{"2":3,"10":2,"b":1,"a":null}'),
        ([True, None, [], {}], "[true,null,[],{}]"),
    ],
)
def test_json_stringify_matches_javascript(value, js):
    """json_stringify prints what JavaScript's JSON.stringify prints."""
    assert json_stringify(value) == js


def test_json_stringify_agrees_with_json_for_plain_values():
    """For plain values the output parses back to the same data."""
    v = {"x": [1, 2.5, "ü"], "y": {"z": False}}
    assert json.loads(json_stringify(v)) == v


async def test_datetime_provider_content_as_in_the_original():
    """The datetime provider gives timestamp, ISO time (Z for UTC) and time zone."""
    p = DatetimeProvider(FakeClock(T0))
    msg = await p.provide()
    assert msg.source_type == "module:datetime" and msg.strategy is R
    assert msg.content == {"timestamp": T0, "formatted": "2025-01-01T00:00:00Z", "timezone": "UTC"}
    plus2 = DatetimeProvider(FakeClock(T0), tz=timezone(timedelta(hours=2), "X+2"))
    assert plus2.content(T0) == {"timestamp": T0, "formatted": "2025-01-01T02:00:00+02:00", "timezone": "X+2"}
    with pytest.raises(ValidationError):
        DatetimeProvider(FakeClock(), tz="Not/AZone")


async def test_refresh_applies_every_provider_and_reports_failures():
    """refresh() applies all providers; one that raises is reported, the rest still apply."""
    clock = FakeClock()
    cm = LiveContext(clock)
    profile = {"name": "Ada", "language": "en"}

    async def get_settings():
        return profile

    class Broken:
        async def provide(self):
            raise RuntimeError("sensor offline")

    state = ModuleStateProvider()
    broken = Broken()
    cm.register(DatetimeProvider(clock))
    cm.register(broken)
    cm.register(UserProfileProvider(get_settings))
    cm.register(state)
    state.set("module:discord", {"activeChannel": "general"}, priority=1)
    failures = await cm.refresh()
    assert [f.provider for f in failures] == [broken]
    assert isinstance(failures[0].error, RuntimeError)
    snap = cm.snapshot()
    assert list(snap) == ["module:discord", "module:datetime", "module:user-profile"]
    assert snap["module:user-profile"] == profile
    clock.t += 60_000
    state.clear("module:discord")
    profile.clear()
    again = await cm.refresh()
    assert [f.provider for f in again] == [broken]
    snap = cm.snapshot()
    assert list(snap) == ["module:datetime"]
    assert snap["module:datetime"]["timestamp"] == T0 + 60_000


async def test_provider_returning_garbage_is_reported():
    """A provider returning something that is not a ContextMessage is a reported failure."""
    cm = LiveContext(FakeClock())

    class Bad:
        async def provide(self):
            return [{"not": "a message"}]

    cm.register(Bad())
    failures = await cm.refresh()
    assert len(failures) == 1 and isinstance(failures[0].error, ValidationError)
    assert cm.snapshot() == {}


def test_register_requires_provide():
    """Registering an object without provide() is refused."""
    with pytest.raises(ValidationError):
        LiveContext(FakeClock()).register(object())  # type: ignore[arg-type]


def test_public_names_exist():
    """Every name in chatmem.context.providers.__all__ is defined (the export list cannot rot)."""
    import chatmem.context.providers as mod

    assert mod.__all__ and all(hasattr(mod, name) for name in mod.__all__)
