"""``index.fill``: ``messages`` filled a step at a time, each under the index's lock, after a
derivation that left the texts out (the page's; ``tests/browser/test_fill_browser.py``
runs it for real). Here a scripted fill over a DuckDB index checks the gate around it:
what does not read ``messages`` is answered between steps, what does waits for the end, a
failed fill is an error rather than a short answer, and a rebuild or a close stops it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from chatmem.errors import StorageError
from chatmem.index import DuckDBEngine, QueryIndex
from chatmem.index.fill import FillState, MessagesFill
from chatmem.index.schema import TABLES, message_row
from chatmem.index.sql_engine import SQLEngine, TextFill
from chatmem.records.models import SessionMeta

_COLUMNS = [c for c, _ in TABLES["messages"]]


def _msg(i: int, sid: str = "s") -> dict[str, Any]:
    return {
        "id": f"m{i}",
        "sessionId": sid,
        "seq": i,
        "role": "user",
        "content": f"word{i} common",
        "createdAt": i,
    }


class ScriptedFill(TextFill):
    """Appends ``per_step`` of ``records`` a step (a moment each), less what it is told to
    skip; fails at step ``fail_at``."""

    def __init__(self, engine: SQLEngine, records: list[dict[str, Any]], per_step: int, fail_at: int = 0):
        self.engine, self.records, self.per_step, self.fail_at = engine, list(records), per_step, fail_at
        self.steps = 0

    async def step(self, skip_sessions: list[str], skip_ids: list[str]) -> tuple[int, bool]:
        self.steps += 1
        await asyncio.sleep(0.01)  # the engine works on the step
        if self.steps == self.fail_at:
            raise RuntimeError("the disk is full")
        part, self.records = self.records[: self.per_step], self.records[self.per_step :]
        rows = [
            message_row(r) for r in part if r["sessionId"] not in skip_sessions and r["id"] not in skip_ids
        ]
        if rows:
            await self.engine.load_rows("messages", _COLUMNS, rows)
        return len(rows), not self.records


async def _filling(
    n: int = 40, per_step: int = 4, fail_at: int = 0, stored: tuple[list[Any], list[Any]] = ([], [])
) -> tuple[QueryIndex, ScriptedFill]:
    """An index of ``n`` messages whose ``messages`` is emptied and being filled again, from
    a store that also holds the messages ``stored`` (read first, read last) not yet applied."""
    idx = QueryIndex(DuckDBEngine())
    records = [_msg(i) for i in range(n)]
    await idx.rebuild([SessionMeta("s", "t", 1, 1, message_count=n).to_record()], records)
    await idx.execute("DELETE FROM messages")
    fill = ScriptedFill(idx.engine, stored[0] + records + stored[1], per_step, fail_at)
    idx.fill = MessagesFill(fill, idx.write_lock, idx._answers.idle)
    return idx, fill


async def test_reads_of_other_tables_are_answered_between_steps_and_messages_waits() -> None:
    idx, fill = await _filling()
    assert idx.fill is not None
    waiting = asyncio.ensure_future(idx.sql("SELECT count(*) AS n FROM messages"))
    while fill.steps < 2:
        await asyncio.sleep(0.005)
    # docs need no text: answered after one step at most, while the fill goes on
    assert await idx.sql("SELECT count(*) AS n FROM docs") == [{"n": 40}]
    assert idx.fill.filling and not waiting.done() and fill.steps < 5
    assert await waiting == [{"n": 40}]
    assert idx.fill.state is FillState.DONE and idx.fill.filled == 40 and fill.steps == 10
    assert await idx.messages_filled()
    await idx.close()


async def test_no_step_begins_while_a_search_is_under_way() -> None:
    idx, fill = await _filling()
    while fill.steps < 1:
        await asyncio.sleep(0.005)
    async with idx.answering():
        steps = fill.steps
        await asyncio.sleep(0.1)
        assert fill.steps <= steps + 1, "the step under way ends, no other begins"
    await idx.sql("SELECT count(*) AS n FROM messages")
    assert fill.steps == 10
    await idx.close()


async def test_writes_during_the_fill_are_neither_doubled_nor_undone() -> None:
    """Appends the store held before the fill read them: one read already (its row is
    replaced by the write's), one read later (left out). A cleared session's messages,
    read after the clear was applied, do not come back."""
    early, late = _msg(41), _msg(42)
    cleared = [_msg(60 + i, "t") for i in range(3)]
    idx, fill = await _filling(stored=([early], [late, *cleared]))
    await idx.apply("session-created", "t", SessionMeta("t", "t", 1, 1).to_record())
    while fill.steps < 2:
        await asyncio.sleep(0.005)
    assert await idx.execute_small("SELECT count(*) AS n FROM docs") == [{"n": 40}]
    await idx.apply("messages-appended", "s", [early, late])
    await idx.apply("session-cleared", "t", SessionMeta("t", "t", 1, 2).to_record())
    assert idx.fill is not None and idx.fill.filling, "the writes came during the fill"
    rows = await idx.sql("SELECT id, count(*) AS k FROM messages GROUP BY id ORDER BY id")
    assert {r["id"]: r["k"] for r in rows} == {f"m{i}": 1 for i in [*range(40), 41, 42]}
    assert await idx.sql("SELECT count(*) AS n, count(DISTINCT message_id) AS k FROM docs") == [
        {"n": 42, "k": 42}
    ]
    await idx.close()


async def test_a_failed_fill_is_an_error_for_what_reads_messages() -> None:
    idx, fill = await _filling(fail_at=3)
    with pytest.raises(StorageError, match="could not be filled: the disk is full"):
        await idx.sql("SELECT count(*) AS n FROM messages")
    assert not await idx.messages_filled()
    assert idx.fill is not None and idx.fill.state is FillState.FAILED
    assert await idx.sql("SELECT count(*) AS n FROM docs") == [{"n": 40}]
    # a rebuild makes it whole again
    await idx.rebuild([SessionMeta("s", "t", 1, 1, message_count=2).to_record()], [_msg(0), _msg(1)])
    assert idx.fill is None and await idx.sql("SELECT count(*) AS n FROM messages") == [{"n": 2}]
    await idx.close()


@pytest.mark.parametrize("how", ["rebuild", "close"])
async def test_a_rebuild_or_a_close_stops_the_fill(how: str) -> None:
    idx, fill = await _filling(n=400, per_step=2)
    running = idx.fill
    assert running is not None
    await asyncio.sleep(0.03)
    if how == "rebuild":
        await idx.rebuild(
            [SessionMeta("s", "t", 1, 1, message_count=3).to_record()], [_msg(i) for i in range(3)]
        )
        assert await idx.sql("SELECT count(*) AS n FROM messages") == [{"n": 3}]
        await idx.close()
    else:
        await idx.close()
    assert running.state is FillState.STOPPED and idx.fill is None
    steps = fill.steps
    await asyncio.sleep(0.05)
    assert fill.steps == steps < 200, "no step after it stopped"
