"""The two records chatmem keeps: ``SessionMeta`` and ``ChatMessage``.

Each model converts to and from its *record*: the plain, JSON-ready dict that
is stored (IndexedDB, SQLite, memory) and exported. Record keys follow the
original ``ChatSessionMeta`` / ``ChatHistoryItem`` shapes (camelCase, with
``tool_results`` as the original spells it).

Validation lives here too, so that bad input is refused before any store is
touched.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence, cast

from ..errors import ValidationError, shown

__all__ = [
    "NOT_FOR_MODEL",
    "for_model",
    "Role",
    "ROLES",
    "SessionMeta",
    "ChatMessage",
    "Message",
    "extract_text",
    "estimate_tokens",
    "validate_message_fields",
    "MESSAGE_FIELDS",
]

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})
SLICE_TYPES = frozenset({"text", "tool-call", "tool-call-result"})

#: optional fields a caller may pass to ``messages.append(..., **fields)``
MESSAGE_FIELDS: frozenset[str] = frozenset(
    {
        "id",
        "created_at",
        "provider",
        "model",
        "slices",
        "tool_results",
        "categorization",
        "tool_calls",
        "tool_call_id",
        "name",
        "metadata",
        "token_count",
    }
)


def extract_text(content: str | Sequence[Mapping[str, Any]] | None) -> str:
    """Plain text of a message's content: the string itself, or its text parts joined.

    Parts without text (images, audio) contribute nothing; code parts contribute
    their code.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out: list[str] = []
    for part in content:
        text = part.get("text")
        if isinstance(text, str):
            out.append(text)
        elif isinstance(part.get("code"), str):
            out.append(part["code"])
    return "\n".join(out)


def estimate_tokens(text: str) -> int:
    """The original's estimate: one token per four characters, rounded up."""
    return math.ceil(len(text) / 4)


@dataclass(slots=True)
class SessionMeta:
    """One conversation's metadata. ``message_count`` is kept by the store."""

    session_id: str
    title: str
    created_at: int
    updated_at: int
    user_id: str = "local"
    character_id: str = "default"
    pinned: bool = False
    archived: bool = False
    tags: list[str] = field(default_factory=list)
    parent_id: str | None = None
    fork_index: int | None = None
    fork_reason: str | None = None
    message_count: int = 0

    def to_record(self) -> dict[str, Any]:
        return {
            "sessionId": self.session_id,
            "title": self.title,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "userId": self.user_id,
            "characterId": self.character_id,
            "pinned": self.pinned,
            "archived": self.archived,
            "tags": list(self.tags),
            "parentId": self.parent_id,
            "forkIndex": self.fork_index,
            "forkReason": self.fork_reason,
            "messageCount": self.message_count,
        }

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> SessionMeta:
        return cls(
            session_id=r["sessionId"],
            title=r.get("title") or "",
            created_at=int(r["createdAt"]),
            updated_at=int(r["updatedAt"]),
            user_id=r.get("userId", "local"),
            character_id=r.get("characterId", "default"),
            pinned=bool(r.get("pinned", False)),
            archived=bool(r.get("archived", False)),
            tags=list(r.get("tags") or []),
            parent_id=r.get("parentId"),
            fork_index=r.get("forkIndex"),
            fork_reason=r.get("forkReason"),
            message_count=int(r.get("messageCount", 0)),
        )


@dataclass(slots=True)
class ChatMessage:
    """One stored message. ``seq`` is its 0-based position in the session."""

    id: str
    session_id: str
    seq: int
    role: Role
    content: str | list[dict[str, Any]]
    created_at: int
    provider: str | None = None
    model: str | None = None
    slices: list[dict[str, Any]] | None = None
    tool_results: list[dict[str, Any]] | None = None
    categorization: dict[str, Any] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] | None = None
    token_count: int = 0

    @property
    def text(self) -> str:
        """Plain text of the content (text parts joined)."""
        return extract_text(self.content)

    def to_record(self) -> dict[str, Any]:
        r: dict[str, Any] = {
            "id": self.id,
            "sessionId": self.session_id,
            "seq": self.seq,
            "role": self.role,
            "content": self.content,
            "createdAt": self.created_at,
            "provider": self.provider,
            "model": self.model,
            "slices": self.slices,
            "tool_results": self.tool_results,
            "categorization": self.categorization,
            "toolCalls": self.tool_calls,
            "toolCallId": self.tool_call_id,
            "name": self.name,
            "metadata": self.metadata,
            "tokenCount": self.token_count,
        }
        return r

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> ChatMessage:
        get = r.get
        return cls(  # positional: a batch of appends builds thousands
            r["id"],
            r["sessionId"],
            int(r["seq"]),
            cast(Role, r["role"]),
            r["content"],
            int(r["createdAt"]),
            get("provider"),
            get("model"),
            get("slices"),
            get("tool_results"),
            get("categorization"),
            get("toolCalls"),
            get("toolCallId"),
            get("name"),
            get("metadata"),
            int(get("tokenCount") or 0),
        )

    def to_provider(self) -> dict[str, Any]:
        """An OpenAI-style chat message (``role``, ``content`` and tool fields)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        if self.name:
            out["name"] = self.name
        return out


@dataclass(slots=True, frozen=True)
class Message:
    """Role and content only: what ``ContextStore.get_messages`` returns (AIR's ``Message``)."""

    role: str
    content: str | list[dict[str, Any]]


# --------------------------------------------------------------------------- validation


def _fail(msg: str, field_name: str | None = None, index: int | None = None) -> ValidationError:
    where = f"item {index}: " if index is not None else ""
    return ValidationError(where + msg, field=field_name, index=index)


def _check_json(value: Any, name: str, index: int | None) -> None:
    if value is None:
        return
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise _fail(f"{name} is not JSON-serialisable: {e}", name, index) from e


def _no_check(value: Any, name: str, index: int | None) -> None:
    return None


def _opt_str(fields: Mapping[str, Any], name: str, index: int | None) -> None:
    v = fields.get(name)
    if v is not None and not isinstance(v, str):
        raise _fail(f"{name} must be a string or None, got {type(v).__name__}", name, index)


def _list_of_dicts(v: Any, name: str, index: int | None) -> None:
    if v is None:
        return
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise _fail(f"{name} must be a list of dicts", name, index)


def validate_message_fields(
    role: Any,
    content: Any,
    fields: Mapping[str, Any],
    *,
    index: int | None = None,
    json_checked: bool = False,
) -> None:
    """Raise ``ValidationError`` unless ``role``, ``content`` and ``fields`` make a valid message.

    ``json_checked``: the caller has already run ``chatmem.records.validation.check_value`` over
    them, so nested values are known to be JSON and are not serialised again here."""
    if not fields.keys() <= MESSAGE_FIELDS:
        name = sorted(set(fields) - MESSAGE_FIELDS)[0]
        raise _fail(f"unknown field {shown(name)}", name, index)
    if not isinstance(role, str) or role not in ROLES:
        raise _fail(f"role must be one of {sorted(ROLES)}, got {shown(role)}", "role", index)
    if isinstance(content, str):
        pass
    elif isinstance(content, list):
        for i, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise _fail(f"content part {i} must be a dict with a string 'type'", "content", index)
        if not json_checked:
            _check_json(content, "content", index)
    else:
        raise _fail(
            f"content must be a string or a list of parts, got {type(content).__name__}",
            "content",
            index,
        )
    if fields:
        _validate_optional(fields, index, json_checked)


def _validate_optional(fields: Mapping[str, Any], index: int | None, json_checked: bool) -> None:
    """The optional fields of ``validate_message_fields``."""
    check_json = _no_check if json_checked else _check_json
    mid = fields.get("id")
    if mid is not None and (not isinstance(mid, str) or not mid):
        raise _fail("id must be a non-empty string", "id", index)
    ts = fields.get("created_at")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int) or ts < 0):
        raise _fail("created_at must be a non-negative int (ms since the epoch)", "created_at", index)
    for name in ("provider", "model", "tool_call_id", "name"):
        _opt_str(fields, name, index)
    for name in ("tool_results", "tool_calls"):
        _list_of_dicts(fields.get(name), name, index)
        check_json(fields.get(name), name, index)
    slices = fields.get("slices")
    _list_of_dicts(slices, "slices", index)
    for i, s in enumerate(slices or []):
        if s.get("type") not in SLICE_TYPES:
            raise _fail(f"slice {i} type must be one of {sorted(SLICE_TYPES)}", "slices", index)
    check_json(slices, "slices", index)
    for name in ("tool_results",):
        for i, tr in enumerate(fields.get(name) or []):
            if not isinstance(tr.get("id"), str):
                raise _fail(f"tool result {i} needs a string 'id'", name, index)
    cat = fields.get("categorization")
    if cat is not None:
        if not isinstance(cat, dict) or not isinstance(cat.get("speech"), str):
            raise _fail("categorization must be a dict with a string 'speech'", "categorization", index)
        if cat.get("reasoning") is not None and not isinstance(cat["reasoning"], str):
            raise _fail("categorization.reasoning must be a string", "categorization", index)
    meta = fields.get("metadata")
    if meta is not None:
        if not isinstance(meta, dict):
            raise _fail("metadata must be a dict", "metadata", index)
        check_json(meta, "metadata", index)
    tc = fields.get("token_count")
    if tc is not None and (isinstance(tc, bool) or not isinstance(tc, int) or tc < 0):
        raise _fail("token_count must be a non-negative int", "token_count", index)


#: ``metadata["origin"]`` of stored messages that are not the model's turns nor the user's:
#: an answer from memory (``OfflineResponder``), a notice the app stored (a failed turn)
NOT_FOR_MODEL = frozenset({"offline", "notice"})


def for_model(m: ChatMessage) -> bool:
    """Whether a window may send ``m`` to a model: not an answer from memory or a notice
    (by its ``origin``, or, as stored before origins were, by the offline provider's name)."""
    origin = (m.metadata or {}).get("origin")
    return origin not in NOT_FOR_MODEL and not (m.role == "assistant" and m.provider == "offline")
