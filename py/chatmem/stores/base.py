"""The contract every durable store implements.

Records are the JSON-ready dicts of ``chatmem.records.models`` (``SessionMeta.to_record``
/ ``ChatMessage.to_record``). Session records carry one private field,
``nextSeq``: the next ``seq`` to hand out in that session. Message records carry
one, ``ORDER_KEY`` (``hlc``): the HLC of the message's create, its place in the
session's one order (``chatmem.stores.changes``). ``seq`` is the position in that
order, 0-based and dense: appends take the next one; deleting messages closes
the gap and a pulled message that belongs earlier moves the later ones
(``Store.message_ids`` lets a derived view find what moved).

Every write method is one atomic transaction: when it returns, the write is
durable (as durable as the store is); when it raises, nothing was written.
Every write method takes ``ops``: sync operations to enqueue in the ``outbox``
*in the same transaction*, but only once sync was turned on for this store:
the write's transaction reads the ``kv`` key ``OUTBOX_KEY`` (set for good by
``outbox_activate``) and drops the ops while it is absent, so a store that
never synced holds no outbox at all. A message ``create`` op keeps ``data``
``None``: it refers to the stored message (immutable) instead of copying it;
``chatmem.sync.wire`` reads the record when the op is pushed. ``ops`` may
also be a zero-argument function answering the list: the store calls it in
the write's transaction only if the outbox is on (a big write by a store that
never synced builds no ops at all).

Outbox records: ``{op_id, type, resource, id, session_id, data, timestamp,
hlc, attempts, next_attempt_at, last_error}``, kept in FIFO order; dead
letters add ``reason`` and ``response``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol, TypeVar, cast, runtime_checkable

T = TypeVar("T")

__all__ = [
    "StreamingStore",
    "Store",
    "SESSION_PRIVATE_FIELDS",
    "ORDER_KEY",
    "MESSAGE_PRIVATE_FIELDS",
    "OUTBOX_KEY",
    "clone",
    "gate_ops",
    "snapshot_of",
    "next_seq_after",
]

#: kv key whose presence means "sync was turned on: enqueue ops"; its value is the
#: backfill snapshot ``{"at": ms, "sessions": [[sessionId, nextSeq], ...]}``
OUTBOX_KEY = "sync.outbox"

#: record fields that belong to the store, not to the user-visible model
SESSION_PRIVATE_FIELDS = ("nextSeq",)
#: the message record field holding the HLC the message was written at (its create
#: operation's): the store's own, never exported or pushed as the message's data
ORDER_KEY = "hlc"
MESSAGE_PRIVATE_FIELDS = (ORDER_KEY,)

#: a write's outbox ops: the list, a function answering it (called only if the outbox is on), or none
Ops = list[dict[str, Any]] | Callable[[], list[dict[str, Any]]] | None


def clone(value: T) -> T:
    """A copy of a JSON-shaped value (dicts, lists, scalars): much cheaper than ``deepcopy``."""
    if isinstance(value, dict):
        return cast(T, {k: clone(v) for k, v in value.items()})
    if isinstance(value, list):
        return cast(T, [clone(v) for v in value])
    return value


def gate_ops(ops: Ops, created: bool = True) -> list[dict[str, Any]]:
    """The ops a write enqueues: those marked ``only_if_created`` only if it created the session.

    Call only when ``OUTBOX_KEY`` is set (in the write's transaction).
    """
    if callable(ops):
        ops = ops()
    if not ops:
        return []
    out = []
    for op in ops:
        if op.pop("only_if_created", False) and not created:
            continue
        out.append(op)
    return out


def snapshot_of(sessions: Iterable[dict[str, Any]], now: int) -> dict[str, Any]:
    """The ``OUTBOX_KEY`` value: every session with the ``nextSeq`` it had (sorted by id).

    Messages below that ``seq`` are the backfill's; later ones have outbox ops.
    """
    pairs = sorted([s["sessionId"], int(s.get("nextSeq", s.get("messageCount", 0)) or 0)] for s in sessions)
    return {"at": now, "sessions": pairs}


def next_seq_after(messages: list[dict[str, Any]]) -> int:
    """The ``nextSeq`` of a session holding ``messages`` (seq may have gaps)."""
    return max((int(m["seq"]) for m in messages), default=-1) + 1


@runtime_checkable
class Store(Protocol):
    """The durable store every backend implements (memory, SQLite, IndexedDB): sessions,
    messages, facts, ``kv`` and the sync outbox, each write one transaction."""

    #: short name shown in errors and benchmarks: "memory", "sqlite", "indexeddb"
    kind: str
    #: what a runtime keys the store's shared resources by (the page's drain lock and index
    #: cache): the IndexedDB database's name, "chatmem" for the others
    name: str

    @property
    def path(self) -> str | None:
        """The file that holds the store (SQLite's), None for a store that is not a file."""
        ...

    #: True when ``StreamingStore.append_batches`` and ``import_batches`` hand each chunk to
    #: the open transaction as it is built (IndexedDB: written while the next is built)
    streams_batches: bool

    async def changed_elsewhere(self) -> bool:
        """True if another process committed to the store since the last call (SQLite's
        ``PRAGMA data_version``); the caller then drops what it cached."""
        ...

    def subscribe(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(session_id)`` whenever another tab changes a session of the store (the
        page's IndexedDB); a store no other tab shares never calls it."""
        ...

    async def create_session(
        self, record: dict[str, Any], messages: list[dict[str, Any]], ops: Ops = None
    ) -> None:
        """Insert a new session and (optionally) its first messages, whose ``seq`` are set.

        Raises ``DuplicateId`` if the session id or a message id exists.
        """
        ...

    async def get_session(self, session_id: str) -> dict[str, Any] | None: ...

    async def all_sessions(self) -> list[dict[str, Any]]:
        """Every session record, in no particular order."""
        ...

    async def update_session(
        self, session_id: str, changes: dict[str, Any], ops: Ops = None
    ) -> dict[str, Any]:
        """Merge ``changes`` into the record; return the new record. ``SessionNotFound`` if absent."""
        ...

    async def delete_session(self, session_id: str, ops: Ops = None) -> bool:
        """Delete the session and its messages; False if it did not exist (then nothing is enqueued)."""
        ...

    async def clear_session(self, session_id: str, now: int, ops: Ops = None) -> dict[str, Any]:
        """Delete the session's messages and reset its counters; keep the session."""
        ...

    async def append_messages(
        self,
        session_id: str,
        records: list[dict[str, Any]],
        now: int,
        create: dict[str, Any] | None = None,
        ops: Ops = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Assign ``seq`` inside the transaction, insert all records, bump the session.

        The session's ``updatedAt`` becomes ``now`` and ``messageCount`` grows by
        ``len(records)``. If the session does not exist, it is created from
        ``create`` when given, else ``SessionNotFound``. Returns the stored
        message records (a store may complete and return the given dicts: they
        are the caller's fresh records) and the new session record.
        """
        ...

    async def delete_messages(
        self, session_id: str, message_ids: list[str], ops: Ops = None
    ) -> dict[str, Any]:
        """Delete some messages of a session (the later ones move up: ``seq`` stays dense);
        returns the session."""
        ...

    async def import_sessions(
        self, items: list[tuple[dict[str, Any], list[dict[str, Any]]]], replace: bool, ops: Ops = None
    ) -> None:
        """Write whole sessions (records with ``seq`` set) in one transaction.

        ``replace``: a session whose id exists is replaced with its messages
        (restoring a backup); otherwise an existing id is ``DuplicateId``.
        """
        ...

    async def get_message(self, message_id: str) -> dict[str, Any] | None: ...

    async def get_messages(self, message_ids: list[str]) -> list[dict[str, Any] | None]:
        """The records of ``message_ids`` (``None`` where absent), in order, in one read."""
        ...

    async def list_messages(
        self, session_id: str, offset: int, limit: int | None, newest_first: bool
    ) -> list[dict[str, Any]]:
        """Messages of a session by ``seq`` (descending if ``newest_first``), paged."""
        ...

    async def list_sessions_messages(self, session_ids: list[str]) -> list[dict[str, Any]]:
        """Every message of each session (the sessions in the given order, each by
        ``seq``; an unknown id has none), in one read: how a derivation of the query
        index reads many small sessions at once."""
        ...

    async def count_messages(self, session_id: str) -> int: ...

    async def message_ids(self, session_id: str) -> list[str]:
        """The ids of the session's messages by ``seq``, without reading the messages: how
        a derived view (the query index) finds what moved, came or went."""
        ...

    # facts (``chatmem.facts``): one record per fact version, keyed by ``factId``
    async def put_facts(self, records: list[dict[str, Any]], ops: Ops = None) -> None:
        """Insert or replace fact records, all in one transaction."""
        ...

    async def get_fact(self, fact_id: str) -> dict[str, Any] | None: ...

    async def list_facts(self, user_id: str | None = None) -> list[dict[str, Any]]:
        """Every fact record (of ``user_id`` only, if given), in no particular order."""
        ...

    async def delete_facts(self, fact_ids: list[str], ops: Ops = None) -> int:
        """Delete fact records in one transaction; how many there were."""
        ...

    async def apply_changes(
        self, changes: list[dict[str, Any]], kv: dict[str, Any] | None = None
    ) -> list[str]:
        """Apply changes pulled from a sync server (``chatmem.stores.changes`` rules) and
        set ``kv`` (e.g. the new cursor), all in one transaction, enqueueing nothing.

        Returns the ids of the sessions it touched (to drop cached views of them).
        """
        ...

    async def kv_get(self, key: str) -> Any: ...

    async def kv_set(self, key: str, value: Any) -> None: ...

    # ------------------------------------------------------------------ outbox
    async def outbox_activate(self, now: int) -> dict[str, Any]:
        """Turn the outbox on for good and return the ``OUTBOX_KEY`` snapshot.

        In one transaction: if the key is set, its value; else every session's
        ``nextSeq`` is recorded under it (``snapshot_of``). A write before this
        is in the snapshot, a write after it enqueues its ops: nothing falls between.
        """
        ...

    async def outbox_put(self, ops: list[dict[str, Any]]) -> None: ...

    async def outbox_list(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Pending operations, oldest first."""
        ...

    async def outbox_update(self, ops: list[dict[str, Any]]) -> None:
        """Rewrite pending operations (attempts, next attempt, last error) by ``op_id``."""
        ...

    async def outbox_ack(self, op_ids: list[str]) -> None:
        """Remove acknowledged operations."""
        ...

    async def outbox_to_dead(self, entries: list[dict[str, Any]]) -> None:
        """Move operations from the outbox to ``dead_letter`` (entries carry ``reason``/``response``)."""
        ...

    async def dead_list(self) -> list[dict[str, Any]]: ...

    async def dead_replay(self, op_ids: list[str] | None) -> int:
        """Move dead letters (all when None) back to the end of the outbox, attempts reset."""
        ...

    async def dead_discard(self, op_ids: list[str] | None) -> int: ...

    async def outbox_counts(self) -> tuple[int, int]:
        """(pending operations, dead letters)."""
        ...

    async def close(self) -> None: ...


class StreamingStore(Store, Protocol):
    """A store whose big writes take their records chunk by chunk (``streams_batches``)."""

    async def append_batches(
        self, session_id: str, batches: Iterable[list[dict[str, Any]]], now: int, ops: Ops = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """``append_messages`` of the records ``batches`` yields chunk by chunk (building a
        chunk may raise: then nothing is written)."""
        ...

    async def import_batches(
        self, batches: Iterable[list[tuple[dict[str, Any], list[dict[str, Any]]]]], ops: Ops = None
    ) -> None:
        """``import_sessions`` (``replace=False``) of the sessions ``batches`` yields chunk by chunk."""
        ...
