"""The contract every durable store implements.

Records are the JSON-ready dicts of ``chatmem.models`` (``SessionMeta.to_record``
/ ``ChatMessage.to_record``). Session records carry one private field,
``nextSeq``: the next ``seq`` to hand out in that session, which only grows
(so a ``seq`` is never reused) and is reset by ``clear_session``.

Every write method is one atomic transaction: when it returns, the write is
durable (as durable as the store is); when it raises, nothing was written.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Store", "SESSION_PRIVATE_FIELDS"]

#: record fields that belong to the store, not to the user-visible model
SESSION_PRIVATE_FIELDS = ("nextSeq",)


@runtime_checkable
class Store(Protocol):
    #: short name shown in errors and benchmarks: "memory", "sqlite", "indexeddb"
    kind: str

    async def create_session(self, record: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        """Insert a new session and (optionally) its first messages, whose ``seq`` are set.

        Raises ``DuplicateId`` if the session id or a message id exists.
        """
        ...

    async def get_session(self, session_id: str) -> dict[str, Any] | None: ...

    async def all_sessions(self) -> list[dict[str, Any]]:
        """Every session record, in no particular order."""
        ...

    async def update_session(self, session_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Merge ``changes`` into the record; return the new record. ``SessionNotFound`` if absent."""
        ...

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session and its messages; False if it did not exist."""
        ...

    async def clear_session(self, session_id: str, now: int) -> dict[str, Any]:
        """Delete the session's messages and reset its counters; keep the session."""
        ...

    async def append_messages(
        self,
        session_id: str,
        records: list[dict[str, Any]],
        now: int,
        create: dict[str, Any] | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Assign ``seq`` inside the transaction, insert all records, bump the session.

        The session's ``updatedAt`` becomes ``now`` and ``messageCount`` grows by
        ``len(records)``. If the session does not exist, it is created from
        ``create`` when given, else ``SessionNotFound``. Returns the stored
        message records and the new session record.
        """
        ...

    async def get_message(self, message_id: str) -> dict[str, Any] | None: ...

    async def list_messages(
        self, session_id: str, offset: int, limit: int | None, newest_first: bool
    ) -> list[dict[str, Any]]:
        """Messages of a session by ``seq`` (descending if ``newest_first``), paged."""
        ...

    async def count_messages(self, session_id: str) -> int: ...

    async def kv_get(self, key: str) -> Any: ...

    async def kv_set(self, key: str, value: Any) -> None: ...

    async def close(self) -> None: ...
