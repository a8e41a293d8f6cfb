"""``mem.facts``: what chatmem knows about the person, readable and correctable.

Every write is one store transaction (all versions it touches, or none) and is
durable when it returns. A fact's versions form a chain: ``update`` with a new
value or text ends the current version (``status="superseded"``, ``valid_to``,
``superseded_by``) and starts the next one, so ``history`` reads back what was
true when; ``delete`` removes the whole chain.
"""

from __future__ import annotations

import asyncio
import builtins
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import FactNotFound, SessionNotFound, ValidationError, shown
from ..records.facts import (
    FACT_STATUSES,
    Fact,
    FactOp,
    FactOrigin,
    FactReport,
    check_importance,
    check_key,
    check_text,
    check_value,
)
from ..records.models import ChatMessage
from ..records.validation import check_id
from ..stores.base import ORDER_KEY
from .extract import BATCH, REFUSED_KEY, WATERMARK_KEY, FactExtractor, is_refused, refused_entry, unread
from .offline import OfflineFactExtractor
from .rank import rank
from .rules import apply_ops

if TYPE_CHECKING:
    from ..embedding.embedders import Embedder
    from ..stores.shared import Core

__all__ = ["Facts", "FactHit", "NOTE_KEY", "USER_IMPORTANCE"]

#: the slot of a fact the user adds without naming one
NOTE_KEY = "note"
#: how much a fact the user states counts, unless they say otherwise
USER_IMPORTANCE = 0.8


#: seconds of quiet after the user's last message before learning from it in the background
DEBOUNCE_S = 1.0
#: how much a search's keyword share counts against its cosine
KEYWORD_WEIGHT = 0.5
#: the least cosine that makes a fact a match without a shared word
SEMANTIC_FLOOR = 0.35


@dataclass(frozen=True)
class FactHit:
    """A fact a search found: its ``score`` and the parts (``keyword`` share, ``semantic`` cosine)."""

    fact: Fact
    score: float
    keyword: float
    semantic: float


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class Facts:
    """``mem.facts``: what the user has told about themselves, kept current, visible and correctable."""

    def __init__(
        self,
        core: Core,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        embedder: Callable[[], Embedder | None] = lambda: None,
    ):
        self._core = core
        self._embedder = embedder
        self._vectors: dict[tuple[str, str, int], list[float]] = {}  # (model, fact id, updated at)
        self._sleep = sleep
        #: whether facts are learnt in the background after user messages are appended
        self.auto = False
        #: seconds of quiet before a background run (a burst of messages is read at once)
        self.debounce = DEBOUNCE_S
        #: what the last background run did (its ``errors`` are kept, never raised)
        self.last_report: FactReport | None = None
        self._waiting: set[str] = set()  # sessions with user messages not read yet
        self._learning: asyncio.Task[None] | None = None
        self._reading = asyncio.Lock()
        core.listeners.append(self._heard)
        #: whether a fact learnt with one character is known to every character
        self.share_across_characters = True
        #: whether learnt facts wait for ``approve`` (``pending``) before they count
        self.review = False
        #: what ``extract`` asks (``chatmem.facts.extract.FactExtractor``): by default the
        #: offline one (English first-person statements, no model)
        self.extractor: FactExtractor = OfflineFactExtractor()
        core.forgetters.append(self._forget)

    async def _forget(self, message_ids: builtins.list[str]) -> None:
        """The user deleted these messages: a learnt fact whose every source is among them
        goes; one with other sources keeps those (a fact the user stated stays)."""
        gone = set(message_ids)
        drop, keep = [], []
        for f in map(Fact.from_record, await self._core.store.list_facts()):
            if f.origin == "user" or not gone & set(f.source_ids):
                continue
            left = tuple(s for s in f.source_ids if s not in gone)
            if left:
                keep.append(replace(f, source_ids=left, updated_at=self._core.now()))
            else:
                drop.append(f.fact_id)
        if keep:
            await self._write([f.to_record() for f in keep])
        if drop:
            await self._drop(drop)

    async def _write(self, records: builtins.list[dict[str, Any]]) -> None:
        """Store fact records in one transaction, with the ops that sync them."""
        await self._core.store.put_facts(records, await self._core.outbox.facts_written(records))

    async def _drop(self, fact_ids: builtins.list[str]) -> None:
        """Delete fact records in one transaction, with the tombstones that sync it."""
        await self._core.store.delete_facts(fact_ids, await self._core.outbox.facts_deleted(fact_ids))

    def configure(
        self,
        *,
        extractor: FactExtractor | None = None,
        auto: bool | None = None,
        review: bool | None = None,
        share_across_characters: bool | None = None,
        debounce: float | None = None,
    ) -> None:
        """How facts are learnt: ``extractor`` (what proposes them); ``auto=True`` learns in
        the background after user messages are appended (``debounce`` seconds after the last
        one), never delaying the append; ``review=True`` keeps learnt facts ``pending`` until
        ``approve``; ``share_across_characters=False`` keeps them per character. What is not
        given stays as it was."""
        if debounce is not None:
            if (
                not isinstance(debounce, (int, float))
                or isinstance(debounce, bool)
                or not 0 <= debounce <= 3600
            ):
                raise ValidationError(
                    f"debounce must be 0-3600 seconds, got {shown(debounce)}", field="debounce"
                )
            self.debounce = float(debounce)
        for name, v in (
            ("auto", auto),
            ("review", review),
            ("share_across_characters", share_across_characters),
        ):
            if v is not None and not isinstance(v, bool):
                raise ValidationError(f"{name} must be true or false, got {shown(v)}", field=name)
        if extractor is not None:
            if not isinstance(extractor, FactExtractor):
                raise ValidationError(
                    f"extractor must have an async extract(messages, known), got {shown(extractor)}",
                    field="extractor",
                )
            self.extractor = extractor
        if auto is not None:
            self.auto = auto
        if review is not None:
            self.review = review
        if share_across_characters is not None:
            self.share_across_characters = share_across_characters

    # ------------------------------------------------------------------ in the background
    def _heard(self, kind: str, session_id: str, payload: Any) -> None:
        """A write happened: user messages appended wake the background learner (not those
        of an import: learning from a whole history is the caller's choice, ``extract``)."""
        if not self.auto or kind != "messages-appended" or not isinstance(payload, dict):
            return
        if payload.get("imported"):
            return
        if not any(m.get("role") == "user" for m in payload.get("messages") or ()):
            return
        self._waiting.add(session_id)
        if self._learning is None or self._learning.done():
            self._learning = asyncio.ensure_future(self._learn())

    async def _learn(self) -> None:
        """Wait for quiet, then read what is waiting; again while more arrived meanwhile."""
        while self._waiting:
            await self._sleep(self.debounce)
            waiting, self._waiting = sorted(self._waiting), set()
            for sid in waiting:
                try:
                    self.last_report = await self.extract(sid)
                except Exception as e:  # noqa: BLE001 - the next append tries again; never raised into it
                    self.last_report = FactReport(errors=[e])

    async def settled(self) -> None:
        """Wait until the background learner has read every user message appended so far."""
        while self._learning is not None and not self._learning.done():
            await asyncio.shield(self._learning)

    async def close(self) -> None:
        """Stop learning in the background (what was read is kept)."""
        self._waiting.clear()
        if self._learning is not None and not self._learning.done():
            self._learning.cancel()
            try:
                await self._learning
            except asyncio.CancelledError:
                pass

    # ------------------------------------------------------------------ learning
    async def apply(
        self,
        ops: Sequence[FactOp],
        *,
        user_id: str = "local",
        character_id: str | None = None,
        times: Mapping[str, int] | None = None,
        origin: FactOrigin = "extracted",
    ) -> FactReport:
        """Apply what an extractor proposes, by the rules (``chatmem.facts.rules``), for
        ``user_id`` (and ``character_id``, when facts are kept per character); ``times``
        maps the source message ids the operations may name to when they were said. All
        of it is written in one transaction; an operation the rules refuse is reported
        in ``errors`` and the others apply."""
        check_id(user_id, "user_id")
        scope = None if self.share_across_characters else character_id
        if scope is not None:
            check_id(scope, "character_id")
        known = await self._scoped(user_id, scope)
        applied = apply_ops(
            known,
            ops,
            user_id=user_id,
            character_id=scope,
            now=self._core.now(),
            new_id=self._core.ids,
            times=times,
            origin=origin,
            review=self.review,
        )
        if applied.records:
            await self._write([f.to_record() for f in applied.records])
        return applied.report

    async def extract(self, session_id: str | None = None, *, reprocess: bool = False) -> FactReport:
        """Learn from the user messages not read yet (of one session, or of all): the
        extractor's proposals go through ``apply``, and each session's watermark moves past
        what was read, so running it again reads nothing new. ``reprocess=True`` reads every
        user message again (what the user deleted or rejected is still never proposed
        again from the same messages). An extractor that fails leaves its messages unread
        for the next run and is reported in ``errors``."""
        async with self._reading:  # one extraction at a time (the background one and a call)
            return await self._extract(session_id, reprocess)

    async def _extract(self, session_id: str | None, reprocess: bool) -> FactReport:
        extractor = self.extractor
        store = self._core.store
        if session_id is not None:
            check_id(session_id, "session_id")
            meta = await store.get_session(session_id)
            if meta is None:
                raise SessionNotFound(session_id)
            metas = [meta]
        else:
            metas = sorted(await store.all_sessions(), key=lambda m: (m["createdAt"], m["sessionId"]))
        report = FactReport()
        marks = dict(await store.kv_get(WATERMARK_KEY) or {})
        refused = list(await store.kv_get(REFUSED_KEY) or [])
        for meta in metas:
            sid = meta["sessionId"]
            mark = None if reprocess else marks.get(sid)
            todo = unread(await self._since(sid, mark), mark)
            for start in range(0, len(todo), BATCH):
                batch = todo[start : start + BATCH]
                msgs = [ChatMessage.from_record(r) for r in batch]
                scope = None if self.share_across_characters else meta.get("characterId")
                known = await self._scoped(meta.get("userId") or "local", scope)
                try:
                    ops = await extractor.extract(
                        msgs, [f for f in known if f.status in ("active", "pending")]
                    )
                    if not isinstance(ops, list) or not all(isinstance(op, FactOp) for op in ops):
                        raise ValidationError(
                            f"an extractor must answer a list of FactOp, got {shown(ops)}", field="extractor"
                        )
                except Exception as e:  # noqa: BLE001 - any extractor failure: unread, reported, nothing written
                    report.errors.append(e)
                    break
                done = await self.apply(
                    [op for op in ops if not is_refused(op, refused)],
                    user_id=meta.get("userId") or "local",
                    character_id=meta.get("characterId"),
                    times={m.id: m.created_at for m in msgs},
                )
                for name in ("added", "superseded", "invalidated", "reinforced", "pending"):
                    setattr(report, name, getattr(report, name) + getattr(done, name))
                report.errors += done.errors
                report.processed += len(batch)
                marks[sid] = max(str(batch[-1].get(ORDER_KEY) or ""), str(marks.get(sid) or ""))
                await store.kv_set(WATERMARK_KEY, marks)
                await asyncio.sleep(0)  # a long history yields to the page between batches
        return report

    async def _since(self, session_id: str, mark: str | None) -> builtins.list[dict[str, Any]]:
        """The session's message records after ``mark`` (an order key), oldest first: read
        from the newest back, a page at a time, so a long conversation that gained a message
        costs a page, not the whole conversation."""
        store = self._core.store
        if mark is None:
            return await store.list_messages(session_id, 0, None, False)
        out: builtins.list[dict[str, Any]] = []
        offset = 0
        while True:
            page = await store.list_messages(session_id, offset, BATCH, True)
            for r in page:
                if str(r.get(ORDER_KEY) or "") <= mark:
                    return out[::-1]
                out.append(r)
            if len(page) < BATCH:
                return out[::-1]
            offset += len(page)

    async def sources(self, fact_id: str) -> builtins.list[ChatMessage]:
        """The messages a fact was learnt from that are still stored, in the order it names them."""
        fact = await self.get(fact_id)
        found = await self._core.store.get_messages(list(fact.source_ids)) if fact.source_ids else []
        return [ChatMessage.from_record(r) for r in found if r is not None]

    async def _refuse(self, facts: builtins.list[Fact]) -> None:
        """Remember learnt facts the user deleted or rejected (never proposed again from the same messages)."""
        learnt = [refused_entry(f) for f in facts if f.origin != "user" and f.source_ids]
        if learnt:
            refused = list(await self._core.store.kv_get(REFUSED_KEY) or [])
            await self._core.store.kv_set(REFUSED_KEY, refused + learnt)

    async def _scoped(self, user_id: str, character_id: str | None) -> builtins.list[Fact]:
        """Every fact version of one scope: a user's, and one character's or everyone's."""
        return [
            f
            for f in map(Fact.from_record, await self._core.store.list_facts(user_id))
            if f.character_id == character_id
        ]

    async def approve(self, fact_id: str) -> Fact:
        """A pending fact counts from now on, by the rules (it may supersede another)."""
        fact = await self.get(fact_id)
        if fact.status != "pending":
            raise ValidationError(f"fact {shown(fact_id)} is {fact.status}, not pending", field="fact_id")
        known = [f for f in await self._scoped(fact.user_id, fact.character_id) if f.fact_id != fact_id]
        op = FactOp(
            "add", fact.key, fact.value, fact.text, source_ids=fact.source_ids, importance=fact.importance
        )
        applied = apply_ops(
            known,
            [op],
            user_id=fact.user_id,
            character_id=fact.character_id,
            now=self._core.now(),
            new_id=lambda: fact_id,
            times={s: fact.valid_from for s in fact.source_ids},
            origin=fact.origin,
            learnt_ids=False,
        )
        records = [
            replace(f, created_at=fact.created_at) if f.fact_id == fact_id else f for f in applied.records
        ]
        if not any(f.fact_id == fact_id for f in records):  # it said what an active fact says
            await self._write([f.to_record() for f in records])
            await self._drop([fact_id])
            return next(f for f in records if f.status == "active")
        await self._write([f.to_record() for f in records])
        return next(f for f in records if f.fact_id == fact_id)

    async def reject(self, fact_id: str) -> None:
        """Discard a pending fact."""
        fact = await self.get(fact_id)
        if fact.status != "pending":
            raise ValidationError(f"fact {shown(fact_id)} is {fact.status}, not pending", field="fact_id")
        await self._refuse([fact])
        await self._drop([fact_id])

    # ------------------------------------------------------------------ reading
    async def get(self, fact_id: str) -> Fact:
        """One fact version by id; ``FactNotFound`` if there is none."""
        check_id(fact_id, "fact_id")
        rec = await self._core.store.get_fact(fact_id)
        if rec is None:
            raise FactNotFound(fact_id)
        return Fact.from_record(rec)

    async def list(
        self,
        *,
        user_id: str | None = None,
        character_id: str | None = None,
        key: str | None = None,
        at: int | None = None,
        status: str | None = "active",
    ) -> builtins.list[Fact]:
        """Facts, oldest first. ``user_id``: that user's only; ``character_id``: those known
        to that character (its own and those known to every character); ``key``: one slot.
        ``status``: one status, or ``None`` for every one. ``at=ts``: what was true then
        (``valid_from <= ts < valid_to``), whatever has become of it since (with the default
        ``status``, every status but ``pending``)."""
        if user_id is not None:
            check_id(user_id, "user_id")
        if character_id is not None:
            check_id(character_id, "character_id")
        if key is not None:
            check_key(key)
        if status is not None and status not in FACT_STATUSES:
            raise ValidationError(
                f"status must be one of {sorted(FACT_STATUSES)} or None, got {shown(status)}", field="status"
            )
        if at is not None and (not isinstance(at, int) or isinstance(at, bool)):
            raise ValidationError(f"at must be a time in ms, got {shown(at)}", field="at")
        out = []
        for rec in await self._core.store.list_facts(user_id):
            f = Fact.from_record(rec)
            if character_id is not None and f.character_id not in (None, character_id):
                continue
            if key is not None and f.key != key:
                continue
            if at is not None:
                if (
                    not f.true_at(at)
                    or f.status == "pending"
                    or (status not in (None, "active") and f.status != status)
                ):
                    continue
            elif status is not None and f.status != status:
                continue
            out.append(f)
        out.sort(key=lambda f: (f.valid_from, f.created_at, f.fact_id))
        return out

    async def search(
        self, query: str, *, k: int = 10, user_id: str | None = None, semantic: bool = True
    ) -> builtins.list[FactHit]:
        """The active facts that answer ``query`` best, by keyword (the share of the query's
        words the fact has) and meaning (cosine with the embedder's vectors, when there is
        one and ``semantic``), with their scores; facts that match neither are not listed."""
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("query must be a non-empty string", field="query")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValidationError(f"k must be a positive int, got {shown(k)}", field="k")
        held = await self.list(user_id=user_id)
        if not held:
            return []
        keyword = {
            r["factId"]: parts["relevance"]
            for r, _, parts in rank([f.to_record() for f in held], query, self._core.now())
        }
        near = await self._similarity(query, held) if semantic else {}
        hits = []
        for f in held:
            kw, sem = keyword.get(f.fact_id, 0.0), near.get(f.fact_id, 0.0)
            if kw <= 0 and sem < SEMANTIC_FLOOR:
                continue
            hits.append(
                FactHit(f, round(KEYWORD_WEIGHT * kw + (1 - KEYWORD_WEIGHT) * max(sem, 0.0), 4), kw, sem)
            )
        hits.sort(key=lambda h: (-h.score, h.fact.fact_id))
        return hits[:k]

    async def _similarity(self, query: str, facts: builtins.list[Fact]) -> dict[str, float]:
        """Cosine of each fact's text with ``query`` (vectors of fact versions kept)."""
        embedder = self._embedder()
        if embedder is None:
            return {}
        model = embedder.model
        todo = [f for f in facts if (model, f.fact_id, f.updated_at) not in self._vectors]
        texts = [query] + [f.text for f in todo]
        vectors = await embedder.embed(texts)
        if len(self._vectors) > 50_000:
            self._vectors.clear()
        for f, v in zip(todo, vectors[1:]):
            self._vectors[(model, f.fact_id, f.updated_at)] = v
        q = vectors[0]
        return {f.fact_id: _cosine(q, self._vectors[(model, f.fact_id, f.updated_at)]) for f in facts}

    async def history(self, fact_id: str) -> builtins.list[Fact]:
        """Every version of the fact ``fact_id`` belongs to, oldest first."""
        start = await self.get(fact_id)
        return await self._chain(start)

    async def _chain(self, fact: Fact) -> builtins.list[Fact]:
        versions = {
            f.fact_id: f for f in map(Fact.from_record, await self._core.store.list_facts(fact.user_id))
        }
        before = {f.superseded_by: f for f in versions.values() if f.superseded_by}
        chain = [fact]
        while (prev := before.get(chain[0].fact_id)) is not None and prev not in chain:
            chain.insert(0, prev)
        while (nxt := versions.get(chain[-1].superseded_by or "")) is not None and nxt not in chain:
            chain.append(nxt)
        return chain

    # ------------------------------------------------------------------ the user's own
    async def add(
        self,
        text: str,
        *,
        key: str | None = None,
        value: str | None = None,
        user_id: str | None = None,
        character_id: str | None = None,
        importance: float | None = None,
        pinned: bool = False,
    ) -> Fact:
        """A fact the user states (origin ``"user"``), true from now. ``key`` defaults to
        ``"note"`` and ``value`` to the text."""
        text = check_text(text)
        key = check_key(key if key is not None else NOTE_KEY)
        value = check_value(value if value is not None else text)
        user = check_id(user_id if user_id is not None else "local", "user_id")
        if character_id is not None:
            check_id(character_id, "character_id")
        if not isinstance(pinned, bool):
            raise ValidationError(f"pinned must be true or false, got {shown(pinned)}", field="pinned")
        now = self._core.now()
        fact = Fact(
            fact_id=self._core.ids(),
            user_id=user,
            character_id=character_id,
            key=key,
            value=value,
            text=text,
            status="active",
            valid_from=now,
            valid_to=None,
            created_at=now,
            updated_at=now,
            origin="user",
            importance=USER_IMPORTANCE if importance is None else check_importance(importance),
            pinned=pinned,
        )
        await self._write([fact.to_record()])
        return fact

    async def update(
        self,
        fact_id: str,
        *,
        text: str | None = None,
        value: str | None = None,
        importance: float | None = None,
        pinned: bool | None = None,
    ) -> Fact:
        """Correct a fact. A new value or text is a new version (the old one superseded from
        now, so ``history`` keeps it); importance and pinning change the version in place.
        Returns the fact as it now is."""
        old = await self.get(fact_id)
        if old.status in ("superseded", "invalidated"):
            raise ValidationError(
                f"fact {shown(fact_id)} is {old.status}: correct its current version", field="fact_id"
            )
        new_text = check_text(text) if text is not None else old.text
        new_value = check_value(value) if value is not None else old.value
        new_importance = check_importance(importance) if importance is not None else old.importance
        if pinned is not None and not isinstance(pinned, bool):
            raise ValidationError(f"pinned must be true or false, got {shown(pinned)}", field="pinned")
        new_pinned = old.pinned if pinned is None else pinned
        now = self._core.now()
        if (new_text, new_value) == (old.text, old.value):
            fact = replace(old, importance=new_importance, pinned=new_pinned, updated_at=now)
            await self._write([fact.to_record()])
            return fact
        fact = replace(
            old,
            fact_id=self._core.ids(),
            text=new_text,
            value=new_value,
            importance=new_importance,
            pinned=new_pinned,
            origin="user",
            valid_from=now,
            valid_to=None,
            created_at=now,
            updated_at=now,
            superseded_by=None,
        )
        ended = replace(old, status="superseded", valid_to=now, updated_at=now, superseded_by=fact.fact_id)
        await self._write([ended.to_record(), fact.to_record()])
        return fact

    async def delete(self, fact_id: str) -> int:
        """Forget a fact: every version of it goes. Returns how many versions were removed."""
        chain = await self.history(fact_id)
        await self._refuse(chain)
        await self._drop([f.fact_id for f in chain])
        return len(chain)

    def __repr__(self) -> str:
        return "<Facts>"
