"""Claude's conversations: the claude.ai bulk export (``conversations.json``, an
array) or one conversation object as claude.ai's own API returns it.

Each message has ``sender`` (``human`` -> ``user``, ``assistant``), a
top-level ``text`` that may be ``""`` while the real text sits in
``content[]`` blocks, ``created_at`` as ISO-8601 (-> integer ms), and
optionally ``files`` / ``attachments``. When every message has a
``parent_message_uuid`` and the conversation names its
``current_leaf_message_uuid``, the tree is followed like ChatGPT's (the leaf's
path is the session, other branches become forks); otherwise messages are
taken in ``index`` / file order. Provider ``anthropic``; the conversation's
``model`` (when present) goes on assistant messages. Source ids are kept in
``metadata`` (``{"source": "claude", "sourceId": ...}``).
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Mapping

from ...errors import shown
from ...records.ids import IdGenerator
from ..normalized import NormalizedImport, NormalizedSession, RecordBuilder
from ..source import describe
from ._common import (
    UNTITLED,
    as_conversations,
    assemble_lines,
    convert_conversations,
    fail,
    iso_to_ms,
    iter_conversations,
)
from ._tree import Line, split_lines

__all__ = ["NAME", "detect", "iter_normalized", "to_normalized"]

NAME = "claude"
PROVIDER = "anthropic"
SENDERS = {"human": "user", "user": "user", "assistant": "assistant"}


def detect(data: Any) -> bool:
    """An array of (or one) objects with ``chat_messages``."""
    convs = as_conversations(data)
    return bool(convs) and all(isinstance(c, dict) and "chat_messages" in c for c in convs)  # type: ignore[union-attr]


def _block(block: Any, path: str, tool_calls: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not isinstance(block, dict):
        raise fail(path, f"a content block must be an object, got {describe(block)}")
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        return {"type": "text", "text": text} if isinstance(text, str) and text else None
    if kind == "thinking":
        text = block.get("thinking")
        return {"type": "reasoning", "text": text} if isinstance(text, str) and text else None
    if kind == "tool_use":
        call = {
            "id": block.get("id"),
            "type": "function",
            "function": {
                "name": block.get("name"),
                "arguments": json.dumps(block.get("input"), ensure_ascii=False),
            },
        }
        tool_calls.append(call)
        return {
            "type": "tool_use",
            "id": block.get("id"),
            "name": block.get("name"),
            "input": block.get("input"),
        }
    if kind == "tool_result":
        inner = block.get("content")
        text = (
            inner
            if isinstance(inner, str)
            else "\n".join(
                c.get("text", "")
                for c in inner or []
                if isinstance(c, dict) and isinstance(c.get("text"), str)
            )
        )
        part: dict[str, Any] = {"type": "tool_result", "toolUseId": block.get("tool_use_id"), "text": text}
        if block.get("is_error"):
            part["isError"] = True
        return part
    data = {k: v for k, v in block.items() if k != "type"}
    return {"type": kind if isinstance(kind, str) and kind else "unknown", "data": data}


def _files(msg: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: set[Any] = set()
    for f in list(msg.get("files") or []) + list(msg.get("files_v2") or []):
        if not isinstance(f, dict):
            continue
        key = f.get("file_uuid") or id(f)
        if key in seen:
            continue
        seen.add(key)
        part: dict[str, Any] = {"type": "image" if f.get("file_kind") == "image" else "file"}
        for src, dst in (("file_uuid", "fileUuid"), ("file_name", "name")):
            if f.get(src) is not None:
                part[dst] = f[src]
        url = f.get("preview_url") or f.get("thumbnail_url")
        if url:
            part["url"] = url
        out.append(part)
    for a in msg.get("attachments") or []:
        if not isinstance(a, dict):
            continue
        part = {"type": "file", "name": a.get("file_name")}
        if a.get("file_type"):
            part["mimeType"] = a["file_type"]
        if isinstance(a.get("extracted_content"), str):
            part["text"] = a["extracted_content"]
        out.append(part)
    return out


def _message(
    msg: Any, path: str, builder: RecordBuilder, model: str | None, fallback_time: int
) -> tuple[dict[str, Any] | None, int]:
    """(record or None when empty, its time) of one chat message."""
    if not isinstance(msg, dict):
        raise fail(path, f"a chat message must be an object, got {describe(msg)}")
    sender = msg.get("sender")
    if sender not in SENDERS:
        raise fail(f"{path}.sender", f"must be one of ['assistant', 'human'], got {shown(sender)}", "sender")
    role = SENDERS[sender]
    created = iso_to_ms(msg.get("created_at"), f"{path}.created_at")
    when = created if created is not None else fallback_time
    blocks = msg.get("content")
    if blocks is not None and not isinstance(blocks, list):
        raise fail(f"{path}.content", f"must be an array, got {describe(blocks)}", "content")
    tool_calls: list[dict[str, Any]] = []
    parts = [p for i, b in enumerate(blocks or []) if (p := _block(b, f"{path}.content[{i}]", tool_calls))]
    text = msg.get("text")
    if not any(p["type"] == "text" for p in parts) and isinstance(text, str) and text:
        parts.insert(0, {"type": "text", "text": text})
    parts += _files(msg)
    if not parts:
        return None, when
    content: str | list[dict[str, Any]]
    if all(p["type"] == "text" and set(p) == {"type", "text"} for p in parts):
        content = "\n".join(p["text"] for p in parts)
    else:
        content = parts
    metadata: dict[str, Any] = {"source": NAME, "sourceId": msg.get("uuid")}
    if msg.get("stop_reason") not in (None, "stop_sequence", "end_turn"):
        metadata["stopReason"] = msg["stop_reason"]
    fields: dict[str, Any] = {"metadata": metadata}
    if role == "assistant":
        fields["provider"] = PROVIDER
        if model:
            fields["model"] = model
        if tool_calls:
            fields["tool_calls"] = tool_calls
    return builder.message(role, content, when, **fields), when


def _conversation(conv: Any, path: str, builder: RecordBuilder) -> NormalizedImport:
    if not isinstance(conv, dict):
        raise fail(path, f"a conversation must be an object, got {describe(conv)}")
    msgs = conv.get("chat_messages")
    if not isinstance(msgs, list):
        raise fail(f"{path}.chat_messages", f"must be an array, got {describe(msgs)}", "chat_messages")
    created = iso_to_ms(conv.get("created_at"), f"{path}.created_at")
    updated = iso_to_ms(conv.get("updated_at"), f"{path}.updated_at")
    model = conv.get("model") if isinstance(conv.get("model"), str) and conv.get("model") else None
    builder.from_source(NAME, conv.get("uuid"))
    order = list(range(len(msgs)))
    if all(isinstance(m, dict) and isinstance(m.get("index"), int) for m in msgs):
        order.sort(key=lambda i: msgs[i]["index"])
    records: dict[str, dict[str, Any] | None] = {}
    parent_of: dict[str, str | None] = {}
    children_of: dict[str, list[str]] = {}
    when = created or 0
    for i in order:
        rec, when = _message(msgs[i], f"{path}.chat_messages[{i}]", builder, model, when)
        key = msgs[i].get("uuid") if isinstance(msgs[i].get("uuid"), str) else None
        key = key if key and key not in records else f"#{i}"
        records[key] = rec
        parent = msgs[i].get("parent_message_uuid")
        parent_of[key] = parent if isinstance(parent, str) else None
        children_of[key] = []
    leaf = conv.get("current_leaf_message_uuid")
    tree = (
        isinstance(leaf, str)
        and leaf in records
        and all(isinstance(m.get("parent_message_uuid"), str) for m in msgs)
    )
    if tree:
        for key in records:  # children in message order: the newest last
            parent = parent_of[key]
            if parent in children_of:
                children_of[parent].append(key)
        lines = split_lines(parent_of, children_of, leaf)
    else:
        lines = [Line(list(records), None, 0)]
    name = conv.get("name")
    title = name if isinstance(name, str) and name else UNTITLED
    start = (
        created if created is not None else min((r["createdAt"] for r in records.values() if r), default=0)
    )

    def make_meta(parent_id: str | None, fork_index: int | None, first: int) -> dict[str, Any]:
        return builder.session(
            title=title,
            created_at=start if parent_id is None else max(start, first),
            updated_at=updated,
            pinned=bool(conv.get("is_starred")),
            parent_id=parent_id,
            fork_index=fork_index,
            fork_reason=None if parent_id is None else "claude branch",
        )

    return assemble_lines(lines, records, make_meta, builder)


def to_normalized(data: Any, *, ids: IdGenerator | None = None) -> NormalizedImport:
    """Sessions from a Claude export: an array of conversations or one conversation."""
    return convert_conversations(data, "Claude", _conversation, RecordBuilder(ids))


def iter_normalized(data: Any, *, ids: IdGenerator | None = None) -> Iterator[NormalizedSession]:
    """``to_normalized`` one conversation at a time, as the iterator is read."""
    return iter_conversations(data, "Claude", _conversation, RecordBuilder(ids))
