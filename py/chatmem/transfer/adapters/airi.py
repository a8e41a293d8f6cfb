"""Project AIRI's own export: ``{"format": "chat-sessions-index:v1", "index", "sessions"}``.

``sessions`` maps a session id to ``{meta: ChatSessionMeta, messages:
ChatHistoryItem[]}``; ``index.characters[*].sessions`` may list more session
metas (without messages): those are imported as empty sessions so nothing is
dropped. Message fields map one to one (``slices``, ``tool_results``,
``categorization``, ``tool_calls``, ``tool_call_id``, ``name``,
``createdAt``); AIRI's ``role: "error"`` becomes an ``assistant`` message with
``metadata.airiRole = "error"``; ``context``, ``tools``,
``providerTranscript`` and any other extra keys are kept in ``metadata``,
with the AIRI ids (``{"source": "airi", "sourceId": ...}``). AIRI's
``cloudChatId`` / ``cloudMaxSeq`` have no place in ``SessionMeta`` and are
not kept.
"""

from __future__ import annotations

from typing import Any

from ...errors import ValidationError, shown
from ...records.ids import IdGenerator
from ...records.models import ROLES, validate_message_fields
from ..normalized import NormalizedImport, RecordBuilder
from ..source import describe
from ._common import UNTITLED, fail

__all__ = ["NAME", "FORMAT", "detect", "to_normalized"]

NAME = "airi"
FORMAT = "chat-sessions-index:v1"
_KNOWN = {
    "role",
    "content",
    "createdAt",
    "id",
    "slices",
    "tool_results",
    "categorization",
    "tool_calls",
    "tool_call_id",
    "name",
}
_TO_METADATA = ("context", "tools", "providerTranscript")


def detect(data: Any) -> bool:
    """An object whose ``format`` is a ``chat-sessions-index`` version."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("format"), str)
        and data["format"].startswith("chat-sessions-index")
    )


def _int_ms(value: Any, path: str, *, required: bool) -> int | None:
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value:
        raise fail(path, f"must be a non-negative number of ms since the epoch, got {shown(value)}")
    return int(value)


def _str(value: Any, path: str, default: str) -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise fail(path, f"must be a string, got {describe(value)}")
    return value


def _message(item: Any, path: str, fallback_time: int, builder: RecordBuilder) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise fail(path, f"a message must be an object, got {describe(item)}")
    role = item.get("role")
    metadata: dict[str, Any] = {"source": NAME}
    if item.get("id") is not None:
        metadata["sourceId"] = item["id"]
    if role == "error":
        role, metadata["airiRole"] = "assistant", "error"
    elif role not in ROLES:
        raise fail(f"{path}.role", f"must be one of {sorted(ROLES | {'error'})}, got {shown(role)}", "role")
    content = item.get("content")
    slices = item.get("slices")
    if content is None:
        texts = [s.get("text", "") for s in slices or [] if isinstance(s, dict) and s.get("type") == "text"]
        content = "".join(t for t in texts if isinstance(t, str))
    created = _int_ms(item.get("createdAt"), f"{path}.createdAt", required=False)
    for key in _TO_METADATA:
        if item.get(key) is not None:
            metadata[key] = item[key]
    extra = {k: v for k, v in item.items() if k not in _KNOWN and k not in _TO_METADATA}
    if extra:
        metadata["extra"] = extra
    fields: dict[str, Any] = {
        "metadata": metadata,
        "slices": slices,
        "tool_results": item.get("tool_results"),
        "categorization": item.get("categorization"),
        "tool_calls": item.get("tool_calls"),
        "tool_call_id": item.get("tool_call_id"),
        "name": item.get("name"),
    }
    try:
        validate_message_fields(role, content, fields)
    except ValidationError as e:
        raise fail(f"{path}.{e.field or 'content'}", str(e), e.field) from e
    return builder.message(role, content, created if created is not None else fallback_time, **fields)


def _meta(meta: Any, path: str, builder: RecordBuilder) -> tuple[dict[str, Any], int]:
    if not isinstance(meta, dict):
        raise fail(path, f"must be an object, got {describe(meta)}")
    created = _int_ms(meta.get("createdAt"), f"{path}.createdAt", required=True)
    updated = _int_ms(meta.get("updatedAt"), f"{path}.updatedAt", required=False)
    assert created is not None
    rec = builder.session(
        title=_str(meta.get("title"), f"{path}.title", "") or UNTITLED,
        created_at=created,
        updated_at=updated,
        user_id=_str(meta.get("userId"), f"{path}.userId", "local"),
        character_id=_str(meta.get("characterId"), f"{path}.characterId", "default"),
    )
    return rec, created


def to_normalized(data: Any, *, ids: IdGenerator | None = None) -> NormalizedImport:
    """Sessions from an AIRI ``chat-sessions-index:v1`` export, in the file's order."""
    if not detect(data):
        raise fail("format", "an AIRI export needs format 'chat-sessions-index:v1'", "format")
    if data["format"] != FORMAT:
        raise fail(
            "format",
            f"unsupported AIRI export format {shown(data['format'])}; this chatmem reads {shown(FORMAT)}",
            "format",
        )
    sessions = data.get("sessions")
    if not isinstance(sessions, dict):
        raise fail(
            "sessions", f"must be an object (session id -> record), got {describe(sessions)}", "sessions"
        )
    builder = RecordBuilder(ids)
    out: NormalizedImport = []
    for sid, record in sessions.items():
        path = f"sessions[{shown(sid)}]"
        if not isinstance(record, dict):
            raise fail(path, f"must be an object with 'meta' and 'messages', got {describe(record)}")
        builder.from_source(NAME, sid)
        meta, when = _meta(record.get("meta"), f"{path}.meta", builder)
        items = record.get("messages") or []
        if not isinstance(items, list):
            raise fail(f"{path}.messages", f"must be an array, got {describe(items)}", "messages")
        msgs = []
        for i, item in enumerate(items):
            rec = _message(item, f"{path}.messages[{i}]", when, builder)
            when = rec["createdAt"]
            msgs.append(rec)
        out.append(builder.finish(meta, msgs))
    index = data.get("index")
    characters = index.get("characters") if isinstance(index, dict) else None
    for cid, char in (characters or {}).items() if isinstance(characters, dict) else ():
        listed = char.get("sessions") if isinstance(char, dict) else None
        for sid, meta_in in (listed or {}).items() if isinstance(listed, dict) else ():
            if sid not in sessions:
                path = f"index.characters[{shown(cid)}].sessions[{shown(sid)}]"
                builder.from_source(NAME, sid)
                meta, _ = _meta(meta_in, path, builder)
                out.append(builder.finish(meta, []))
    return out
