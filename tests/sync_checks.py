"""Sync test helpers shared by the CPython tests and the page (loaded into
Pyodide like ``contract_checks.py``): client-side workloads and snapshots,
plus server-side inspection that runs in the test process only."""

from __future__ import annotations

from typing import Any

__all__ = [
    "MEMS",
    "PushRecorder",
    "check_apply_changes",
    "drain",
    "local_snapshot",
    "open_synced",
    "server_snapshot",
    "workload",
]

#: open Memories by database name (the page's runPython namespaces are fresh each call)
MEMS: dict[str, Any] = {}


async def open_synced(name: str, **config: Any) -> Any:
    """The Memory for ``name`` (opened once per page), configured with ``config`` if given."""
    import chatmem
    from chatmem.sync import SyncConfig

    mem = MEMS.get(name)
    if mem is None:
        mem = MEMS[name] = await chatmem.open(name)
    if config:
        await mem.sync.configure(SyncConfig(enabled=True, **config))
    return mem


def undelivered(messages: int = 90) -> int:
    """Queued message creates of ``workload`` that are never pushed: the messages of the
    cleared and of the deleted session are gone before the first push (a create refers
    to its stored message, so nothing is left to deliver)."""
    return 2 * messages


async def workload(mem: Any, sessions: int = 10, messages: int = 90, updates: int = 5) -> int:
    """Create sessions, messages (in batches), title updates, a clear (message deletes),
    a fork and a session delete.

    Returns how many operations were enqueued (counted from the outbox).
    """
    before = (await mem.store.outbox_counts())[0]
    ids = []
    for s in range(sessions):
        meta = await mem.sessions.create(title=f"session {s}", tags=["sync"])
        ids.append(meta.session_id)
        for start in range(0, messages, 30):
            await mem.messages.append_many(
                meta.session_id,
                [
                    {"role": "user" if i % 2 == 0 else "assistant", "content": f"s{s} m{i} ünï ✓"}
                    for i in range(start, min(messages, start + 30))
                ],
            )
        for u in range(updates):
            await mem.sessions.update(meta.session_id, title=f"session {s} v{u}")
    await mem.sessions.clear(ids[0])  # one message delete each
    await mem.sessions.fork(ids[1], at_index=10, reason="branch")  # a create with its messages
    await mem.sessions.delete(ids[-1])
    return (await mem.store.outbox_counts())[0] - before


async def drain(mem: Any, rounds: int = 200) -> list[str]:
    """push() until the outbox is empty (offline answers end a push early); the states seen."""
    states = []
    for _ in range(rounds):
        report = await mem.sync.push()
        states.append(report.state)
        if (await mem.store.outbox_counts())[0] == 0:
            return states
    raise AssertionError(f"outbox not drained after {rounds} pushes: {states[-5:]}")


async def local_snapshot(mem: Any) -> dict[str, Any]:
    """What a device holds: session fields and messages (id -> (session, content, role))."""
    sessions = {}
    messages = {}
    for rec in await mem.store.all_sessions():
        sid = rec["sessionId"]
        sessions[sid] = {k: rec.get(k) for k in ("title", "tags", "pinned", "archived", "createdAt")}
        for m in await mem.store.list_messages(sid, 0, None, False):
            messages[m["id"]] = [sid, m["content"], m["role"], m["createdAt"]]
    return {"sessions": sessions, "messages": messages}


def server_snapshot(srv: Any, api_key: str) -> dict[str, Any]:
    """The same view of what the reference server holds for a key (live records only)."""
    rows = srv.storage.changes(srv.space(api_key), 0, 10**9)
    sessions = {}
    messages = {}
    for r in rows:
        if r.deleted:
            continue
        if r.resource == "session":
            sessions[r.id] = {k: r.data.get(k) for k in ("title", "tags", "pinned", "archived", "createdAt")}
        else:
            messages[r.id] = [r.data["sessionId"], r.data["content"], r.data["role"], r.data["createdAt"]]
    return {"sessions": sessions, "messages": messages}


class PushRecorder:
    """Wraps the server's ``SyncService.push`` to record every batch that reached it."""

    def __init__(self, srv: Any):
        self.batches: list[list[tuple[str, int]]] = []
        self.results: list[dict[str, str]] = []
        orig = srv.service.push

        def push(space: str, payload: Any) -> Any:
            self.batches.append([(op["op_id"], op.get("attempts", 0)) for op in payload["ops"]])
            answer = orig(space, payload)
            self.results.append({r["op_id"]: r["status"] for r in answer["results"]})
            return answer

        srv.service.push = push

    @property
    def op_ids(self) -> list[str]:
        return [op_id for batch in self.batches for op_id, _ in batch]


async def check_apply_changes(mem: Any) -> None:
    """``Store.apply_changes`` merge rules, the same on every store (the IndexedDB one is JS):
    nothing enqueued, cursor written, LWW under newer pending ops, immutability, order
    keys, placeholders, tombstones."""
    store = mem.store
    await store.outbox_activate(0)  # the outbox holds local writes only once sync is on

    def h(n: int) -> str:
        return f"{1_800_000_000_000 + n:013d}-0000-remote"

    s = await mem.sessions.create(title="local", tags=["a"])
    sid = s.session_id
    m0 = await mem.messages.append(sid, "user", "local first")
    await store.outbox_ack([o["op_id"] for o in await store.outbox_list()])
    remote_msg = {
        "id": "r-msg-1",
        "sessionId": sid,
        "seq": 0,
        "role": "assistant",
        "content": "remote",
        "createdAt": s.created_at + 5,
    }
    touched = await store.apply_changes(
        [
            {
                "resource": "session",
                "id": sid,
                "deleted": False,
                "hlc": h(1),
                "data": {
                    "sessionId": sid,
                    "title": "remote title",
                    "tags": ["b"],
                    "messageCount": 99,
                    "createdAt": s.created_at,
                    "updatedAt": 1,
                },
            },
            {"resource": "message", "id": "r-msg-1", "deleted": False, "hlc": h(2), "data": remote_msg},
            {
                "resource": "message",
                "id": m0.id,
                "deleted": False,
                "hlc": h(3),
                "data": dict(remote_msg, id=m0.id, content="tampered"),
            },
            {
                "resource": "message",
                "id": "orphan-1",
                "deleted": False,
                "hlc": h(4),
                "data": dict(remote_msg, id="orphan-1", sessionId="remote-only", seq=3),
            },
        ],
        {"sync.cursor": "4"},
    )
    assert sorted(touched) == sorted([sid, "remote-only"]), touched
    assert await store.outbox_counts() == (0, 0), "applying pulled changes enqueues nothing"
    assert await store.kv_get("sync.cursor") == "4"
    rec = await store.get_session(sid)
    assert rec["title"] == "remote title" and rec["tags"] == ["b"]
    assert rec["messageCount"] == 2 and rec["updatedAt"] >= s.updated_at, rec
    msgs = await store.list_messages(sid, 0, None, False)
    assert [(m["id"], m["seq"], m["content"]) for m in msgs] == [
        (m0.id, 0, "local first"),
        ("r-msg-1", 1, "remote"),
    ], msgs
    assert msgs[1]["hlc"] == h(2), "a pulled message keeps the HLC of its create"
    assert msgs[0]["hlc"] != h(3) and msgs[0]["hlc"] < h(1), "a message held here keeps its own"
    same = {k: v for k, v in msgs[0].items() if k != "hlc"}
    await store.apply_changes(
        [{"resource": "message", "id": m0.id, "deleted": False, "hlc": h(5), "data": same}]
    )
    msgs = await store.list_messages(sid, 0, None, False)
    assert [(m["id"], m["seq"], m["hlc"]) for m in msgs] == [("r-msg-1", 0, h(2)), (m0.id, 1, h(5))], (
        "the same message under the server's key takes it, and its place"
    )
    orphan = await store.get_session("remote-only")
    assert orphan is not None and orphan["messageCount"] == 1 and orphan["nextSeq"] == 1
    assert (await store.get_message("orphan-1"))["seq"] == 0, "seq is its place here, not the sender's"
    # a newer pending local edit survives an older remote change; an older one does not
    await mem.sessions.update(sid, title="pending local")
    await mem.sessions.update(sid, pinned=True)
    pending_hlc = (await store.outbox_list())[0]["hlc"]
    older = "0000000000001-0000-remote"
    await store.apply_changes(
        [
            {
                "resource": "session",
                "id": sid,
                "deleted": False,
                "hlc": older,
                "data": {"sessionId": sid, "title": "old remote", "pinned": False, "archived": True},
            }
        ]
    )
    rec = await store.get_session(sid)
    assert rec["title"] == "pending local" and rec["pinned"] is True and rec["archived"] is True, rec
    newer = "9999999999999-0000-remote"
    assert newer > pending_hlc
    await store.apply_changes(
        [
            {
                "resource": "session",
                "id": sid,
                "deleted": False,
                "hlc": newer,
                "data": {"sessionId": sid, "title": "newest remote"},
            }
        ]
    )
    assert (await store.get_session(sid))["title"] == "newest remote"
    # tombstones: one message, then the whole session with its messages
    await store.apply_changes(
        [{"resource": "message", "id": "r-msg-1", "deleted": True, "hlc": newer, "data": None}]
    )
    assert await store.get_message("r-msg-1") is None
    assert (await store.get_session(sid))["messageCount"] == 1
    await store.apply_changes(
        [{"resource": "session", "id": sid, "deleted": True, "hlc": newer, "data": None}]
    )
    assert await store.get_session(sid) is None and await store.get_message(m0.id) is None
    assert await store.count_messages(sid) == 0
    assert (await store.outbox_counts())[0] == 2  # only the two local updates
    await _check_fact_changes(mem, h)


async def _check_fact_changes(mem: Any, h: Any) -> None:
    """Facts: a pulled one is stored whole; a newer pending write of it keeps the local
    version, an older one does not; a tombstone removes it whatever is pending."""
    store = mem.store
    await store.outbox_ack([o["op_id"] for o in await store.outbox_list()])
    mine = await mem.facts.add("Lives in Porto", key="home", value="Porto")
    await store.outbox_ack([o["op_id"] for o in await store.outbox_list()])
    remote = dict(mine.to_record(), factId="r-fact-1", value="Faro", text="Lives in Faro")
    await store.apply_changes(
        [
            {"resource": "fact", "id": "r-fact-1", "deleted": False, "hlc": h(10), "data": remote},
            {
                "resource": "fact",
                "id": mine.fact_id,
                "deleted": False,
                "hlc": h(11),
                "data": dict(mine.to_record(), pinned=True),
            },
        ]
    )
    assert await store.outbox_counts() == (0, 0), "applying pulled facts enqueues nothing"
    assert (await store.get_fact("r-fact-1")) == remote
    assert (await store.get_fact(mine.fact_id))["pinned"] is True
    await mem.facts.update(mine.fact_id, importance=0.2)  # pending, newer than the change below
    await store.apply_changes(
        [
            {
                "resource": "fact",
                "id": mine.fact_id,
                "deleted": False,
                "hlc": "0000000000002-0000-remote",
                "data": dict(mine.to_record(), importance=0.9),
            }
        ]
    )
    assert (await store.get_fact(mine.fact_id))["importance"] == 0.2, "a newer pending write stays"
    await store.apply_changes(
        [
            {
                "resource": "fact",
                "id": mine.fact_id,
                "deleted": False,
                "hlc": "9999999999999-0000-remote",
                "data": dict(mine.to_record(), importance=0.7),
            }
        ]
    )
    assert (await store.get_fact(mine.fact_id))["importance"] == 0.7, "a newer remote write wins"
    await mem.facts.update(mine.fact_id, importance=0.1)
    await store.apply_changes(
        [
            {"resource": "fact", "id": mine.fact_id, "deleted": True, "hlc": h(13), "data": None},
            {"resource": "fact", "id": "r-fact-1", "deleted": True, "hlc": h(14), "data": None},
            {"resource": "fact", "id": "never-held", "deleted": True, "hlc": h(15), "data": None},
        ]
    )
    assert await store.get_fact(mine.fact_id) is None and await store.get_fact("r-fact-1") is None
    assert await store.list_facts() == []
