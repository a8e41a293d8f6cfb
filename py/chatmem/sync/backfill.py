"""Uploading the history that existed when sync was first turned on.

Until sync is turned on nothing is queued (see ``chatmem.stores.base``).
``Store.outbox_activate`` records, in the transaction that turns the outbox
on, every session with its ``nextSeq``: the messages below it are the
history, everything after has outbox operations. ``Backfill.run`` reads that
history from the store, session by session, and hands it to the push as
operations whose ``op_id`` is derived from the record's id: a batch re-sent
after a crash, a reload or a lost answer is a duplicate the server applies
once. Progress (the next session) is kept in ``kv`` under ``BACKFILL_KEY``
after each session; the drain sends the outbox only once the backfill is done,
so a session's create always reaches the server before its later changes.

A session or message deleted after sync was turned on is skipped (its delete
is in the outbox); a session changed since is sent as it is now (its queued
update carries an older HLC and changes nothing more).

Then every fact held is sent once (``FACTS_BACKFILL_KEY`` marks it done), at
an HLC of the time its version was last written: a newer version another
device already pushed still wins over this device's older copy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..records.hlc import format_hlc
from ..stores.base import ORDER_KEY, OUTBOX_KEY, SESSION_PRIVATE_FIELDS

if TYPE_CHECKING:
    from ..stores.shared import Core

__all__ = ["BACKFILL_KEY", "FACTS_BACKFILL_KEY", "Backfill", "backfill_op_id"]

#: kv key of the backfill's progress: ``{"pos": <next session index>, "done": bool}``
BACKFILL_KEY = "sync.backfill"
#: kv key set once every fact held was sent
FACTS_BACKFILL_KEY = "sync.backfill.facts"

#: sends one batch (ops, records already read by message id); False = stop for now
Send = Callable[[list[dict[str, Any]], dict[str, dict[str, Any]]], Awaitable[bool]]


def backfill_op_id(resource: str, id_: str) -> str:
    """The stable ``op_id`` of a record's backfill operation (the same on every attempt)."""
    return "b" + hashlib.sha256(f"{resource}\0{id_}".encode()).hexdigest()[:32]


class Backfill:
    """The history upload of one store (used by ``Synchronizer`` under its drain lock)."""

    def __init__(self, core: Core):
        self._core = core
        self._done = False

    async def _state(self) -> tuple[list[list[Any]], int] | None:
        """(snapshot pairs, next position), or None when there is nothing (more) to send."""
        if self._done:
            return None
        store = self._core.store
        snap = await store.kv_get(OUTBOX_KEY)
        prog = await store.kv_get(BACKFILL_KEY)
        prog = prog if isinstance(prog, dict) else {}
        pairs = snap.get("sessions") if isinstance(snap, dict) else None
        pos = int(prog.get("pos") or 0)
        if prog.get("done") or not pairs or pos >= len(pairs):
            if isinstance(snap, dict) and await store.kv_get(FACTS_BACKFILL_KEY):
                self._done = True
                return None
            return ([], 0) if isinstance(snap, dict) else None
        return pairs, pos

    async def remaining(self) -> int:
        """An upper bound of the operations still to send (sessions, messages, facts)."""
        state = await self._state()
        if state is None:
            return 0
        pairs, pos = state
        facts = (
            0
            if await self._core.store.kv_get(FACTS_BACKFILL_KEY)
            else len(await self._core.store.list_facts())
        )
        return sum(1 + int(upto) for _, upto in pairs[pos:]) + facts

    async def run(self, send: Send, batch_size: int) -> bool:
        """Send the rest of the history in batches; True once all of it was delivered."""
        state = await self._state()
        if state is None:
            return True
        pairs, pos = state
        store = self._core.store
        while pos < len(pairs):
            sid, upto = pairs[pos]
            if not await self._session(str(sid), int(upto), send, batch_size):
                return False
            pos += 1
            await store.kv_set(BACKFILL_KEY, {"pos": pos, "done": pos >= len(pairs)})
        if not await self._facts(send, batch_size):
            return False
        self._done = True
        return True

    async def _facts(self, send: Send, size: int) -> bool:
        """Send every fact held, each at the time its version was last written."""
        store, outbox = self._core.store, self._core.outbox
        if await store.kv_get(FACTS_BACKFILL_KEY):
            return True
        device = await outbox.device_id()
        ops = [
            await outbox.op(
                "create",
                "fact",
                r["factId"],
                "",
                r,
                backfill_op_id("fact", f"{r['factId']}\0{r['updatedAt']}"),
                format_hlc(int(r["updatedAt"]), 0, device),
            )
            for r in sorted(await store.list_facts(), key=lambda r: str(r["factId"]))
        ]
        for start in range(0, len(ops), size):
            if not await send(ops[start : start + size], {}):
                return False
        await store.kv_set(FACTS_BACKFILL_KEY, True)
        return True

    async def _session(self, sid: str, upto: int, send: Send, size: int) -> bool:
        store, outbox = self._core.store, self._core.outbox
        rec = await store.get_session(sid)
        if rec is None:
            return True  # deleted since: its delete is queued
        data = {k: v for k, v in rec.items() if k not in SESSION_PRIVATE_FIELDS}
        buf = [await outbox.op("create", "session", sid, sid, data, backfill_op_id("session", sid))]
        known: dict[str, dict[str, Any]] = {}
        offset, count = 0, rec.get("messageCount")
        while upto > 0:
            page = await store.list_messages(sid, offset, size, False)
            now = await store.get_session(sid)
            if now is None:
                return True
            if now.get("messageCount", 0) < (count or 0):
                # a delete shifted the positions under this read: start the session over
                # (what was sent already is sent again as duplicates, applied once)
                offset, count, buf, known = 0, now.get("messageCount"), [], {}
                continue
            count = now.get("messageCount")
            for m in page:
                if int(m["seq"]) < upto:
                    known[m["id"]] = m
                    buf.append(
                        await outbox.op(
                            "create",
                            "message",
                            m["id"],
                            sid,
                            None,
                            backfill_op_id("message", m["id"]),
                            m.get(ORDER_KEY),
                        )
                    )
            offset += len(page)
            while len(buf) >= size:
                batch, buf = buf[:size], buf[size:]
                if not await send(batch, known):
                    return False
            if len(page) < size or (page and int(page[-1]["seq"]) >= upto):
                break
        return await send(buf, known) if buf else True
