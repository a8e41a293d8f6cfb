"""ChatGPT's ``conversations.json`` (Settings -> Data controls -> Export).

The file is an array of conversations, or one conversation object. Each
conversation is a tree in ``mapping`` (node id -> ``{message, parent,
children}``); ``current_node`` is the leaf the user last saw. That path is
imported as the session; every other branch (an edited prompt, a regenerated
reply) becomes a fork of it with ``forkIndex`` = the number of messages it
shares with its parent.

Kept: text; ``code`` (a ``{"type": "code", "code", "language"}`` part);
multimodal parts (images as ``{"type": "image", "assetPointer", ...}``);
browsing results and quotes as ``tool`` messages; ``author.name`` as
``name``; tool calls (``recipient`` other than ``all``) as ``toolCalls``, the
tool's answer linked by ``toolCallId``; ``model_slug`` as ``model`` with
provider ``openai``. Skipped: the ``message: null`` root, hidden messages
(``is_visually_hidden_from_conversation``, weight-0 system messages,
``user_editable_context``) and empty ones (``parts: [""]``). The source ids
are kept in ``metadata`` (``{"source": "chatgpt", "sourceId": ...}``).
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator, Mapping

from ...errors import shown
from ...records.ids import IdGenerator
from ...records.models import ROLES, extract_text
from ..normalized import NormalizedImport, NormalizedSession, RecordBuilder
from ..source import describe
from ._common import (
    UNTITLED,
    as_conversations,
    assemble_lines,
    convert_conversations,
    fail,
    iter_conversations,
    seconds_to_ms,
)
from ._tree import split_lines

__all__ = ["NAME", "detect", "iter_normalized", "to_normalized"]

NAME = "chatgpt"
PROVIDER = "openai"
HIDDEN_CONTENT_TYPES = frozenset({"user_editable_context", "model_editable_context"})


def detect(data: Any) -> bool:
    """An array of (or one) objects with a ``mapping`` tree."""
    convs = as_conversations(data)
    return bool(convs) and all(isinstance(c, dict) and "mapping" in c for c in convs)  # type: ignore[union-attr]


def _image_part(part: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "image", "assetPointer": part.get("asset_pointer")}
    for src, dst in (("width", "width"), ("height", "height"), ("size_bytes", "sizeBytes")):
        if part.get(src) is not None:
            out[dst] = part[src]
    return out


#: ChatGPT's citation markers: "【13†source】" or "【4:2†guide.pdf】" (older exports), read as
#: a reference to the browsing result or file quoted in the conversation; the private-use
#: "\ue200cite\ue202turn0search1\ue201" of newer ones point into results the export does not
#: hold, so they are taken out
_CITATION = re.compile("【(\\d+)(?::\\d+)?†([^】]{0,200})】")
_PRIVATE_CITATION = re.compile("\\s?\ue200[^\ue201]{0,400}\ue201")


def clean_text(text: str) -> str:
    """``text`` with ChatGPT's citation markers as plain references ("[13]", "[guide.pdf]")
    or, where they point nowhere, without them."""
    if "【" in text:
        text = _CITATION.sub(lambda m: f"[{m.group(2) if m.group(2) != 'source' else m.group(1)}]", text)
    if "\ue200" in text:
        text = _PRIVATE_CITATION.sub("", text)
    return text


def _part(part: Any, path: str) -> dict[str, Any] | None:
    if isinstance(part, str):
        part = clean_text(part)
        return {"type": "text", "text": part} if part else None
    if not isinstance(part, dict):
        raise fail(path, f"a content part must be a string or an object, got {describe(part)}")
    ct = part.get("content_type")
    if ct == "image_asset_pointer":
        return _image_part(part)
    if ct == "audio_asset_pointer":
        return {"type": "audio", "assetPointer": part.get("asset_pointer")}
    if ct == "audio_transcription":
        text = part.get("text")
        return {"type": "text", "text": text} if isinstance(text, str) and text else None
    return {"type": ct if isinstance(ct, str) and ct else "unknown", "data": part}


def _content(content: Any, path: str) -> tuple[str | list[dict[str, Any]], dict[str, Any]]:
    """(chatmem content, extra metadata) of one ChatGPT ``content`` object."""
    if not isinstance(content, dict):
        raise fail(path, f"must be an object, got {describe(content)}")
    ct = content.get("content_type")
    extra: dict[str, Any] = {}
    if ct not in ("text", None):
        extra["contentType"] = ct
    parts = content.get("parts")
    if ct == "code":
        code = content.get("text") or ""
        if not code:
            return "", extra
        return [{"type": "code", "code": code, "language": content.get("language")}], extra
    if ct == "tether_browsing_display":
        if content.get("summary"):
            extra["summary"] = content["summary"]
        return content.get("result") or "", extra
    if ct == "tether_quote":
        for key in ("url", "domain", "title"):
            if content.get(key):
                extra[key] = content[key]
        return content.get("text") or "", extra
    if ct == "thoughts":
        out = []
        for t in content.get("thoughts") or []:
            if isinstance(t, dict):
                text = "\n".join(x for x in (t.get("summary"), t.get("content")) if isinstance(x, str) and x)
                if text:
                    out.append({"type": "reasoning", "text": text})
        return out, extra
    if ct == "reasoning_recap":
        recap = content.get("content")
        return ([{"type": "reasoning", "text": recap}] if isinstance(recap, str) and recap else []), extra
    if parts is not None:
        if not isinstance(parts, list):
            raise fail(f"{path}.parts", f"must be an array, got {describe(parts)}")
        if ct == "text" and all(isinstance(p, str) for p in parts):
            return clean_text("\n".join(p for p in parts if p)), extra
        converted = [_part(p, f"{path}.parts[{i}]") for i, p in enumerate(parts)]
        return [p for p in converted if p is not None], extra
    plain = content.get("text")
    if isinstance(plain, str):
        return plain, extra
    rest = {k: v for k, v in content.items() if k != "content_type"}
    return ([{"type": ct, "data": rest}] if isinstance(ct, str) and ct and rest else []), extra


def _is_hidden(msg: Mapping[str, Any]) -> bool:
    meta = msg.get("metadata") or {}
    if isinstance(meta, dict) and meta.get("is_visually_hidden_from_conversation"):
        return True
    content = msg.get("content") or {}
    if isinstance(content, dict) and content.get("content_type") in HIDDEN_CONTENT_TYPES:
        return True
    author = msg.get("author") or {}
    return author.get("role") == "system" and msg.get("weight") == 0


def _tool_arguments(text: str) -> str:
    try:
        if isinstance(json.loads(text), dict):
            return text
    except ValueError:
        pass
    return json.dumps({"input": text}, ensure_ascii=False)


def _conversation(conv: Any, path: str, builder: RecordBuilder) -> NormalizedImport:
    if not isinstance(conv, dict):
        raise fail(path, f"a conversation must be an object, got {describe(conv)}")
    mapping = conv.get("mapping")
    if not isinstance(mapping, dict):
        raise fail(f"{path}.mapping", f"must be an object, got {describe(mapping)}", "mapping")
    conv_created = seconds_to_ms(conv.get("create_time"), f"{path}.create_time")
    conv_updated = seconds_to_ms(conv.get("update_time"), f"{path}.update_time")
    default_model = conv.get("default_model_slug")
    builder.from_source(NAME, conv.get("conversation_id") or conv.get("id"))

    parent_of: dict[str, str | None] = {}
    children_of: dict[str, list[str]] = {}
    for key, node in mapping.items():
        npath = f"{path}.mapping[{shown(key)}]"
        if not isinstance(node, dict):
            raise fail(npath, f"must be an object, got {describe(node)}")
        parent = node.get("parent")
        if parent is not None and not isinstance(parent, str):
            raise fail(f"{npath}.parent", f"must be a node id or null, got {shown(parent)}", "parent")
        kids = node.get("children") or []
        if not isinstance(kids, list) or not all(isinstance(k, str) for k in kids):
            raise fail(f"{npath}.children", "must be an array of node ids", "children")
        parent_of[key] = parent
        children_of[key] = [k for k in kids if k in mapping]
    # a child listed only through its own ``parent`` link still belongs to the tree
    listed = {k: set(v) for k, v in children_of.items()}
    for key, parent in parent_of.items():
        if parent in children_of and key not in listed[parent]:
            children_of[parent].append(key)
            listed[parent].add(key)

    # nodes -> records (None when not imported); times fall back to the nearest earlier one
    records: dict[str, dict[str, Any] | None] = {}
    call_of: dict[str, str | None] = {}  # node -> id of the newest tool call on its path
    time_of: dict[str, int | None] = {}

    def visit(key: str) -> None:
        # builds the not-yet-built ancestors first, iteratively (long chats, no recursion)
        chain = []
        node_key: str | None = key
        while node_key is not None and node_key in mapping and node_key not in records:
            chain.append(node_key)
            records[node_key] = None  # mark in progress (also breaks cycles)
            node_key = parent_of.get(node_key)
        for k in reversed(chain):
            _build(k)

    def _build(key: str) -> None:
        npath = f"{path}.mapping[{shown(key)}].message"
        parent = parent_of.get(key)
        inherited_call = call_of.get(parent) if parent else None
        inherited_time = time_of.get(parent) if parent else None
        msg = mapping[key].get("message")
        call_of[key], time_of[key] = inherited_call, inherited_time
        if msg is None:
            return
        if not isinstance(msg, dict):
            raise fail(npath, f"must be an object or null, got {describe(msg)}")
        author = msg.get("author")
        if not isinstance(author, dict):
            raise fail(f"{npath}.author", f"must be an object, got {describe(author)}", "author")
        role = author.get("role")
        if role not in ROLES:
            raise fail(f"{npath}.author.role", f"must be one of {sorted(ROLES)}, got {shown(role)}", "role")
        created = seconds_to_ms(msg.get("create_time"), f"{npath}.create_time")
        if created is not None:
            time_of[key] = created
        if _is_hidden(msg):
            return
        content, extra = _content(msg.get("content"), f"{npath}.content")
        if content == "" or content == []:
            return
        meta_in: dict[str, Any] = msg["metadata"] if isinstance(msg.get("metadata"), dict) else {}
        metadata: dict[str, Any] = {"source": NAME, "sourceId": msg.get("id") or key, **extra}
        status = msg.get("status")
        if isinstance(status, str) and status != "finished_successfully":
            metadata["status"] = status
        finish = meta_in.get("finish_details")
        if role == "assistant" and isinstance(finish, dict) and finish.get("type") not in (None, "stop"):
            metadata["finishType"] = finish.get("type")
        recipient = msg.get("recipient")
        fields: dict[str, Any] = {"metadata": metadata}
        name = author.get("name")
        if isinstance(name, str) and name:
            fields["name"] = name
        model = meta_in.get("model_slug")
        if role == "assistant" and not model:
            model = default_model
        if isinstance(model, str) and model:
            fields["model"] = model
        if role in ("assistant", "tool"):
            fields["provider"] = PROVIDER
        if role == "assistant" and isinstance(recipient, str) and recipient != "all":
            call_id = msg.get("id") or key
            fields["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": recipient, "arguments": _tool_arguments(extract_text(content))},
                }
            ]
            metadata["recipient"] = recipient
            call_of[key] = call_id
        elif role == "tool" and inherited_call:
            fields["tool_call_id"] = inherited_call
        when = created if created is not None else inherited_time
        if when is None:
            when = conv_created or 0
        time_of[key] = when
        records[key] = builder.message(role, content, when, **fields)

    for key in mapping:
        visit(key)

    title = conv.get("title")
    title = title if isinstance(title, str) and title else UNTITLED
    created_at = (
        conv_created
        if conv_created is not None
        else min((t for t in time_of.values() if t is not None), default=0)
    )
    current = conv.get("current_node")
    lines = split_lines(parent_of, children_of, current if isinstance(current, str) else None)

    def make_meta(parent_id: str | None, fork_index: int | None, first: int) -> dict[str, Any]:
        return builder.session(
            title=title,
            created_at=created_at
            if parent_id is None
            else max(created_at, first),  # a fork: when it branched
            updated_at=conv_updated,
            archived=bool(conv.get("is_archived")),
            pinned=bool(conv.get("is_starred")),
            parent_id=parent_id,
            fork_index=fork_index,
            fork_reason=None if parent_id is None else "chatgpt branch",
        )

    return assemble_lines(lines, records, make_meta, builder)


def to_normalized(data: Any, *, ids: IdGenerator | None = None) -> NormalizedImport:
    """Sessions (and forks for branches) from a ChatGPT export: an array or one conversation."""
    return convert_conversations(data, "ChatGPT", _conversation, RecordBuilder(ids))


def iter_normalized(data: Any, *, ids: IdGenerator | None = None) -> Iterator[NormalizedSession]:
    """``to_normalized`` one conversation at a time, as the iterator is read."""
    return iter_conversations(data, "ChatGPT", _conversation, RecordBuilder(ids))
