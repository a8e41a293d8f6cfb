"""The rules every proposed ``FactOp`` goes through, whichever extractor proposed it.

Pure: ``apply_ops`` takes the facts known for one scope and the operations, and
answers the fact records to write and what happened (a ``FactReport``); the
caller writes them in one transaction.

- **Single-valued slots** (``SINGLE_VALUED``: ``home``, ``job``...) hold one
  value at a time: an ``add`` with another value supersedes the active fact
  (it ends at the new fact's start: ``valid_to`` = ``valid_from`` of the new
  one, ``status="superseded"``, ``superseded_by``). The same value again
  reinforces the fact (its sources grow), never duplicates it.
- **Multi-valued slots** (every other key: ``likes``, ``family.sister``...) hold
  values side by side; the same value again reinforces it.
- ``likes X`` and ``dislikes X`` end each other (``status="invalidated"``).
- ``invalidate`` ends a fact (named by ``fact_id``, or by key and value).
- ``update`` makes a new version of the fact ``fact_id`` with the new value.
- Values compare without case and extra spaces ("Porto" is "porto ").
- A fact keeps the first message it was learnt from and the newest ones
  (``MAX_SOURCES`` in all), so one said a thousand times stays small.
- A fact starts when what taught it was said (the newest of its source
  messages' times, given in ``times``), else at ``now``. A single value learnt
  from something said before the current value began (an older conversation
  read late) goes into the history only: it never displaces a newer value.
- In review mode new facts arrive ``pending``: they end nothing and reach no
  context until approved (``approve`` applies the rules then).
- An operation naming a fact that is not known, or a source that is not
  given, is dropped and reported in ``errors``; the others apply.
- A fact learnt from messages has an id derived from what it says and the
  first message it was learnt from (``learnt_fact_id``): two devices that read
  the same message learn the same fact, and sync merges it instead of keeping
  two copies. Reading that message again (``reprocess``) finds the fact it
  taught, whatever became of it since, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..errors import ValidationError, shown
from ..records.facts import (
    SINGLE_VALUED,
    Fact,
    FactOp,
    FactOrigin,
    FactReport,
    check_importance,
    check_key,
    check_text,
    check_value,
)
from ..records.ids import derived_id

__all__ = [
    "Applied",
    "apply_ops",
    "same_value",
    "EXTRACTED_IMPORTANCE",
    "OPPOSITE",
    "MAX_SOURCES",
    "keep_sources",
]

#: sources kept per fact: the first it was learnt from and the newest ones (a fact said
#: a thousand times keeps a record of bounded size)
MAX_SOURCES = 50


def keep_sources(sources: tuple[str, ...]) -> tuple[str, ...]:
    """``sources`` without repeats, at most ``MAX_SOURCES``: the first and the newest."""
    unique = tuple(dict.fromkeys(sources))
    return unique if len(unique) <= MAX_SOURCES else unique[:1] + unique[-(MAX_SOURCES - 1) :]


#: how much an extracted fact counts unless its extractor says
EXTRACTED_IMPORTANCE = 0.5
#: slots whose same value ends the other's
OPPOSITE = {"likes": "dislikes", "dislikes": "likes"}


def _folded(value: str) -> str:
    return " ".join(value.casefold().split())


def same_value(a: str, b: str) -> bool:
    """Whether two values say the same (case and spacing aside)."""
    return _folded(a) == _folded(b)


def learnt_fact_id(
    user_id: str, character_id: str | None, key: str, value: str, first_source: str, at: int
) -> str:
    """The id of the fact ``key = value`` learnt from the message ``first_source`` (said at
    ``at``): a ULID of that time whose random part is a hash of the rest, the same on every
    device."""
    scope = "\x00".join((user_id, character_id or "", key, _folded(value), first_source))
    return derived_id(at, "fact\x00" + scope)


@dataclass
class Applied:
    """What ``apply_ops`` decided: the records to write (new facts and changed ones, each
    once, in order) and the report."""

    records: list[Fact] = field(default_factory=list)
    report: FactReport = field(default_factory=FactReport)


def apply_ops(
    known: Sequence[Fact],
    ops: Sequence[FactOp],
    *,
    user_id: str,
    character_id: str | None,
    now: int,
    new_id: Callable[[], str],
    times: Mapping[str, int] | None = None,
    origin: FactOrigin = "extracted",
    review: bool = False,
    learnt_ids: bool = True,
) -> Applied:
    """Apply ``ops`` to the facts ``known`` of one user (and character, if facts are kept
    per character); ``times`` maps the source message ids an op may name to when they
    were said. A new fact with sources takes its ``learnt_fact_id`` (unless
    ``learnt_ids=False``), one without takes ``new_id()``."""
    facts = {f.fact_id: f for f in known}
    live: dict[str, dict[str, Fact]] = {}  # key -> the active facts of that slot, by id
    for f in known:
        if f.status == "active":
            live.setdefault(f.key, {})[f.fact_id] = f
    changed: dict[str, Fact] = {}
    out = Applied()
    report = out.report

    def put(f: Fact) -> None:
        facts[f.fact_id] = f
        changed[f.fact_id] = f
        slot = live.setdefault(f.key, {})
        if f.status == "active":
            slot[f.fact_id] = f
        else:
            slot.pop(f.fact_id, None)

    def active(key: str) -> list[Fact]:
        return list(live.get(key, {}).values())

    def end(f: Fact, at: int, status: str, by: str | None = None) -> None:
        put(replace(f, status=status, valid_to=max(at, f.valid_from), updated_at=now, superseded_by=by))  # type: ignore[arg-type]

    for op in ops:
        try:
            key = check_key(op.key)
            value = check_value(op.value)
            text = check_text(op.text) if op.text else value
            importance = EXTRACTED_IMPORTANCE if op.importance is None else check_importance(op.importance)
            unknown = [s for s in op.source_ids if times is not None and s not in times]
            if unknown:
                raise ValidationError(
                    f"{op.op}: source {shown(unknown[0])} is not among the messages read", field="source_ids"
                )
            if op.op not in ("add", "update", "invalidate"):
                raise ValidationError(f"unknown operation {shown(op.op)}", field="op")
            target = None
            if op.fact_id is not None and not isinstance(op.fact_id, str):
                raise ValidationError(
                    f"{op.op}: fact_id must be an id, got {shown(op.fact_id)}", field="fact_id"
                )
            if op.fact_id is not None:
                target = facts.get(op.fact_id)
                if target is None or target.status in ("superseded", "invalidated"):
                    raise ValidationError(f"{op.op}: no current fact {shown(op.fact_id)}", field="fact_id")
        except ValidationError as e:
            report.errors.append(e)
            continue
        at = max((times[s] for s in op.source_ids), default=now) if times else now
        sources = tuple(dict.fromkeys(op.source_ids))

        if op.op == "invalidate":
            ends = [target] if target is not None else [f for f in active(key) if same_value(f.value, value)]
            for f in ends:
                end(f, at, "invalidated")
                report.invalidated += 1
            continue

        if op.op == "update" and target is not None:
            key = target.key
        same = [f for f in active(key) if same_value(f.value, value)]
        if same and op.op == "add":
            f = same[0]
            if sources and set(sources) <= set(f.source_ids):
                continue  # read from these very messages before: nothing new
            put(replace(f, source_ids=keep_sources(f.source_ids + sources), updated_at=now))
            report.reinforced += 1
            continue
        if learnt_ids and sources:
            fid = learnt_fact_id(user_id, character_id, key, value, sources[0], at)
            if fid in facts:  # learnt from this very message before: nothing new
                continue
        else:
            fid = new_id()
        fact = Fact(
            fact_id=fid,
            user_id=user_id,
            character_id=character_id,
            key=key,
            value=value,
            text=text,
            status="pending" if review else "active",
            valid_from=at,
            valid_to=None,
            created_at=now,
            updated_at=now,
            source_ids=sources,
            origin=origin,
            importance=importance,
        )
        if review:
            put(fact)
            report.pending += 1
            continue
        ended = [target] if target is not None else active(key) if key in SINGLE_VALUED else []
        later = [f for f in ended if f.valid_from > at and target is None]
        if later:  # learnt from something said before the current value began: history only
            first = min(later, key=lambda f: f.valid_from)
            put(replace(fact, status="superseded", valid_to=first.valid_from, superseded_by=first.fact_id))
            report.added += 1
            continue
        for f in ended:
            end(f, at, "superseded", fact.fact_id)
            report.superseded += 1
        for f in active(OPPOSITE.get(key, "")):
            if same_value(f.value, value):
                end(f, at, "invalidated")
                report.invalidated += 1
        put(fact)
        report.added += 1
    out.records = list(changed.values())
    return out
