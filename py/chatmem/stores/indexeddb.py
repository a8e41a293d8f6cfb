"""IndexedDB store (Pyodide only), through the JS bridge.

Each method is one bridge call, and one bridge call is one IndexedDB
transaction that has *completed* when the call returns: the write survives a
reload and a browser restart. ``seq`` is assigned inside the transaction, so
appends from several tabs never collide. Writes from other tabs arrive as
BroadcastChannel notices; ``subscribe`` forwards them (the ``Memory`` drops
its cached view of those sessions).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable, Iterable, Iterator, Protocol

from .base import Ops

__all__ = ["IndexedDBStore", "BridgeHandle"]


class BridgeHandle(Protocol):
    """One open database of the JS bridge (the page runtime's ``BridgeDB``)."""

    name: str

    async def call(self, method: str, **args: Any) -> Any:
        """Run one bridge method = one IndexedDB transaction; typed errors on failure.

        An ``ops`` that is a function is not sent: the bridge calls it inside the
        transaction, only if the outbox is on."""
        ...

    async def append_batches(
        self, session_id: str, batches: Iterable[list[dict[str, Any]]], now: int, ops: Ops = None
    ) -> Any:
        """``appendMessages`` with the records fed chunk by chunk as ``batches`` builds
        them, in one transaction; answers [first seq, session record]."""
        ...

    async def import_batches(self, batches: Iterable[list[Any]], ops: Ops = None) -> None:
        """``importSessions`` of new sessions fed chunk by chunk as ``batches`` builds them."""
        ...

    def subscribe(self, fn: Callable[[dict[str, Any]], None]) -> None: ...

    def derivation(self, engine_handle: Any, options: dict[str, Any]) -> Any:
        """The bridge's derivation of the keyword tables from this database (``derive.js``)."""
        ...

    async def close(self) -> None: ...


class IndexedDBStore:
    """The store over one bridge database (the page runtime opens it: ``PageRuntime.open_store``)."""

    kind = "indexeddb"
    path: str | None = None
    streams_batches = True

    def __init__(self, db: BridgeHandle, durability: str):
        self._db = db
        self.name = db.name
        self.durability = durability

    @property
    def bridge_db(self) -> BridgeHandle:
        """The bridge database under this store (what a derivation in the page reads)."""
        return self._db

    def subscribe(self, fn: Callable[[str], None]) -> None:
        def on_notice(notice: dict[str, Any]) -> None:
            for sid in notice.get("sessions", []):
                fn(sid)

        self._db.subscribe(on_notice)

    async def create_session(
        self, record: dict[str, Any], messages: list[dict[str, Any]], ops: Ops = None
    ) -> None:
        await self._db.call("createSession", record=record, messages=messages, ops=ops)

    async def get_session(self, session_id: str) -> dict[str, Any] | None:
        return await self._db.call("getSession", sessionId=session_id)  # type: ignore[no-any-return]

    async def all_sessions(self) -> list[dict[str, Any]]:
        # pages of JSON (database.js ``allSessions``), parsed one at a time with the page
        # given back between them
        out: list[dict[str, Any]] = []
        for i, page in enumerate(await self._db.call("allSessions")):
            if i:
                await asyncio.sleep(0)
            out.extend(json.loads(page))
        return out

    async def update_session(
        self, session_id: str, changes: dict[str, Any], ops: Ops = None
    ) -> dict[str, Any]:
        return await self._db.call("updateSession", sessionId=session_id, changes=changes, ops=ops)  # type: ignore[no-any-return]

    async def delete_session(self, session_id: str, ops: Ops = None) -> bool:
        return bool(await self._db.call("deleteSession", sessionId=session_id, ops=ops))

    async def clear_session(self, session_id: str, now: int, ops: Ops = None) -> dict[str, Any]:
        return await self._db.call("clearSession", sessionId=session_id, now=now, ops=ops)  # type: ignore[no-any-return]

    async def append_messages(
        self,
        session_id: str,
        records: list[dict[str, Any]],
        now: int,
        create: dict[str, Any] | None = None,
        ops: Ops = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        first, sess = await self._db.call(
            "appendMessages", sessionId=session_id, records=records, now=now, create=create, ops=ops
        )
        for i, r in enumerate(records):  # the caller's fresh records become the stored ones
            r["seq"] = first + i
            r["sessionId"] = session_id
        return records, sess

    async def append_batches(
        self, session_id: str, batches: Iterable[list[dict[str, Any]]], now: int, ops: Ops = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """``append_messages`` of the records ``batches`` yields chunk by chunk (building a
        chunk may raise: then nothing is written). Each chunk is handed to the transaction
        as soon as it is built, so IndexedDB writes it while the next one is built."""
        records: list[dict[str, Any]] = []

        def fed() -> Iterator[list[dict[str, Any]]]:
            for chunk in batches:
                records.extend(chunk)
                yield chunk

        first, sess = await self._db.append_batches(session_id, fed(), now, ops)
        for i, r in enumerate(records):
            r["seq"] = first + i
            r["sessionId"] = session_id
        return records, sess

    async def delete_messages(
        self, session_id: str, message_ids: list[str], ops: Ops = None
    ) -> dict[str, Any]:
        return await self._db.call(  # type: ignore[no-any-return]
            "deleteMessages", sessionId=session_id, messageIds=message_ids, ops=ops
        )

    async def import_sessions(
        self, items: list[tuple[dict[str, Any], list[dict[str, Any]]]], replace: bool, ops: Ops = None
    ) -> None:
        await self._db.call("importSessions", items=items, replace=replace, ops=ops)

    async def import_batches(
        self, batches: Iterable[list[tuple[dict[str, Any], list[dict[str, Any]]]]], ops: Ops = None
    ) -> None:
        """``import_sessions`` (``replace=False``) of the sessions ``batches`` yields chunk by
        chunk (building a chunk may raise, e.g. a bad record: then nothing is written). Each
        chunk is handed to the one transaction as soon as it is built, so IndexedDB writes it
        while the next one is checked."""
        await self._db.import_batches(batches, ops)

    async def get_message(self, message_id: str) -> dict[str, Any] | None:
        return await self._db.call("getMessage", messageId=message_id)  # type: ignore[no-any-return]

    async def get_messages(self, message_ids: list[str]) -> list[dict[str, Any] | None]:
        return await self._db.call("getMessages", messageIds=message_ids)  # type: ignore[no-any-return]

    async def list_messages(
        self, session_id: str, offset: int, limit: int | None, newest_first: bool
    ) -> list[dict[str, Any]]:
        return await self._db.call(  # type: ignore[no-any-return]
            "listMessages", sessionId=session_id, offset=offset, limit=limit, newestFirst=newest_first
        )

    async def list_sessions_messages(self, session_ids: list[str]) -> list[dict[str, Any]]:
        return await self._db.call("listSessionsMessages", sessionIds=session_ids)  # type: ignore[no-any-return]

    async def put_facts(self, records: list[dict[str, Any]], ops: Ops = None) -> None:
        await self._db.call("putFacts", records=records, ops=ops)

    async def get_fact(self, fact_id: str) -> dict[str, Any] | None:
        rec = await self._db.call("getFact", factId=fact_id)
        return dict(rec) if rec is not None else None

    async def list_facts(self, user_id: str | None = None) -> list[dict[str, Any]]:
        return [dict(r) for r in await self._db.call("listFacts", userId=user_id)]

    async def delete_facts(self, fact_ids: list[str], ops: Ops = None) -> int:
        return int(await self._db.call("deleteFacts", factIds=fact_ids, ops=ops))

    async def message_ids(self, session_id: str) -> list[str]:
        return [str(i) for i in await self._db.call("messageIds", sessionId=session_id)]

    async def count_messages(self, session_id: str) -> int:
        return int(await self._db.call("countMessages", sessionId=session_id))

    async def apply_changes(
        self, changes: list[dict[str, Any]], kv: dict[str, Any] | None = None
    ) -> list[str]:
        return await self._db.call("applyChanges", changes=changes, kv=kv or {})  # type: ignore[no-any-return]

    async def kv_get(self, key: str) -> Any:
        return await self._db.call("kvGet", key=key)

    async def kv_set(self, key: str, value: Any) -> None:
        await self._db.call("kvSet", key=key, value=value)

    async def outbox_activate(self, now: int) -> dict[str, Any]:
        return await self._db.call("outboxActivate", now=now)  # type: ignore[no-any-return]

    async def outbox_put(self, ops: list[dict[str, Any]]) -> None:
        await self._db.call("outboxPut", ops=ops)

    async def outbox_list(self, limit: int | None = None) -> list[dict[str, Any]]:
        return await self._db.call("outboxList", limit=limit)  # type: ignore[no-any-return]

    async def outbox_update(self, ops: list[dict[str, Any]]) -> None:
        await self._db.call("outboxUpdate", ops=ops)

    async def outbox_ack(self, op_ids: list[str]) -> None:
        await self._db.call("outboxAck", opIds=op_ids)

    async def outbox_to_dead(self, entries: list[dict[str, Any]]) -> None:
        await self._db.call("outboxToDead", entries=entries)

    async def dead_list(self) -> list[dict[str, Any]]:
        return await self._db.call("deadList")  # type: ignore[no-any-return]

    async def dead_replay(self, op_ids: list[str] | None) -> int:
        return int(await self._db.call("deadReplay", opIds=op_ids))

    async def dead_discard(self, op_ids: list[str] | None) -> int:
        return int(await self._db.call("deadDiscard", opIds=op_ids))

    async def outbox_counts(self) -> tuple[int, int]:
        a, b = await self._db.call("outboxCounts")
        return int(a), int(b)

    async def changed_elsewhere(self) -> bool:
        return False  # other tabs' writes arrive through ``subscribe``

    async def close(self) -> None:
        await self._db.close()
