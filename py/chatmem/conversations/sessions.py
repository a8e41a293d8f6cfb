"""``mem.sessions``: create, read, list, update, archive, delete and fork sessions.

Every method that returns has completed its store transaction: the change is
durable (IndexedDB: committed; SQLite: committed; memory: in process only).
"""

from __future__ import annotations

import builtins
from typing import Any, Iterable, Mapping

from ..errors import SessionNotFound, ValidationError, shown
from ..records.models import ChatMessage, SessionMeta
from ..records.validation import check_id, check_ids, check_session_record
from ..stores.shared import Core

__all__ = ["Sessions", "DEFAULT_TITLE"]

DEFAULT_TITLE = "New Conversation"
#: kv key of the profile's active session id
ACTIVE_KEY = "active_session"


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def _check_str(value: Any, name: str, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string, got {type(value).__name__}", field=name)


def _check_tags(tags: Any) -> list[str]:
    if isinstance(tags, (str, bytes, Mapping)) or not isinstance(tags, Iterable):
        raise ValidationError("tags must be a list of strings", field="tags")
    out = list(tags)
    if not all(isinstance(t, str) for t in out):
        raise ValidationError("tags must be a list of strings", field="tags")
    return list(dict.fromkeys(out))


def _check_bool(value: Any, name: str) -> None:
    if not isinstance(value, bool):
        raise ValidationError(f"{name} must be a bool, got {type(value).__name__}", field=name)


def _check_int(value: Any, name: str, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValidationError(f"{name} must be an int >= {minimum}, got {shown(value)}", field=name)


class Sessions:
    """``mem.sessions``: create, read, list, update, archive, pin and delete sessions."""

    def __init__(self, core: Core):
        self._core = core

    async def _record(self, session_id: str) -> dict[str, Any]:
        _check_str(session_id, "session_id")
        await self._core.check_external()
        rec = self._core.cached_meta(session_id)
        if rec is None:
            rec = await self._core.store.get_session(session_id)
            if rec is None:
                raise SessionNotFound(session_id)
            self._core.remember_meta(rec)
        return rec

    async def create(
        self,
        *,
        title: str | None = None,
        character_id: str = "default",
        user_id: str = "local",
        tags: Iterable[str] = (),
        session_id: str | None = None,
        created_at: int | None = None,
    ) -> SessionMeta:
        """Create an empty session. Durable when it returns."""
        _check_str(title, "title", optional=True)
        _check_str(character_id, "character_id")
        _check_str(user_id, "user_id")
        tag_list = _check_tags(tags)
        if session_id is not None:
            check_id(session_id, "session_id")
        if created_at is not None:
            _check_int(created_at, "created_at")
        now = created_at if created_at is not None else self._core.now()
        meta = SessionMeta(
            session_id=session_id or self._core.ids(),
            title=title if title is not None else DEFAULT_TITLE,
            created_at=now,
            updated_at=now,
            user_id=user_id,
            character_id=character_id,
            tags=tag_list,
        )
        rec = meta.to_record()
        check_session_record(rec, self._core.limits)
        ops = await self._core.outbox.session_created(rec)
        await self._core.store.create_session(rec, [], ops)
        self._core.remember_meta(dict(rec, nextSeq=0))
        self._core.changed("session-created", meta.session_id, rec)
        return meta

    async def get(self, session_id: str) -> SessionMeta:
        """The session's metadata; ``SessionNotFound`` if there is none."""
        return SessionMeta.from_record(await self._record(session_id))

    async def active(self) -> str | None:
        """The id of the profile's active session (the original's ``activeSessionId``),
        or ``None`` when none is set or it was deleted since. Stored with the profile's
        settings: it survives a reload or a restart."""
        sid = await self._core.store.kv_get(ACTIVE_KEY)
        if not isinstance(sid, str) or not await self.exists(sid):
            return None
        return sid

    async def set_active(self, session_id: str | None) -> None:
        """Make ``session_id`` the active session (``None`` clears it). Durable when it
        returns; ``SessionNotFound`` (nothing written) for an unknown id."""
        if session_id is not None:
            await self._record(session_id)
        await self._core.store.kv_set(ACTIVE_KEY, session_id)

    async def exists(self, session_id: str) -> bool:
        try:
            await self._record(session_id)
        except SessionNotFound:
            return False
        return True

    async def list(
        self,
        *,
        limit: int | None = 20,
        offset: int = 0,
        user_id: str | None = None,
        character_id: str | None = None,
        archived: bool | None = False,
        pinned_first: bool = True,
        tag: str | None = None,
    ) -> builtins.list[SessionMeta]:
        """Sessions, newest ``updated_at`` first (pinned on top when ``pinned_first``).

        ``archived=False`` lists the unarchived, ``True`` only the archived,
        ``None`` both. ``tag`` keeps only sessions carrying that tag.
        """
        if limit is not None:
            _check_int(limit, "limit")
        _check_int(offset, "offset")
        if archived is not None:
            _check_bool(archived, "archived")
        recs = await self._core.store.all_sessions()
        out = [
            SessionMeta.from_record(r)
            for r in recs
            if (user_id is None or r.get("userId") == user_id)
            and (character_id is None or r.get("characterId") == character_id)
            and (archived is None or bool(r.get("archived")) == archived)
            and (tag is None or tag in (r.get("tags") or []))
        ]
        out.sort(key=lambda m: (m.updated_at, m.session_id), reverse=True)
        if pinned_first:
            out.sort(key=lambda m: not m.pinned)  # stable: keeps recency within each group
        return out[offset:] if limit is None else out[offset : offset + limit]

    async def update(
        self,
        session_id: str,
        *,
        title: str = UNSET,
        pinned: bool = UNSET,
        archived: bool = UNSET,
        tags: Iterable[str] = UNSET,
    ) -> SessionMeta:
        """Change metadata. ``updated_at`` (last activity) is left as it is."""
        changes: dict[str, Any] = {}
        if title is not UNSET:
            _check_str(title, "title")
            changes["title"] = title
        if pinned is not UNSET:
            _check_bool(pinned, "pinned")
            changes["pinned"] = pinned
        if archived is not UNSET:
            _check_bool(archived, "archived")
            changes["archived"] = archived
        if tags is not UNSET:
            changes["tags"] = _check_tags(tags)
        _check_str(session_id, "session_id")
        if not changes:
            return await self.get(session_id)
        check_session_record(changes, self._core.limits, partial=True)
        ops = [await self._core.outbox.op("update", "session", session_id, session_id, changes)]
        rec = await self._core.store.update_session(session_id, changes, ops)
        self._core.remember_meta(rec)
        self._core.changed("session-updated", session_id, changes)
        return SessionMeta.from_record(rec)

    async def archive(self, session_id: str) -> SessionMeta:
        return await self.update(session_id, archived=True)

    async def unarchive(self, session_id: str) -> SessionMeta:
        return await self.update(session_id, archived=False)

    async def pin(self, session_id: str, pinned: bool = True) -> SessionMeta:
        return await self.update(session_id, pinned=pinned)

    async def delete(self, session_id: str, *, forget_facts: bool = True) -> None:
        """Delete the session and all its messages. ``SessionNotFound`` if absent. What was
        learnt only from them is forgotten (``forget_facts=False``, as retention does: the
        history is pruned, the facts stay)."""
        _check_str(session_id, "session_id")
        gone = await self._core.store.message_ids(session_id) if forget_facts else []
        ops = [await self._core.outbox.op("delete", "session", session_id, session_id, None)]
        if not await self._core.store.delete_session(session_id, ops):
            raise SessionNotFound(session_id)
        self._core.invalidate(session_id)
        self._core.changed("session-deleted", session_id)
        await self._core.forget(gone)

    async def clear(self, session_id: str) -> SessionMeta:
        """Delete every message of the session and keep the session itself (what was learnt
        only from them is forgotten)."""
        _check_str(session_id, "session_id")
        gone = await self._core.store.message_ids(session_id)
        ops = await self._core.outbox.messages_deleted(session_id, gone)
        rec = await self._core.store.clear_session(session_id, self._core.now(), ops)
        self._core.invalidate(session_id)
        self._core.remember_meta(rec)
        self._core.changed("session-cleared", session_id, rec)
        await self._core.forget(gone)
        return SessionMeta.from_record(rec)

    async def delete_messages(
        self, session_id: str, message_ids: builtins.list[str], *, forget_facts: bool = True
    ) -> SessionMeta:
        """Delete some messages of a session; the later ones move up (``seq`` stays dense,
        as on every device that holds the same messages). Durable when it returns. What was
        learnt only from them is forgotten, unless ``forget_facts=False`` (retention)."""
        _check_str(session_id, "session_id")
        message_ids = check_ids(message_ids, "message_ids")
        ops = await self._core.outbox.messages_deleted(session_id, message_ids)
        rec = await self._core.store.delete_messages(session_id, message_ids, ops)
        self._core.invalidate(session_id)
        self._core.remember_meta(rec)
        self._core.changed("messages-deleted", session_id, list(message_ids))
        if forget_facts:
            await self._core.forget(list(message_ids))
        return SessionMeta.from_record(rec)

    async def _copy_into_new(
        self, parent: SessionMeta, records: builtins.list[dict[str, Any]], **meta_fields: Any
    ) -> SessionMeta:
        """A new child session of ``parent`` holding copies (new ids, seq from 0) of ``records``.

        One transaction with its sync operations; durable when it returns.
        """
        now = self._core.now()
        new_id = self._core.ids()
        copies = [dict(r, id=self._core.ids(), sessionId=new_id, seq=i) for i, r in enumerate(records)]
        await self._core.outbox.stamp(copies)
        fields: dict[str, Any] = dict(title=parent.title, tags=list(parent.tags))
        fields.update(meta_fields)
        meta = SessionMeta(
            session_id=new_id,
            created_at=now,
            updated_at=now,
            user_id=parent.user_id,
            character_id=parent.character_id,
            parent_id=parent.session_id,
            message_count=len(copies),
            **fields,
        )
        rec = meta.to_record()
        check_session_record(rec, self._core.limits)
        ops = await self._core.outbox.session_created(rec)
        ops += await self._core.outbox.messages_created(new_id, copies)
        await self._core.store.create_session(rec, copies, ops)
        self._core.changed("session-created", new_id, rec)
        if copies:
            self._core.changed("messages-appended", new_id, {"messages": copies, "session": rec})
        return meta

    async def archive_copy(self, session_id: str, messages: builtins.list[ChatMessage]) -> SessionMeta:
        """Keep copies of ``messages`` in a new archived session whose parent is ``session_id``."""
        parent = await self.get(session_id)
        records = []
        for m in messages:
            rec = m.to_record()
            rec["metadata"] = dict(rec.get("metadata") or {}, originalId=m.id, originalSeq=m.seq)
            records.append(rec)
        return await self._copy_into_new(
            parent,
            records,
            title=f"{parent.title} (archived history)",
            archived=True,
            fork_reason="retention-archive",
        )

    async def fork(
        self, session_id: str, *, at_index: int | None = None, reason: str | None = None
    ) -> SessionMeta:
        """A new session holding copies of messages ``0 .. at_index-1`` (all when None).

        The parent is left untouched; the fork records ``parent_id``,
        ``fork_index`` and ``fork_reason``. Durable when it returns.
        """
        _check_str(reason, "reason", optional=True)
        parent = await self.get(session_id)
        count = await self._core.store.count_messages(session_id)
        if at_index is None:
            at_index = count
        _check_int(at_index, "at_index")
        if at_index > count:
            raise ValidationError(
                f"at_index {shown(at_index)} is past the end of the session ({count} messages)",
                field="at_index",
            )
        source = await self._core.store.list_messages(session_id, 0, at_index, False)
        return await self._copy_into_new(parent, source, fork_index=at_index, fork_reason=reason)
