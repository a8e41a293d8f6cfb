"""The query index's lifecycle is one state value (``chatmem.index.lifecycle``): the
transitions written down are the ones taken, and a failed opening or derivation leaves
FAILED with nothing half made, so the next query opens again and answers in full."""

from __future__ import annotations

from typing import Any

import pytest

import chatmem
from chatmem.index.lifecycle import HOLDS_INDEX, TRANSITIONS, IndexState, check_transition
from chatmem.index.query_index import QueryIndex

S = IndexState


def test_every_state_has_its_transitions_and_a_way_out() -> None:
    assert set(TRANSITIONS) == set(IndexState)
    for state, after in TRANSITIONS.items():
        assert S.CLOSED in after, state
    check_transition(S.UNOPENED, S.OPENING)
    check_transition(S.READY, S.READY)
    with pytest.raises(RuntimeError, match="from ready to unopened"):
        check_transition(S.READY, S.UNOPENED)
    with pytest.raises(RuntimeError):
        check_transition(S.FAILED, S.READY)  # only through an opening
    assert HOLDS_INDEX == {S.DERIVING, S.CATCHING_UP, S.READY}


async def _seeded() -> Any:
    mem = await chatmem.open()
    s = await mem.sessions.create(title="Trip")
    await mem.messages.append(s.session_id, "user", "We fly to Lisbon in May.")
    return mem, s.session_id


async def test_a_memory_goes_from_unopened_to_ready_to_closed() -> None:
    mem, sid = await _seeded()
    assert mem.index.state is S.UNOPENED and mem.index.query_index is None
    assert [h.message.text for h in await mem.search("lisbon")] == ["We fly to Lisbon in May."]
    assert mem.index.state is S.READY and mem.index.status()["state"] == "ready"
    await mem.messages.append(sid, "user", "Lisbon again.")  # queued: still ready
    assert mem.index.state is S.READY
    assert len(await mem.search("lisbon")) == 2
    await mem.close()
    assert mem.index.state is S.CLOSED and mem.index.query_index is None


async def test_a_failed_engine_opening_is_tried_again() -> None:
    mem, _ = await _seeded()
    real, calls = mem.index._factory, []

    async def flaky() -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("the engine is not there yet")
        return await real()

    mem.index._factory = flaky
    with pytest.raises(OSError):
        await mem.search("lisbon")
    assert mem.index.state is S.FAILED and mem.index.query_index is None
    assert len(await mem.search("lisbon")) == 1
    assert mem.index.state is S.READY and len(calls) == 2
    await mem.close()


async def test_a_derivation_that_fails_halfway_leaves_nothing_half_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mem, sid = await _seeded()
    real = QueryIndex.rebuild
    failed: list[QueryIndex] = []

    async def breaks_once(self: QueryIndex, sessions: Any, messages: Any, **kw: Any) -> None:
        if not failed:
            failed.append(self)
            await self.engine.execute("CREATE TABLE IF NOT EXISTS sessions (session_id VARCHAR)")
            raise MemoryError("out of memory halfway")
        await real(self, sessions, messages, **kw)

    monkeypatch.setattr(QueryIndex, "rebuild", breaks_once)
    with pytest.raises(MemoryError):
        await mem.search("lisbon")
    assert mem.index.state is S.FAILED and mem.index.query_index is None
    await mem.messages.append(sid, "user", "And Porto in June.")  # while failed: read by the next opening
    assert {h.message.text for h in await mem.search("lisbon porto")} == {
        "We fly to Lisbon in May.",
        "And Porto in June.",
    }
    assert mem.index.state is S.READY and mem.index.query_index is not failed[0]
    await mem.close()
