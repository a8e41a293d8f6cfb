"""Claude with chatmem: Anthropic's Messages API on either side of a conversation.

Two ways to talk to Claude over what chatmem remembers:

* the chat turn does it all: ``mem.session(id).send(text, provider=AnthropicProvider(key, model))``
  stores the user's message, builds the window in the Messages API's shape, streams the
  answer and stores it;
* an app that calls the API itself (the official ``anthropic`` SDK, a proxy, plain HTTP)
  asks ``request_for`` for the request body of a session's window, sends it, and gives the
  response to ``store_reply``, which stores the answer as the assistant's message (text and
  ``tool_use`` blocks, the model named).

Nothing here imports the SDK: a response is the Messages API's JSON as a mapping (the SDK's
``message.model_dump()``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ..chat.anthropic import AnthropicProvider
from ..chat.formats import from_anthropic_blocks, to_anthropic
from ..errors import ValidationError
from ..records.models import ChatMessage

if TYPE_CHECKING:
    from ..memory import Memory

__all__ = ["AnthropicProvider", "request_for", "store_reply", "to_anthropic"]


async def request_for(
    mem: Memory,
    session_id: str,
    *,
    model: str,
    max_tokens: int = 1024,
    context_tokens: int | None = None,
    budget: str | int | None = "claude-3.5",
    system_prompt: str | None = None,
) -> dict[str, Any]:
    """The Messages API request body for the session's window: ``model``, ``max_tokens`` (of
    the answer), ``system`` and ``messages``, ready for ``client.messages.create(**body)``.

    The window is ``mem.build_context(..., format="anthropic")``: within ``context_tokens``
    less the answer's ``max_tokens`` when given, else within the ``budget`` preset (which
    reserves its own room for the answer); ``system_prompt`` overrides the session's own."""
    window: dict[str, Any] = await mem.build_context(
        session_id,
        max_tokens=context_tokens,
        budget=None if context_tokens is not None else budget,
        reserve_tokens=max_tokens,
        system_prompt=system_prompt,
        format="anthropic",
    )
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": window["messages"]}
    if window["system"]:
        body["system"] = window["system"]
    return body


async def store_reply(mem: Memory, session_id: str, response: Mapping[str, Any]) -> ChatMessage:
    """Store a Messages API response as the session's assistant message.

    Its ``text`` blocks become the message's content and its ``tool_use`` blocks its
    OpenAI-style ``tool_calls`` (as every window reads them); the provider is
    ``"anthropic"`` and the model the response's. ``ValidationError`` for anything that is
    not an assistant message; nothing is written then."""
    if not isinstance(response, Mapping) or response.get("role") != "assistant":
        raise ValidationError("not a Messages API response: expected role 'assistant'", field="role")
    blocks = response.get("content")
    if not isinstance(blocks, list) or not all(isinstance(b, Mapping) for b in blocks):
        raise ValidationError("a Messages API response's content is a list of blocks", field="content")
    text, calls = from_anthropic_blocks(blocks)
    fields: dict[str, Any] = {"provider": "anthropic", "model": response.get("model")}
    if calls:
        fields["tool_calls"] = calls
    return await mem.messages.append(session_id, "assistant", text, **fields)
