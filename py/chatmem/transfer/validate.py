"""Check a whole chatmem export (or any ``NormalizedImport``) before anything is written.

``validate_export`` accepts the export as a dict or JSON text and returns the
``NormalizedImport`` to write, or raises ``ImportFormatError`` whose message
starts with the path of the first bad value, e.g.
``sessions[3].messages[17].role: must be one of [...]``. Nothing here touches
a store.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping

from ..errors import ImportFormatError, ImportLimitExceeded, LimitExceeded, ValidationError, shown
from ..records.facts import check_fact_record
from ..records.models import ChatMessage, SessionMeta, estimate_tokens, extract_text, validate_message_fields
from ..records.validation import DEFAULT_LIMITS, MESSAGE_KEY_FIELD, Limits, check_value
from ..stores.base import SESSION_PRIVATE_FIELDS
from .export_format import EXPORT_VERSION, FACTS_EXPORT_VERSION
from .normalized import NormalizedImport, NormalizedSession
from .source import describe, load_json

__all__ = [
    "SUPPORTED_VERSIONS",
    "validate_export",
    "validate_loaded_export",
    "validate_normalized",
    "iter_validated",
    "check_session_record",
    "check_message_record",
]

#: export versions this code reads
SUPPORTED_VERSIONS: tuple[str, ...] = (EXPORT_VERSION, FACTS_EXPORT_VERSION)

_SESSION_KEYS = tuple(SessionMeta("", "", 0, 0).to_record())
_MESSAGE_KEYS = tuple(ChatMessage("", "", 0, "user", "", 0).to_record())

_RECORD_TO_FIELD = MESSAGE_KEY_FIELD
_FIELD_TO_RECORD = {v: k for k, v in _RECORD_TO_FIELD.items()}


def _err(
    path: str, message: str, *, field: str | None = None, si: int | None = None, mi: int | None = None
) -> ImportFormatError:
    return ImportFormatError(message, path=path, field=field, session_index=si, message_index=mi)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_limits(
    rec: Any,
    limits: Limits,
    path: str,
    max_bytes: int,
    limit_name: str,
    si: int | None,
    mi: int | None = None,
) -> int:
    """``check_value`` of one record, its error re-raised as an ``ImportFormatError`` with the path."""
    try:
        return check_value(rec, limits, max_bytes=max_bytes, limit_name=limit_name)
    except LimitExceeded as e:
        raise ImportLimitExceeded(
            str(e),
            limit=e.limit,
            maximum=e.maximum,
            path=path,
            field=e.field,
            session_index=si,
            message_index=mi,
        ) from e
    except ValidationError as e:
        raise ImportFormatError(str(e), path=path, field=e.field, session_index=si, message_index=mi) from e


def check_session_record(meta: Any, *, path: str, si: int | None = None) -> dict[str, Any]:
    """Validate one session record; return it with every key, defaults filled in.

    ``messageCount`` is left as given; callers set it from the messages.
    """
    if not isinstance(meta, Mapping):
        raise _err(path, f"must be an object, got {describe(meta)}", si=si)
    for key in meta:
        if key not in _SESSION_KEYS and key not in SESSION_PRIVATE_FIELDS:
            raise _err(
                f"{path}.{key}", f"unknown field (expected one of {list(_SESSION_KEYS)})", field=key, si=si
            )

    def need(key: str, ok: bool, what: str) -> None:
        if not ok:
            raise _err(f"{path}.{key}", f"must be {what}, got {shown(meta.get(key))}", field=key, si=si)

    sid = meta.get("sessionId")
    need("sessionId", isinstance(sid, str) and bool(sid), "a non-empty string")
    for key in ("createdAt", "updatedAt"):
        v = meta.get(key)
        need(key, _is_int(v) and v is not None and v >= 0, "a non-negative integer (ms since the epoch)")
    title = meta.get("title")
    need("title", title is None or isinstance(title, str), "a string")
    for key in ("userId", "characterId"):
        need(key, key not in meta or isinstance(meta[key], str), "a string")
    for key in ("pinned", "archived"):
        need(key, key not in meta or isinstance(meta[key], bool), "true or false")
    tags = meta.get("tags")
    need(
        "tags",
        tags is None or (isinstance(tags, list) and all(isinstance(t, str) for t in tags)),
        "a list of strings",
    )
    for key in ("parentId", "forkReason"):
        need(key, meta.get(key) is None or isinstance(meta[key], str), "a string or null")
    fi = meta.get("forkIndex")
    need("forkIndex", fi is None or (_is_int(fi) and fi >= 0), "a non-negative integer or null")
    mc = meta.get("messageCount")
    need("messageCount", mc is None or (_is_int(mc) and mc >= 0), "a non-negative integer")
    return SessionMeta.from_record(meta).to_record()


def check_message_record(
    rec: Any,
    *,
    path: str,
    session_id: str,
    prev_seq: int,
    si: int | None = None,
    mi: int | None = None,
    json_checked: bool = False,
) -> dict[str, Any]:
    """Validate one message record of session ``session_id``; return it with every key.

    A missing ``sessionId`` is taken from the session, a missing ``seq`` is
    ``prev_seq + 1``, a missing ``tokenCount`` is estimated from the text.
    ``seq`` must grow strictly within a session (gaps are kept: a store never
    reuses a ``seq``). ``json_checked``: ``check_value`` has passed the record already.
    """
    if not isinstance(rec, Mapping):
        raise _err(path, f"must be an object, got {describe(rec)}", si=si, mi=mi)
    for key in rec:
        if key not in _MESSAGE_KEYS:
            raise _err(
                f"{path}.{key}",
                f"unknown field (expected one of {list(_MESSAGE_KEYS)})",
                field=key,
                si=si,
                mi=mi,
            )
    for key in ("id", "role", "content", "createdAt"):
        if key not in rec:
            raise _err(f"{path}.{key}", "is required", field=key, si=si, mi=mi)
    rsid = rec.get("sessionId", session_id)
    if rsid != session_id:
        raise _err(
            f"{path}.sessionId",
            f"must be the session's id {shown(session_id)}, got {shown(rsid)}",
            field="sessionId",
            si=si,
            mi=mi,
        )
    seq = rec.get("seq")
    if seq is None:
        seq = prev_seq + 1
    elif not _is_int(seq) or seq <= prev_seq:
        raise _err(
            f"{path}.seq",
            f"must be an integer greater than {prev_seq}, got {shown(seq)}",
            field="seq",
            si=si,
            mi=mi,
        )
    fields = {f: rec.get(k) for k, f in _RECORD_TO_FIELD.items()}
    try:
        validate_message_fields(rec["role"], rec["content"], fields, json_checked=json_checked)
    except ValidationError as e:
        fname = e.field or "content"
        key = _FIELD_TO_RECORD.get(fname, fname)
        text = str(e)
        if text.startswith(fname + " "):
            text = text[len(fname) + 1 :]
        raise _err(f"{path}.{key}", text, field=key, si=si, mi=mi) from e
    if not _is_int(rec["createdAt"]):
        raise _err(
            f"{path}.createdAt",
            "must be a non-negative integer (ms since the epoch)",
            field="createdAt",
            si=si,
            mi=mi,
        )
    token_count = rec.get("tokenCount")
    if token_count is None:
        token_count = estimate_tokens(extract_text(rec["content"]))
    return ChatMessage.from_record(
        dict(rec, sessionId=session_id, seq=seq, tokenCount=token_count)
    ).to_record()


def validate_normalized(
    sessions: Any, *, path: str = "sessions", limits: Limits = DEFAULT_LIMITS
) -> NormalizedImport:
    """Validate a list of ``{"meta", "messages"}`` objects or ``(meta, messages)`` pairs.

    Session ids and message ids must be unique within the import. Returns the
    records with every key present and ``messageCount`` = number of messages.
    """
    if not isinstance(sessions, list):
        raise _err(path, f"must be an array, got {describe(sessions)}")
    return list(iter_validated(sessions, path=path, limits=limits))


def iter_validated(
    sessions: Iterable[Any], *, path: str = "sessions", limits: Limits = DEFAULT_LIMITS
) -> Iterator[NormalizedSession]:
    """``validate_normalized`` one session at a time, as ``sessions`` yields them: each is
    checked (against the ones before it, for unique ids and the import's size) when asked
    for, so a writer can store one while the next is checked (and abort on an error)."""
    seen_sessions: dict[str, int] = {}
    seen_messages: dict[str, str] = {}
    total = 0
    for si, entry in enumerate(sessions):
        spath = f"{path}[{si}]"
        if isinstance(entry, tuple) and len(entry) == 2:
            meta_in, msgs_in = entry
        elif isinstance(entry, Mapping):
            for key in entry:
                if key not in ("meta", "messages"):
                    raise _err(
                        f"{spath}.{key}", "unknown field (expected 'meta' and 'messages')", field=key, si=si
                    )
            if "meta" not in entry:
                raise _err(f"{spath}.meta", "is required", field="meta", si=si)
            meta_in, msgs_in = entry["meta"], entry.get("messages", [])
        else:
            raise _err(spath, f"must be an object with 'meta' and 'messages', got {describe(entry)}", si=si)
        total += _check_limits(
            meta_in, limits, f"{spath}.meta", limits.max_session_bytes, "max_session_bytes", si
        )
        meta = check_session_record(meta_in, path=f"{spath}.meta", si=si)
        sid = meta["sessionId"]
        if sid in seen_sessions:
            raise _err(
                f"{spath}.meta.sessionId",
                f"duplicate session id {shown(sid)} (also sessions[{seen_sessions[sid]}])",
                field="sessionId",
                si=si,
            )
        seen_sessions[sid] = si
        if not isinstance(msgs_in, list):
            raise _err(
                f"{spath}.messages", f"must be an array, got {describe(msgs_in)}", field="messages", si=si
            )
        msgs: list[dict[str, Any]] = []
        prev = -1
        for mi, rec in enumerate(msgs_in):
            mpath = f"{spath}.messages[{mi}]"
            total += _check_limits(rec, limits, mpath, limits.max_message_bytes, "max_message_bytes", si, mi)
            if total > limits.max_import_bytes:
                raise ImportLimitExceeded(
                    f"the import is larger than {limits.max_import_bytes} bytes",
                    limit="max_import_bytes",
                    maximum=limits.max_import_bytes,
                    path=mpath,
                    session_index=si,
                    message_index=mi,
                )
            m = check_message_record(
                rec, path=mpath, session_id=sid, prev_seq=prev, si=si, mi=mi, json_checked=True
            )
            if m["id"] in seen_messages:
                raise _err(
                    f"{mpath}.id",
                    f"duplicate message id {shown(m['id'])} (also {seen_messages[m['id']]})",
                    field="id",
                    si=si,
                    mi=mi,
                )
            seen_messages[m["id"]] = mpath
            prev = m["seq"]
            msgs.append(m)
        meta["messageCount"] = len(msgs)
        yield meta, msgs


def validate_export(data: Any, *, limits: Limits = DEFAULT_LIMITS) -> NormalizedImport:
    """Check a whole chatmem export (dict or JSON text) and return what to write.

    Raises ``ImportFormatError`` (a ``ValidationError``) naming the path of the
    first bad value; nothing is returned unless every record is valid.
    """
    return validate_loaded_export(load_json(data, limits), limits=limits)


def validate_loaded_export(data: Any, *, limits: Limits = DEFAULT_LIMITS) -> NormalizedImport:
    """``validate_export`` of data ``load_json`` gave (its shape already checked)."""
    if not isinstance(data, Mapping):
        raise _err("$", f"a chatmem export must be an object, got {describe(data)}")
    for key in data:
        if key not in ("version", "exportedAt", "sessions", "facts"):
            raise _err(
                key, "unknown field (expected 'version', 'exportedAt', 'sessions', 'facts')", field=key
            )
    version = data.get("version")
    if version not in SUPPORTED_VERSIONS:
        raise _err(
            "version",
            f"unsupported export version {shown(version)}; this chatmem reads "
            f"{', '.join(SUPPORTED_VERSIONS)}",
            field="version",
        )
    exported_at = data.get("exportedAt")
    if exported_at is not None and (not _is_int(exported_at) or exported_at < 0):
        raise _err(
            "exportedAt", f"must be a non-negative integer (ms), got {shown(exported_at)}", field="exportedAt"
        )
    if "sessions" not in data:
        raise _err("sessions", "is required", field="sessions")
    validate_facts(data)
    return validate_normalized(data["sessions"], limits=limits)


def validate_facts(data: Any) -> list[dict[str, Any]]:
    """The fact records of a chatmem export (none before version 1.1.0), each checked;
    ``ImportFormatError`` naming ``facts[i].field`` for the first bad one."""
    facts = data.get("facts", []) if isinstance(data, Mapping) else []
    if facts and data.get("version") != FACTS_EXPORT_VERSION:
        raise _err("facts", f"facts need export version {FACTS_EXPORT_VERSION}", field="facts")
    if not isinstance(facts, list):
        raise _err("facts", f"must be an array, got {describe(facts)}", field="facts")
    out = []
    seen: set[str] = set()
    for i, rec in enumerate(facts):
        try:
            out.append(check_fact_record(rec))
        except ValidationError as e:
            raise _err(f"facts[{i}].{e.field or 'fact'}", str(e), field=e.field) from e
        if rec["factId"] in seen:
            raise _err(f"facts[{i}].factId", f"duplicate fact id {shown(rec['factId'])}", field="factId")
        seen.add(rec["factId"])
    return out
