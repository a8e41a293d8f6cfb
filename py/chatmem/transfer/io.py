"""Export and import against a store: ``mem.export``, ``mem.export_iter`` and
``mem.import_sessions``.

An import is validated whole before anything is written, then written in one
store transaction (IndexedDB: ``strict`` durability), with its sync operations
in the same transaction; where the store takes an import in chunks (IndexedDB,
``import_batches``) and the sessions are new, each chunk is written in that one
transaction while the next is checked, and a bad value aborts it: nothing is
written either way. ``preserve_ids=True`` restores a backup: a session
whose stored copy is identical is skipped, one that differs is replaced, so
importing the same file twice changes nothing the second time. A ChatGPT,
Claude or AIRI conversation has ids derived from its source's, so importing it
again finds it here: it takes only the messages it lacks (each such session in
a transaction of its own, after the new sessions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterable, Iterator, cast

from ..errors import SessionNotFound
from ..records.hlc import HybridLogicalClock
from ..records.validation import check_ids
from ..stores.base import ORDER_KEY, StreamingStore
from .adapters import iter_import, prepare_import
from .export_format import aiter_export_json, build_export, message_record, session_record
from .normalized import NormalizedImport, NormalizedSession
from .source import load_json
from .validate import validate_facts

if TYPE_CHECKING:
    from ..stores.shared import Core

__all__ = ["Transfer", "ImportReport"]


@dataclass
class ImportReport:
    """What an import wrote. Durable when returned."""

    format: str
    #: sessions written: new ones, and those of ``sessions_replaced``
    sessions_imported: int = 0
    #: messages written
    messages_imported: int = 0
    #: sessions already here and unchanged: nothing written
    sessions_skipped: int = 0
    #: sessions already here that changed: replaced (a restored backup) or given the
    #: messages they lacked (a ChatGPT, Claude or AIRI conversation imported again)
    sessions_replaced: int = 0
    #: the ids of the sessions written
    session_ids: list[str] = field(default_factory=list)
    #: facts written (a chatmem export of version 1.1.0 carries them)
    facts_imported: int = 0


class Transfer:
    def __init__(self, core: Core):
        self._core = core

    async def _metas(self, session_ids: Iterable[str] | None) -> list[dict[str, Any]]:
        if session_ids is None:
            recs = await self._core.store.all_sessions()
        else:
            recs = []
            for sid in check_ids(session_ids, "session_ids"):
                rec = await self._core.store.get_session(sid)
                if rec is None:
                    raise SessionNotFound(sid)
                recs.append(rec)
        recs.sort(key=lambda r: (r["createdAt"], r["sessionId"]))
        return recs

    async def _facts(self, session_ids: Iterable[str] | None) -> list[dict[str, Any]]:
        """The facts an export carries: all of them in a whole export, none in a partial one."""
        return await self._core.store.list_facts() if session_ids is None else []

    async def export(self, session_ids: Iterable[str] | None = None) -> dict[str, Any]:
        """The original's ``ChatSessionsExport`` (version "1.0.0") as a dict; a whole export
        that has facts to carry is version "1.1.0" with ``"facts"``."""
        pairs = []
        for meta in await self._metas(session_ids):
            msgs = await self._core.store.list_messages(meta["sessionId"], 0, None, False)
            pairs.append((meta, msgs))
        return build_export(pairs, self._core.now(), await self._facts(session_ids))

    async def export_iter(
        self, session_ids: Iterable[str] | None = None, *, batch_size: int = 500
    ) -> AsyncIterator[str]:
        """The same export as JSON text chunks, reading messages page by page.

        ``"".join(chunks)`` is the canonical JSON of ``export()`` (same ``exportedAt``).
        """
        metas = await self._metas(session_ids)
        facts = await self._facts(session_ids)
        store = self._core.store

        async def pages(sid: str) -> AsyncIterator[dict[str, Any]]:
            offset = 0
            while True:
                page = await store.list_messages(sid, offset, batch_size, False)
                for m in page:
                    yield m
                if len(page) < batch_size:
                    return
                offset += len(page)

        async for chunk in aiter_export_json(
            self._core.now(), ((m, pages(m["sessionId"])) for m in metas), facts=facts
        ):
            yield chunk

    async def _unchanged(self, rec: dict[str, Any], msgs: list[dict[str, Any]]) -> bool | None:
        """True if the stored session equals ``rec`` + ``msgs``; None if it is not stored."""
        stored = await self._core.store.get_session(rec["sessionId"])
        if stored is None:
            return None
        if session_record(stored) != session_record(rec):
            return False
        have = await self._core.store.list_messages(rec["sessionId"], 0, None, False)
        return [message_record(m) for m in have] == [message_record(m) for m in msgs]

    async def import_sessions(
        self, data: Any, *, preserve_ids: bool = False, format: str | None = None
    ) -> ImportReport:
        """Import a chatmem, AIRI, ChatGPT or Claude export (dict, list, str or bytes JSON).

        Imported sessions (all but a restored backup, ``preserve_ids=True``) count as active
        from the import on: their ``updatedAt`` is the import's time, so a retention policy
        ages them from the day they arrived, not from their original dates (``createdAt``
        and every message's ``createdAt`` keep those)."""
        data = load_json(data, self._core.limits)
        store = self._core.store
        batched = (
            cast(StreamingStore, store).import_batches if store.streams_batches and not preserve_ids else None
        )
        now = self._core.now()
        # what is here already: a conversation imported before (its ids derive from the
        # source's) takes only the messages it lacks
        present = set() if preserve_ids else {r["sessionId"] for r in await self._core.store.all_sessions()}
        again: NormalizedImport = []
        todo: NormalizedImport = []
        clock = await self._core.outbox.clock()
        at: dict[str, str] = {}  # each session's HLC, before its messages' (``ORDER_KEY``)
        if batched is not None:  # fresh sessions, written while the rest is still being checked
            name, sessions = iter_import(data, format=format, ids=self._core.ids, limits=self._core.limits)
            facts = validate_facts(data) if name == "chatmem" else []
            sessions = _new_only(_arrived(_dense(sessions), now), present, again)
            report = ImportReport(format=name)
            # reads ``todo`` and ``at`` once they are filled
            ops = await self._core.outbox.import_later(todo, at)
            await batched(_chunks(_stamped(sessions, clock, at), todo), ops=ops)
        else:
            name, normalized = prepare_import(
                data, format=format, preserve_ids=preserve_ids, ids=self._core.ids, limits=self._core.limits
            )
            facts = validate_facts(data) if name == "chatmem" else []
            normalized = list(_dense(iter(normalized)))
            if not preserve_ids:
                normalized = list(_new_only(_arrived(iter(normalized), now), present, again))
            report = ImportReport(format=name)
            for rec, msgs in normalized:
                same = await self._unchanged(rec, msgs) if preserve_ids else None
                if same:
                    report.sessions_skipped += 1
                    continue
                if same is False:
                    report.sessions_replaced += 1
                todo.append((rec, msgs))
            if todo:
                todo = list(_stamped(iter(todo), clock, at))
                # built only if the store finds its outbox on (a profile that never synced skips them)
                ops = await self._core.outbox.import_later(todo, at)
                await self._core.store.import_sessions(todo, replace=preserve_ids, ops=ops)
        if todo:
            for rec, msgs in todo:
                self._core.invalidate(rec["sessionId"])
                self._core.changed("session-created", rec["sessionId"], rec)
                if msgs:
                    self._core.changed(
                        "messages-appended",
                        rec["sessionId"],
                        {"messages": msgs, "session": rec, "imported": True},
                    )
        report.sessions_imported = len(todo)
        report.messages_imported = sum(len(m) for _, m in todo)
        report.session_ids = [r["sessionId"] for r, _ in todo]
        if facts:
            report.facts_imported = await self._import_facts(facts, preserve_ids)
        for rec, msgs in again:
            added = await self._add_missing(rec["sessionId"], msgs, now)
            if not added:
                report.sessions_skipped += 1
                continue
            report.sessions_replaced += 1
            report.sessions_imported += 1
            report.messages_imported += added
            report.session_ids.append(rec["sessionId"])
        return report

    async def _import_facts(self, facts: list[dict[str, Any]], preserve_ids: bool) -> int:
        """Write an export's facts: as they are when restoring a backup (replacing those with
        the same ids), else under new ids, linked among themselves, without sources (the
        messages they came from were copied under new ids)."""
        if not preserve_ids:
            fresh = {f["factId"]: self._core.ids() for f in facts}
            facts = [
                dict(
                    f,
                    factId=fresh[f["factId"]],
                    supersededBy=fresh.get(f.get("supersededBy") or ""),
                    sourceIds=[],
                )
                for f in facts
            ]
        await self._core.store.put_facts(facts, await self._core.outbox.facts_written(facts))
        return len(facts)

    async def _add_missing(self, session_id: str, msgs: list[dict[str, Any]], now: int) -> int:
        """Append to a stored session the imported messages it does not hold (by id), in
        the import's order after its own; how many were added."""
        store = self._core.store
        have = {m["id"] for m in await store.list_messages(session_id, 0, None, False)}
        records = [dict(m, sessionId=None, seq=None) for m in msgs if m["id"] not in have]
        if not records:
            return 0
        await self._core.outbox.stamp(records)
        ops = await self._core.outbox.messages_created(session_id, records)
        stored, sess = await store.append_messages(session_id, records, now, None, ops)
        self._core.invalidate(session_id)
        self._core.remember_meta(sess)
        self._core.changed(
            "messages-appended", session_id, {"messages": stored, "session": sess, "imported": True}
        )
        return len(stored)


#: messages per chunk handed to a store's ``import_batches``
IMPORT_CHUNK = 2000


def _arrived(sessions: Iterator[NormalizedSession], now: int) -> Iterator[NormalizedSession]:
    """Each imported session active from ``now`` (its ``updatedAt``), as it arrives here."""
    for rec, msgs in sessions:
        yield dict(rec, updatedAt=max(int(rec.get("updatedAt") or 0), now)), msgs


def _dense(sessions: Iterator[NormalizedSession]) -> Iterator[NormalizedSession]:
    """Each session's messages numbered 0..n-1 in their order (an export may have gaps
    where messages were deleted): ``seq`` is a position, the same on every device."""
    for rec, msgs in sessions:
        if any(m["seq"] != i for i, m in enumerate(msgs)):
            msgs = [dict(m, seq=i) for i, m in enumerate(msgs)]
        yield dict(rec, nextSeq=len(msgs)) if "nextSeq" in rec else rec, msgs


def _new_only(
    sessions: Iterator[NormalizedSession], present: set[str], again: NormalizedImport
) -> Iterator[NormalizedSession]:
    """The sessions whose id is not in ``present``; the others go to ``again``. A session
    met twice in one import (the same conversation twice in a file) is kept once."""
    for rec, msgs in sessions:
        if rec["sessionId"] in present:
            again.append((rec, msgs))
        else:
            present.add(rec["sessionId"])
            yield rec, msgs


def _stamped(
    sessions: Iterator[NormalizedSession], clock: HybridLogicalClock, at: dict[str, str]
) -> Iterator[NormalizedSession]:
    """``sessions`` with the HLCs they are written at: the session's in ``at``, then each
    message's (``ORDER_KEY``) in order."""
    for rec, msgs in sessions:
        at[rec["sessionId"]] = clock.now()
        for m in msgs:
            m[ORDER_KEY] = clock.now()
        yield rec, msgs


def _chunks(sessions: Iterator[NormalizedSession], into: NormalizedImport) -> Iterator[NormalizedImport]:
    """``sessions`` in chunks of about ``IMPORT_CHUNK`` messages, each also kept in ``into``."""
    chunk: NormalizedImport = []
    size = 0
    for session in sessions:
        into.append(session)
        chunk.append(session)
        size += len(session[1]) + 1
        if size >= IMPORT_CHUNK:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk
