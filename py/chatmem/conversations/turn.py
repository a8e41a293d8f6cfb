"""The chat turn: ``await mem.session(id).send(text, provider=..., ...)``.

1. The user message is appended (durable) before the model is called.
2. The window is built (``ContextBuilder.build_window``) within the budget, with the
   session's own system prompt (seq 0) unless ``system_prompt=`` overrides it
   (``DEFAULT_SYSTEM_PROMPT`` when the session has none), and the per-message
   overhead of the provider's ``format`` (``"openai"`` unless it says otherwise).
3. The answer is streamed; each piece goes to ``on_token``.
4. The answer is stored as one assistant message with ``provider`` and ``model``
   set. A failure before any text (an HTTP error, no answer) stores nothing of it;
   the user message stays and the error is raised (``ProviderError`` family).
   What arrived before a stream broke is kept, with ``metadata["status"]``
   ``INCOMPLETE`` (the error's ``partial`` names it), and what arrived before the
   caller cancelled (Stop) is kept with ``STOPPED``; the cancellation goes on.

``reply`` is steps 2-4 alone: an answer to what the session holds now (the
user message already stored), e.g. from the ``OfflineResponder`` when the model
cannot be reached, then from the model once it is back. A provider with an
``origin`` (the ``OfflineResponder``: ``"offline"``) does not speak for the
model: its answers are stored with ``metadata["origin"]`` so, and no window
ever sends them to a model as its turns (``context_builder.for_model``).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING, Any, Callable

from ..chat.providers import ChatProvider
from ..context.window import ModelBudget
from ..errors import ProviderError, ValidationError
from ..records.models import ChatMessage

if TYPE_CHECKING:
    from ..context.builder import ContextBuilder
    from .messages import Messages

__all__ = ["send", "reply", "DEFAULT_SYSTEM_PROMPT", "INCOMPLETE", "STOPPED"]

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
#: ``metadata["status"]`` of an answer whose stream broke, and of one the caller stopped
INCOMPLETE = "incomplete"
STOPPED = "stopped"


async def send(
    messages: Messages,
    builder: ContextBuilder,
    session_id: str,
    text: str | list[dict[str, Any]],
    *,
    provider: ChatProvider,
    **turn: Any,
) -> ChatMessage:
    """Append ``text`` as the user's message, then ``reply`` (``turn``: its keyword arguments)."""
    if provider is None or not hasattr(provider, "stream"):
        raise ValidationError("provider must be a ChatProvider (with stream())", field="provider")
    if isinstance(text, str) and not text.strip():
        raise ValidationError("the message is empty", field="text")
    await messages.append(session_id, "user", text)
    return await reply(messages, builder, session_id, provider=provider, **turn)


async def reply(
    messages: Messages,
    builder: ContextBuilder,
    session_id: str,
    *,
    provider: ChatProvider,
    model: str | None = None,
    budget: ModelBudget | str | int = "gpt-4o",
    system_prompt: str | None = None,
    retrieval: Any = None,
    summarize: Any = None,
    on_token: Callable[[str], Any] | None = None,
    **options: Any,
) -> ChatMessage:
    """The assistant's answer to the session as it is (see the module docstring)."""
    if provider is None or not hasattr(provider, "stream"):
        raise ValidationError("provider must be a ChatProvider (with stream())", field="provider")
    if system_prompt is None and await builder.system_prompt(session_id) is None:
        system_prompt = DEFAULT_SYSTEM_PROMPT
    window = await builder.build_window(
        session_id,
        system_prompt=system_prompt,
        budget=budget,
        retrieval=retrieval,
        summarize=summarize,
        format=getattr(provider, "format", "openai"),
    )
    used_model = model or getattr(provider, "model", None)
    name = getattr(provider, "name", type(provider).__name__)
    origin = getattr(provider, "origin", None)
    pieces: list[str] = []

    async def store(status: str | None) -> ChatMessage:
        meta: dict[str, Any] = {}
        if isinstance(origin, str):
            meta["origin"] = origin
        if status is not None:
            meta["status"] = status
        return await messages.append(
            session_id,
            "assistant",
            "".join(pieces),
            provider=name,
            model=used_model,
            **({"metadata": meta} if meta else {}),
        )

    try:
        async for piece in provider.stream(window.messages, model=used_model, **options):
            pieces.append(piece)
            if on_token is not None:
                out = on_token(piece)
                if inspect.isawaitable(out):
                    await out
            await asyncio.sleep(0)  # let a cancel land between pieces
    except asyncio.CancelledError:
        # stopped by the caller: what arrived is kept, marked so (the store itself is not cancelled)
        if pieces:
            await asyncio.shield(store(STOPPED))
        raise
    except ProviderError as e:
        # the stream broke after some text: that text is kept, marked incomplete; the error says why
        if pieces:
            e.partial = await store(INCOMPLETE)
        raise
    return await store(None)
