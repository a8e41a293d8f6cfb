"""Sync operations for every change, made before the write and handed to the
store, which enqueues them in the *same* transaction as the change, once sync
was turned on (``Store.outbox_activate``; until then it drops them).

``Outbox`` knows this device's id (kept in the store's kv under
``sync.device_id``) and its hybrid logical clock; it never talks to a server
(that is ``chatmem.sync``'s drain loop).

Every message record carries the HLC it was written at (``hlc``, a field of the
store's own, never exported or pushed as data): ``stamp`` sets it before the
write, and the message's ``create`` operation carries that same HLC, so every
device that holds the message knows the same order key for it.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Iterable, Mapping

from ..records.hlc import DEFAULT_MAX_SKEW_MS, HybridLogicalClock
from ..records.ids import Clock, IdGenerator
from .base import ORDER_KEY, Store

__all__ = ["Outbox", "DEVICE_KEY"]

DEVICE_KEY = "sync.device_id"

#: one clock per device and wall clock in this process: two connections to one store (the
#: same device) stamp from one clock, so what one wrote always sorts before what the other
#: writes after it, even within the same millisecond
#: (held only while a connection uses it)
_CLOCKS: weakref.WeakValueDictionary[tuple[str, int], HybridLogicalClock] = weakref.WeakValueDictionary()


class Outbox:
    def __init__(
        self, store: Store, ids: IdGenerator, clock: Clock, *, max_skew_ms: int = DEFAULT_MAX_SKEW_MS
    ):
        self._store = store
        self._max_skew_ms = max_skew_ms
        self._ids = ids
        self._clock = clock
        self.hlc: HybridLogicalClock | None = None

    async def device_id(self) -> str:
        return (await self._hlc()).device_id

    async def stamp(self, records: Iterable[dict[str, Any]]) -> None:
        """Give each message record the HLC it is written at (``ORDER_KEY``), in order."""
        hlc = await self._hlc()
        for r in records:
            r[ORDER_KEY] = hlc.now()

    async def clock(self) -> HybridLogicalClock:
        """This device's HLC clock, for records stamped while a write runs."""
        return await self._hlc()

    async def _hlc(self) -> HybridLogicalClock:
        if self.hlc is None:
            device = await self._store.kv_get(DEVICE_KEY)
            if not device:
                device = "d" + self._ids()
                await self._store.kv_set(DEVICE_KEY, device)
            key = (str(device), id(self._clock))  # the clock outlives its entry: ids stay unique
            shared = _CLOCKS.get(key)
            if shared is None or shared.max_skew_ms != self._max_skew_ms:
                shared = _CLOCKS[key] = HybridLogicalClock(device, self._clock, max_skew_ms=self._max_skew_ms)
            self.hlc = shared
        return self.hlc

    async def op(
        self,
        type_: str,
        resource: str,
        id_: str,
        session_id: str,
        data: dict[str, Any] | None,
        op_id: str | None = None,
        at: str | None = None,
    ) -> dict[str, Any]:
        """One operation; ``data=None`` on a message create means "the stored record"
        (the op refers to it; ``chatmem.sync.wire`` reads it when pushing). ``at``: its
        HLC when it has one already (a message's create carries the message's)."""
        return self._make(await self._hlc(), type_, resource, id_, session_id, data, op_id, at)

    def _make(
        self,
        hlc: HybridLogicalClock,
        type_: str,
        resource: str,
        id_: str,
        session_id: str,
        data: dict[str, Any] | None,
        op_id: str | None = None,
        at: str | None = None,
    ) -> dict[str, Any]:
        return {
            "op_id": op_id or self._ids(),
            "type": type_,
            "resource": resource,
            "id": id_,
            "session_id": session_id,
            "data": data,
            "timestamp": self._clock(),
            "hlc": at or hlc.now(),
            "attempts": 0,
            "next_attempt_at": 0,
            "last_error": None,
        }

    def _created(self, hlc: HybridLogicalClock, record: dict[str, Any], session_id: str) -> dict[str, Any]:
        """The reference ``create`` op of a message record, at the record's HLC if stamped."""
        return self._make(
            hlc, "create", "message", record["id"], session_id, None, None, record.get(ORDER_KEY)
        )

    async def session_created(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            await self.op(
                "create", "session", record["sessionId"], record["sessionId"], _session_data(record)
            )
        ]

    async def messages_created(
        self, session_id: str, records: Iterable[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Reference ops: each refers to its stored message instead of copying it."""
        hlc = await self._hlc()
        return [self._created(hlc, r, session_id) for r in records]

    async def import_later(
        self, items: list[tuple[dict[str, Any], list[dict[str, Any]]]], at: Mapping[str, str]
    ) -> Callable[[], list[dict[str, Any]]]:
        """The ops of an import (each session's create, at its HLC in ``at`` by session id,
        then its messages') as a function a store calls only if its outbox is on."""
        hlc = await self._hlc()

        def build() -> list[dict[str, Any]]:
            out = []
            for rec, msgs in items:
                sid = rec["sessionId"]
                out.append(
                    self._make(hlc, "create", "session", sid, sid, _session_data(rec), None, at.get(sid))
                )
                out += [self._created(hlc, m, sid) for m in msgs]
            return out

        return build

    async def messages_created_later(
        self, session_id: str, records: list[dict[str, Any]]
    ) -> Callable[[], list[dict[str, Any]]]:
        """``messages_created`` as a function a store calls only if its outbox is on."""
        hlc = await self._hlc()
        return lambda: [self._created(hlc, r, session_id) for r in records]

    async def messages_deleted(self, session_id: str, message_ids: Iterable[str]) -> list[dict[str, Any]]:
        return [
            await self.op("delete", "message", mid, session_id, {"sessionId": session_id})
            for mid in message_ids
        ]

    async def facts_written(self, records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """One op per fact record written, carrying the whole record (a fact belongs to no
        session: its ops are ordered by its own id)."""
        hlc = await self._hlc()
        return [
            self._make(
                hlc, "create" if r["createdAt"] == r["updatedAt"] else "update", "fact", r["factId"], "", r
            )
            for r in records
        ]

    async def facts_deleted(self, fact_ids: Iterable[str]) -> list[dict[str, Any]]:
        hlc = await self._hlc()
        return [self._make(hlc, "delete", "fact", fid, "", None) for fid in fact_ids]


def _session_data(record: dict[str, Any]) -> dict[str, Any]:
    """A session create's data: the record without the store's own fields."""
    return {k: v for k, v in record.items() if k not in ("nextSeq",)}
