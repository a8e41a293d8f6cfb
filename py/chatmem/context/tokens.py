"""Token counting behind one small protocol.

The default, ``EstimateTokenizer``, is the original's estimate
(``ceil(len(text) / 4)``, ``chatmem.records.models.estimate_tokens``), which is also
what the store records as each message's ``token_count`` at write time. So
the default tokenizer trusts a stored ``ChatMessage.token_count`` and never
recounts the text of a stored message; any other tokenizer recounts.

``count_message`` adds a per-message overhead (the framing a provider wraps
around each message: role, separators) plus the tokens of any ``tool_calls``
(their compact JSON) and ``name``/``tool_call_id``. The overhead follows the
target format of the window (``MESSAGE_OVERHEAD``): 4 tokens for ``openai``
(OpenAI's guidance: about 3-4 tokens per message), 3 for ``anthropic`` (the
turn markers of the Messages API). A tokenizer built with an explicit
``message_overhead=`` keeps it for every format; ``build_context(...,
message_overhead=N)`` overrides both for one call.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from ..errors import ValidationError
from ..records.models import ChatMessage, estimate_tokens, extract_text

__all__ = [
    "Tokenizer",
    "EstimateTokenizer",
    "BPETokenizer",
    "CounterSource",
    "BPE_ENCODINGS",
    "DEFAULT_MESSAGE_OVERHEAD",
    "MESSAGE_OVERHEAD",
    "for_format",
    "message_extra_text",
]

#: tokens of framing counted once per message (role, separators)
DEFAULT_MESSAGE_OVERHEAD = 4
#: tokens of framing per message, by the target format of a context window
MESSAGE_OVERHEAD = {"openai": 4, "anthropic": 3}


class CounterSource(Protocol):
    """Where a bundled BPE counter comes from: a ``Runtime`` is one."""

    async def token_counter(self, encoding: str) -> Callable[[str], int]: ...


@runtime_checkable
class Tokenizer(Protocol):
    """Counts the tokens of a text and of a whole message (its framing included) for a model."""

    name: str

    def count(self, text: str) -> int: ...

    def count_message(self, message: ChatMessage | Mapping[str, Any]) -> int: ...


def message_extra_text(message: ChatMessage | Mapping[str, Any]) -> str:
    """Text beyond the content that a provider still sends: tool calls (as
    compact JSON), ``tool_call_id`` and ``name``. Empty for a plain message."""
    if isinstance(message, ChatMessage):
        calls, call_id, name = message.tool_calls, message.tool_call_id, message.name
    else:
        calls = message.get("tool_calls", message.get("toolCalls"))
        call_id = message.get("tool_call_id", message.get("toolCallId"))
        name = message.get("name")
    if not (calls or call_id or name):
        return ""
    parts = []
    if calls:
        parts.append(json.dumps(calls, separators=(",", ":"), ensure_ascii=False))
    if call_id:
        parts.append(call_id)
    if name:
        parts.append(name)
    return "\n".join(parts)


def _check_overhead(value: int | None) -> int:
    if value is None:
        return DEFAULT_MESSAGE_OVERHEAD
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError("message_overhead must be an int >= 0", field="message_overhead")
    return value


def for_format(tokenizer: Tokenizer, format: str, message_overhead: int | None = None) -> Tokenizer:
    """``tokenizer`` counting the per-message overhead of ``format`` (see the module
    docstring): ``message_overhead`` if given, else the tokenizer's own explicit
    overhead, else ``MESSAGE_OVERHEAD[format]``. Returns a copy when that changes it."""
    if format not in MESSAGE_OVERHEAD:
        raise ValidationError(f"format must be one of {sorted(MESSAGE_OVERHEAD)}", field="format")
    if message_overhead is None:
        if getattr(tokenizer, "overhead_fixed", True):
            return tokenizer
        message_overhead = MESSAGE_OVERHEAD[format]
    overhead = _check_overhead(message_overhead)
    if getattr(tokenizer, "message_overhead", overhead) == overhead or not hasattr(
        tokenizer, "message_overhead"
    ):
        return tokenizer
    out = copy.copy(tokenizer)
    out.message_overhead = overhead
    return out


class EstimateTokenizer:
    """``ceil(len(text) / 4)`` per text, plus ``message_overhead`` per message.

    For a ``ChatMessage`` the stored ``token_count`` stands for its content
    (``trust_stored=True``, the default): it was computed with this same
    estimate at write time, or given by the caller (e.g. from a provider's
    usage report) and then is the better number.
    """

    name = "estimate"

    def __init__(self, message_overhead: int | None = None, *, trust_stored: bool = True):
        #: False while the overhead is the default, which then follows the window's format
        self.overhead_fixed = message_overhead is not None
        self.message_overhead = _check_overhead(message_overhead)
        self.trust_stored = trust_stored

    def __repr__(self) -> str:
        return f"EstimateTokenizer(message_overhead={self.message_overhead})"

    def count(self, text: str) -> int:
        return estimate_tokens(text)

    def count_message(self, message: ChatMessage | Mapping[str, Any]) -> int:
        if isinstance(message, ChatMessage):
            content = message.token_count if self.trust_stored else estimate_tokens(message.text)
            extra = (
                message_extra_text(message)
                if (message.tool_calls or message.tool_call_id or message.name)
                else ""
            )
        elif self.trust_stored and isinstance(message.get("tokenCount"), int):  # a stored record
            content = message["tokenCount"]
            extra = message_extra_text(message)
        else:
            content = estimate_tokens(extract_text(message.get("content")))
            extra = message_extra_text(message)
        return self.message_overhead + content + (estimate_tokens(extra) if extra else 0)


#: which models each exact encoding suits (see docs/in-depth/context.md)
BPE_ENCODINGS = {
    "o200k_base": "GPT-4o, GPT-4o mini, GPT-4.1, o1/o3/o4-mini, GPT-5",
    "cl100k_base": "GPT-4, GPT-4 Turbo, GPT-3.5 Turbo, text-embedding-3-*",
}


class BPETokenizer:
    """Exact token counts for an OpenAI-family encoding.

    ``count`` is any synchronous ``text -> int``; in the browser
    ``await BPETokenizer.load("o200k_base")`` uses the bundled gpt-tokenizer
    ranks (nothing is downloaded from elsewhere). Stored counts are estimates,
    so this tokenizer recounts each message it is asked about.
    """

    def __init__(self, encoding: str, count: Callable[[str], int], message_overhead: int | None = None):
        if encoding not in BPE_ENCODINGS:
            raise ValidationError(f"encoding must be one of {sorted(BPE_ENCODINGS)}", field="encoding")
        self.name = encoding
        self._count = count
        self.overhead_fixed = message_overhead is not None
        self.message_overhead = _check_overhead(message_overhead)

    @classmethod
    async def load(
        cls, encoding: str = "o200k_base", *, runtime: CounterSource | None = None
    ) -> BPETokenizer:
        """The bundled counter of ``runtime`` (this platform's by default); on CPython
        ``UnsupportedEnvironment``: pass ``count=`` there instead."""
        if encoding not in BPE_ENCODINGS:
            raise ValidationError(f"encoding must be one of {sorted(BPE_ENCODINGS)}", field="encoding")
        if runtime is None:
            from ..runtime import default_runtime

            runtime = default_runtime()
        return cls(encoding, await runtime.token_counter(encoding))

    def count(self, text: str) -> int:
        return self._count(text) if text else 0

    def count_message(self, message: ChatMessage | Mapping[str, Any]) -> int:
        if isinstance(message, ChatMessage):
            text, extra = message.text, message_extra_text(message)
        else:
            text, extra = extract_text(message.get("content")), message_extra_text(message)
        return self.message_overhead + self.count(text) + (self.count(extra) if extra else 0)
