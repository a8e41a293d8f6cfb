"""Target formats of a context window: what a provider's API expects.

``build_context`` produces OpenAI-style chat messages (``format="openai"``, the
default: ``role``/``content`` with ``tool_calls`` and ``tool`` messages).
``to_anthropic`` turns them into the shape of Anthropic's Messages API
(``format="anthropic"``)::

    {"system": "...", "messages": [{"role": "user" | "assistant", "content": ...}]}

* every ``system`` message (the system prompt, a summary) goes, in order, into
  ``system`` (joined by a blank line); the API has no system role;
* an assistant's ``tool_calls`` become ``tool_use`` blocks (``input`` is the
  parsed JSON of the call's ``arguments``), after the assistant's text;
* ``tool`` messages become ``tool_result`` blocks in a ``user`` turn;
* consecutive turns of one role are merged (the API wants them alternating);
* image parts (``image_url`` with a ``data:`` URL or an http(s) URL) become
  ``image`` blocks; other text-bearing parts become ``text`` blocks.

Pure functions: nothing here reads or writes a store.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from ..errors import ValidationError, shown
from ..records.models import extract_text

__all__ = ["FORMATS", "to_anthropic", "from_anthropic_blocks"]

#: the target formats ``build_context(format=...)`` accepts
FORMATS = ("openai", "anthropic")


def _image_block(part: Mapping[str, Any]) -> dict[str, Any] | None:
    ref = part.get("image_url")
    url = ref.get("url") if isinstance(ref, Mapping) else ref if isinstance(ref, str) else part.get("url")
    if not isinstance(url, str):
        return None
    if url.startswith("data:") and ";base64," in url:
        media, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _blocks(content: Any) -> list[dict[str, Any]]:
    """Content (a string or parts) as Anthropic content blocks."""
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    out: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type")
        if kind in ("image_url", "image"):
            block = _image_block(part)
            if block is not None:
                out.append(block)
                continue
        text = extract_text([part])
        if text:
            out.append({"type": "text", "text": text})
    return out


def _function(call: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = call.get("function")
    return fn if isinstance(fn, Mapping) else call


def _arguments(call: Mapping[str, Any]) -> Any:
    fn = _function(call)
    raw = fn.get("arguments", fn.get("input", {}))
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return {"arguments": raw}
    return raw if raw is not None else {}


def _tool_use(call: Mapping[str, Any]) -> dict[str, Any]:
    fn = _function(call)
    return {"type": "tool_use", "id": call.get("id"), "name": fn.get("name"), "input": _arguments(call)}


def to_anthropic(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """OpenAI-style window messages as an Anthropic Messages API request body part
    (``system`` and ``messages``; see the module docstring)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "system":
            text = extract_text(m.get("content"))
            if text:
                system.append(text)
            continue
        if role == "tool":
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.get("tool_call_id")}
            content = m.get("content")
            result["content"] = content if isinstance(content, str) else _blocks(content)
            if (m.get("metadata") or {}).get("is_error"):
                result["is_error"] = True
            role, blocks = "user", [result]
        elif role in ("user", "assistant"):
            blocks = _blocks(m.get("content"))
            if role == "assistant":
                blocks += [_tool_use(c) for c in m.get("tool_calls") or ()]
        else:
            raise ValidationError(f"no Anthropic role for {shown(role)}", field="role")
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:  # a lone text block reads better as a plain string
        c = turn["content"]
        if len(c) == 1 and c[0]["type"] == "text":
            turn["content"] = c[0]["text"]
    return {"system": "\n\n".join(system), "messages": turns}


def from_anthropic_blocks(blocks: Sequence[Mapping[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """An assistant answer's content blocks as (text, OpenAI-style ``tool_calls``)."""
    text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    calls = [
        {
            "id": b.get("id"),
            "type": "function",
            "function": {
                "name": b.get("name"),
                "arguments": json.dumps(b.get("input") or {}, separators=(",", ":")),
            },
        }
        for b in blocks
        if b.get("type") == "tool_use"
    ]
    return text, calls
