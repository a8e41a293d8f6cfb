"""``mem.messages``: append, read, page, count and stream messages.

``append`` and ``append_many`` are one store transaction each: the ``seq`` is
assigned inside it, the session's ``updated_at`` and ``message_count`` move in
the same transaction, and when the call returns the messages are durable.
"""

from __future__ import annotations

import builtins
from typing import Any, AsyncIterator, Iterable, Iterator, Mapping, cast

from ..errors import MessageNotFound, SessionNotFound, ValidationError, shown
from ..records.models import ChatMessage, SessionMeta, estimate_tokens, extract_text, validate_message_fields
from ..records.validation import check_id, check_value
from ..stores.base import ORDER_KEY, Ops, StreamingStore
from ..stores.shared import Core
from .sessions import DEFAULT_TITLE

__all__ = ["Messages"]

#: up to this many messages a write hands the store its ops built (cheap); a bigger
#: batch hands a function the store calls only if the outbox is on
EAGER_OPS = 16


#: a batch is built and handed to a store that writes as it goes (IndexedDB) this many at a time
BATCH_CHUNK = 1000


def _check_session_id(session_id: Any) -> None:
    check_id(session_id, "session_id")


def _check_page(offset: Any, limit: Any) -> None:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValidationError("offset must be an int >= 0", field="offset")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValidationError("limit must be an int >= 0 or None", field="limit")


class Messages:
    """``mem.messages``: append (one or many), read, list, count and stream a session's messages."""

    def __init__(self, core: Core):
        self._core = core

    def build_record(
        self, role: Any, content: Any, fields: Mapping[str, Any], *, index: int | None = None, now: int
    ) -> dict[str, Any]:
        """Validate one message and turn it into a record without ``seq`` or session."""
        limits = self._core.limits
        try:
            check_value(
                {"role": role, "content": content, **fields}, limits, max_bytes=limits.max_message_bytes
            )
        except ValidationError as e:
            if index is not None:
                e.index = index
                e.args = (f"item {index}: {e}",)
            raise
        validate_message_fields(role, content, fields, index=index, json_checked=True)
        token_count = fields.get("token_count")
        if token_count is None:
            token_count = estimate_tokens(extract_text(content))
        return {
            "id": fields.get("id") or self._core.ids(),
            "sessionId": None,
            "seq": None,
            "role": role,
            "content": content,
            "createdAt": fields.get("created_at", now),
            "provider": fields.get("provider"),
            "model": fields.get("model"),
            "slices": fields.get("slices"),
            "tool_results": fields.get("tool_results"),
            "categorization": fields.get("categorization"),
            "toolCalls": fields.get("tool_calls"),
            "toolCallId": fields.get("tool_call_id"),
            "name": fields.get("name"),
            "metadata": fields.get("metadata"),
            "tokenCount": token_count,
        }

    async def _write(
        self, session_id: str, records: list[dict[str, Any]], now: int, create: dict[str, Any] | None
    ) -> list[ChatMessage]:
        _check_session_id(session_id)
        ops: Ops
        if create or len(records) <= EAGER_OPS:
            ops = (
                [dict(op, only_if_created=True) for op in await self._core.outbox.session_created(create)]
                if create
                else []
            )
            await self._core.outbox.stamp(records)  # after the session's create: HLCs grow
            ops += await self._core.outbox.messages_created(session_id, records)
        else:  # a batch: its ops are built only if the outbox is on
            await self._core.outbox.stamp(records)
            ops = await self._core.outbox.messages_created_later(session_id, records)
        stored, sess = await self._core.store.append_messages(session_id, records, now, create, ops)
        return self._written(session_id, stored, sess)

    def _written(
        self, session_id: str, stored: list[dict[str, Any]], sess: dict[str, Any]
    ) -> list[ChatMessage]:
        """After an acknowledged append: the caches and listeners told, the messages answered."""
        self._core.remember_meta(sess)
        self._core.changed("messages-appended", session_id, {"messages": stored, "session": sess})
        return [ChatMessage.from_record(r) for r in stored]

    async def append(
        self, session_id: str, role: str, content: str | list[dict[str, Any]], **fields: Any
    ) -> ChatMessage:
        """Append one message; its ``seq`` is the session's next position.

        ``fields`` are the model's optional fields (``id``, ``created_at``,
        ``provider``, ``model``, ``slices``, ``tool_results``,
        ``categorization``, ``tool_calls``, ``tool_call_id``, ``name``,
        ``metadata``, ``token_count``). Durable when it returns.
        """
        now = self._core.now()
        rec = self.build_record(role, content, fields, now=now)
        (msg,) = await self._write(session_id, [rec], now, None)
        return msg

    async def add(
        self, session_id: str, role: str, content: str | list[dict[str, Any]], **fields: Any
    ) -> ChatMessage:
        """Like ``append``, but creates a session with this id first when there is none
        (in the same transaction): the ``ContextStore.add_message`` semantics."""
        now = self._core.now()
        rec = self.build_record(role, content, fields, now=now)
        create = SessionMeta(session_id=session_id, title=DEFAULT_TITLE, created_at=now, updated_at=now)
        (msg,) = await self._write(session_id, [rec], now, create.to_record())
        return msg

    async def append_many(self, session_id: str, items: Iterable[Mapping[str, Any]]) -> list[ChatMessage]:
        """Append a batch in one transaction: all of it or, on any error, none of it."""
        now = self._core.now()
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
            raise ValidationError(f"items must be a list of messages, got {shown(items)}", field="items")
        items = items if isinstance(items, list) else list(items)
        store = self._core.store
        if not store.streams_batches or len(items) <= EAGER_OPS:
            records = [r for chunk in self._batch(items, now) for r in chunk]
            if not records:
                if not await self._core.store.get_session(session_id):
                    raise SessionNotFound(session_id)
                return []
            return await self._write(session_id, records, now, None)
        # a store that writes each chunk while the next is built (IndexedDB): validation
        # runs inside the write, and a failure aborts its transaction
        _check_session_id(session_id)
        built: list[dict[str, Any]] = []
        ops = await self._core.outbox.messages_created_later(session_id, built)
        clock = await self._core.outbox.clock()

        def chunks() -> Iterator[list[dict[str, Any]]]:
            for chunk in self._batch(items, now):
                for r in chunk:
                    r[ORDER_KEY] = clock.now()
                built.extend(chunk)
                yield chunk

        stored, sess = await cast(StreamingStore, store).append_batches(session_id, chunks(), now, ops)
        return self._written(session_id, stored, sess)

    def _batch(self, items: list[Mapping[str, Any]], now: int) -> Iterator[list[dict[str, Any]]]:
        """The batch's records, validated and built ``BATCH_CHUNK`` at a time."""
        chunk: list[dict[str, Any]] = []
        seen: set[str] = set()
        for i, item in enumerate(items):
            if type(item) is not dict and not isinstance(item, Mapping):
                raise ValidationError(f"item {i}: must be a dict", index=i)
            fields = {k: v for k, v in item.items() if k not in ("role", "content")}
            if "role" not in item or "content" not in item:
                raise ValidationError(
                    f"item {i}: needs 'role' and 'content'",
                    index=i,
                    field="role" if "role" not in item else "content",
                )
            rec = self.build_record(item["role"], item["content"], fields, index=i, now=now)
            if rec["id"] in seen:
                raise ValidationError(
                    f"item {i}: duplicate id {shown(rec['id'])} in batch", field="id", index=i
                )
            seen.add(rec["id"])
            chunk.append(rec)
            if len(chunk) == BATCH_CHUNK:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    async def get(self, message_id: str) -> ChatMessage:
        if not isinstance(message_id, str):
            raise ValidationError("message_id must be a string", field="message_id")
        rec = await self._core.store.get_message(message_id)
        if rec is None:
            raise MessageNotFound(message_id)
        return ChatMessage.from_record(rec)

    async def list(
        self, session_id: str, *, limit: int | None = 50, offset: int = 0, newest_first: bool = False
    ) -> builtins.list[ChatMessage]:
        """A page of the session's messages in ``seq`` order (reversed if ``newest_first``)."""
        return [
            ChatMessage.from_record(r) for r in await self.records(session_id, limit, offset, newest_first)
        ]

    async def records(
        self, session_id: str, limit: int | None = 50, offset: int = 0, newest_first: bool = False
    ) -> builtins.list[dict[str, Any]]:
        """Like ``list`` but the stored records, served from the page cache when fresh."""
        _check_page(offset, limit)
        key = (session_id, offset, limit, newest_first)
        await self._core.check_external()
        page = self._core.cached_page(key)
        if page is None:
            if self._core.cached_meta(session_id) is None and not await self._core.store.get_session(
                session_id
            ):
                raise SessionNotFound(session_id)
            page = await self._core.store.list_messages(session_id, offset, limit, newest_first)
            self._core.remember_page(key, page)
        return page

    async def count(self, session_id: str) -> int:
        await self._core.check_external()
        meta = self._core.cached_meta(session_id)
        if meta is None:
            meta = await self._core.store.get_session(session_id)
            if meta is None:
                raise SessionNotFound(session_id)
            self._core.remember_meta(meta)
        return int(meta.get("messageCount", 0))

    async def stream(self, session_id: str, *, batch_size: int = 50) -> AsyncIterator[ChatMessage]:
        """Yield the session's messages in order, reading ``batch_size`` at a time."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValidationError("batch_size must be an int >= 1", field="batch_size")
        if not await self._core.store.get_session(session_id):
            raise SessionNotFound(session_id)
        offset = 0
        while True:
            batch = await self._core.store.list_messages(session_id, offset, batch_size, False)
            for rec in batch:
                yield ChatMessage.from_record(rec)
            if len(batch) < batch_size:
                return
            offset += len(batch)
