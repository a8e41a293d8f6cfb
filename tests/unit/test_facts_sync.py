"""Facts through sync: what one device learns or is told about the person reaches the
others through the reference server; the newer version of a fact wins (by HLC), a
delete is for ever, two devices that learn from the same message hold one fact, the
facts held before sync was turned on are sent, and the server refuses a malformed fact.
Memory and SQLite stores."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import chatmem
from chatmem.runtime import CPythonRuntime
from chatmem.server import running_server
from chatmem.sync import SyncConfig

KEY = "facts-key"


class Clock:
    """A device's clock over a shared time that tests move on (the server checks HLCs
    against the real time, so it starts there)."""

    def __init__(self, world: list[int]) -> None:
        self.world = world

    def __call__(self) -> int:
        return self.world[0]

    async def sleep(self, seconds: float) -> None:
        self.world[0] += int(seconds * 1000)


@pytest.fixture
def srv() -> Any:
    with running_server(api_keys=[KEY]) as s:
        yield s


@pytest.fixture(params=["memory", "sqlite"])
def persist(request: Any, tmp_path: Path) -> Any:
    """Where the second device keeps its data (the first is in memory)."""
    return None if request.param == "memory" else str(tmp_path / "b.db")


async def device(url: str, world: list[int], persist: str | None = None, sync: bool = True) -> chatmem.Memory:
    clock = Clock(world)
    mem = await chatmem.open(persist=persist, runtime=CPythonRuntime(clock=clock, sleep=clock.sleep))
    if sync:
        await mem.sync.configure(SyncConfig(enabled=True, endpoint=url, api_key=KEY, timeout=5_000))
    return mem


def shown(facts: list[chatmem.Fact]) -> list[tuple[str, str, str, str, bool]]:
    return sorted((f.fact_id, f.key, f.value, f.status, f.pinned) for f in facts)


async def test_facts_learnt_told_corrected_and_deleted_reach_the_other_device(srv: Any, persist: Any) -> None:
    world = [time.time_ns() // 1_000_000]

    a = await device(srv.url, world)
    b = await device(srv.url, world, persist)
    s = await a.sessions.create(title="about me")
    await a.messages.append(s.session_id, "user", "My name is Ana and I live in Porto.")
    await a.facts.extract()
    told = await a.facts.add("Allergic to penicillin", key="allergy", value="penicillin")
    await a.sync.run()
    await b.sync.run()
    assert shown(await b.facts.list()) == shown(await a.facts.list())
    assert len(await b.facts.list()) == 3
    (home,) = await b.facts.list(key="home")
    assert [m.content for m in await b.facts.sources(home.fact_id)] == ["My name is Ana and I live in Porto."]

    world[0] += 1_000  # B corrects what A learnt: a new version; A reads the history
    lisbon = await b.facts.update(home.fact_id, value="Lisbon", text="Lives in Lisbon")
    await b.facts.update(told.fact_id, pinned=True)
    await b.sync.run()
    await a.sync.run()
    assert shown(await a.facts.list(status=None)) == shown(await b.facts.list(status=None))
    assert [f.value for f in await a.facts.history(lisbon.fact_id)] == ["Porto", "Lisbon"]
    assert (await a.facts.get(told.fact_id)).pinned

    world[0] += 1_000  # A forgets the home: every version goes on both devices
    await a.facts.delete(lisbon.fact_id)
    await a.sync.run()
    await b.sync.run()
    assert sorted(f.key for f in await b.facts.list(status=None)) == ["allergy", "name"]
    assert shown(await b.facts.list(status=None)) == shown(await a.facts.list(status=None))

    # B reads the message again: what A deleted does not come back, here or there
    await b.facts.extract(reprocess=True)
    await b.sync.run()
    await a.sync.run()
    await b.sync.run()
    assert "home" not in {f.key for f in await b.facts.list(status=None)}
    assert "home" not in {f.key for f in await a.facts.list(status=None)}
    assert shown(await b.facts.list(status=None)) == shown(await a.facts.list(status=None))
    await a.close()
    await b.close()


async def test_two_devices_that_learn_from_one_message_hold_one_fact(srv: Any, persist: Any) -> None:
    """Both devices read the same message (A wrote it, B pulled it) and learn from it: the
    fact has one id, so after sync each holds one copy, not two."""
    world = [time.time_ns() // 1_000_000]

    a = await device(srv.url, world)
    b = await device(srv.url, world, persist)
    s = await a.sessions.create()
    await a.messages.append(s.session_id, "user", "I work as a nurse. We have a dog named Rex.")
    await a.sync.run()
    await b.sync.run()
    await a.facts.extract()
    world[0] += 500
    await b.facts.extract()
    for _ in range(2):
        await a.sync.run()
        await b.sync.run()
    assert shown(await a.facts.list()) == shown(await b.facts.list())
    assert sorted(f.key for f in await b.facts.list()) == ["job", "pet"]
    await a.close()
    await b.close()


async def test_the_newer_version_wins_on_both_devices(srv: Any, persist: Any) -> None:
    """A and B change one fact between syncs: the later write (by HLC) is what both hold."""
    world = [time.time_ns() // 1_000_000]

    a = await device(srv.url, world)
    b = await device(srv.url, world, persist)
    f = await a.facts.add("Likes tea", key="likes", value="tea")
    await a.sync.run()
    await b.sync.run()
    await b.facts.update(f.fact_id, importance=0.9)
    world[0] += 1_000
    await a.facts.update(f.fact_id, pinned=True, importance=0.3)  # later: wins
    await b.sync.run()
    await a.sync.run()
    await b.sync.run()
    for mem in (a, b):
        got = await mem.facts.get(f.fact_id)
        assert (got.pinned, got.importance) == (True, 0.3)
    await a.close()
    await b.close()


async def test_facts_held_before_sync_was_turned_on_are_sent(srv: Any, persist: Any) -> None:
    world = [time.time_ns() // 1_000_000]

    a = await device(srv.url, world, sync=False)
    s = await a.sessions.create()
    await a.messages.append(s.session_id, "user", "Call me Bea. I'm vegetarian.")
    await a.facts.extract()
    await a.facts.add("Has a piano lesson on Mondays")
    before = shown(await a.facts.list(status=None))
    assert len(before) == 3
    await a.sync.configure(SyncConfig(enabled=True, endpoint=srv.url, api_key=KEY, timeout=5_000))
    await a.sync.run()
    assert (await a.sync.status()).pending == 0
    b = await device(srv.url, world, persist)
    await b.sync.run()
    assert shown(await b.facts.list(status=None)) == before
    await a.close()
    await b.close()


def _push(url: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
    req = urllib.request.Request(
        url + "/v1/push",
        data=json.dumps({"device_id": "dtest", "ops": ops}).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


def test_the_server_refuses_a_malformed_fact_and_keeps_a_delete_for_ever(srv: Any) -> None:
    now = time.time_ns() // 1_000_000
    good = chatmem.Fact(
        fact_id="f-good",
        user_id="local",
        character_id=None,
        key="home",
        value="Porto",
        text="Lives in Porto",
        status="active",
        valid_from=now,
        valid_to=None,
        created_at=now,
        updated_at=now,
    ).to_record()

    def op(op_id: str, kind: str, fid: str, data: Any, at: int) -> dict[str, Any]:
        return {
            "op_id": op_id,
            "type": kind,
            "resource": "fact",
            "id": fid,
            "data": data,
            "timestamp": at,
            "hlc": f"{at:013d}-0000-dtest",
            "attempts": 0,
        }

    answer = _push(
        srv.url,
        [
            op("o1", "create", "f-bad", dict(good, factId="f-bad", status="maybe"), now),
            op("o2", "create", "f-good", good, now),
            op("o3", "create", "f-long", dict(good, factId="f-long", value="x" * 5000), now),
        ],
    )
    statuses = [(r["op_id"], r["status"]) for r in answer["results"]]
    assert statuses == [("o1", "rejected"), ("o2", "applied"), ("o3", "rejected")]
    assert "status" in answer["results"][0]["reason"]
    answer = _push(
        srv.url,
        [
            op("o4", "delete", "f-good", None, now + 1),
            op("o5", "update", "f-good", dict(good, value="Faro"), now + 2),  # after the delete
        ],
    )
    assert [r["status"] for r in answer["results"]] == ["applied", "applied"]
    assert "deleted" in answer["results"][1]["reason"]
    space = srv.storage
    rows = space.changes(srv.space(KEY), 0, 100)
    facts = {r.id: r for r in rows if r.resource == "fact"}
    assert set(facts) == {"f-good"} and facts["f-good"].deleted
