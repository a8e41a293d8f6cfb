"""Token counting: the original's estimate, the per-message overhead, stored counts."""

from __future__ import annotations

import pytest

from chatmem.context.tokens import DEFAULT_MESSAGE_OVERHEAD, EstimateTokenizer, Tokenizer, message_extra_text
from chatmem.errors import ValidationError
from chatmem.records.models import ChatMessage, estimate_tokens


@pytest.mark.parametrize(
    "text, tokens", [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("x" * 400, 100), ("é" * 8, 2)]
)
def test_count_is_ceil_len_over_four_like_the_store(text, tokens):
    """count() is ceil(len/4) and agrees with models.estimate_tokens."""
    assert EstimateTokenizer().count(text) == tokens == estimate_tokens(text)


def test_message_overhead_is_added_once_and_configurable():
    """count_message adds the documented 4-token overhead (configurable) to the content."""
    assert DEFAULT_MESSAGE_OVERHEAD == 4
    m = {"role": "user", "content": [{"type": "text", "text": "abcdefgh"}]}
    assert EstimateTokenizer().count_message(m) == 2 + 4
    assert EstimateTokenizer(message_overhead=0).count_message(m) == 2
    with pytest.raises(ValidationError):
        EstimateTokenizer(message_overhead=-1)


def test_stored_count_is_trusted_by_default_only():
    """A ChatMessage or record's stored token count is used unless trust_stored=False."""
    m = ChatMessage(id="a", session_id="s", seq=0, role="user", content="hi", created_at=0, token_count=50)
    assert EstimateTokenizer().count_message(m) == 54
    assert EstimateTokenizer().count_message(m.to_record()) == 54
    assert EstimateTokenizer(trust_stored=False).count_message(m) == 5


def test_tool_calls_and_ids_are_counted():
    """Tool calls (compact JSON), tool_call_id and name add to a message's count."""
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    m = ChatMessage(
        id="a", session_id="s", seq=0, role="assistant", content="", created_at=0, tool_calls=calls
    )
    extra = message_extra_text(m)
    assert extra == '[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]'
    assert EstimateTokenizer().count_message(m) == 4 + estimate_tokens(extra)
    assert EstimateTokenizer().count_message(m.to_provider()) == EstimateTokenizer().count_message(m)
    t = {"role": "tool", "content": "42", "tool_call_id": "call_123"}
    assert EstimateTokenizer().count_message(t) == 4 + 1 + 2


def test_estimate_tokenizer_satisfies_the_protocol():
    """EstimateTokenizer is a Tokenizer named 'estimate'."""
    tk = EstimateTokenizer()
    assert isinstance(tk, Tokenizer) and tk.name == "estimate"


def test_public_names_exist():
    """Every name in chatmem.context.tokens.__all__ is defined (the export list cannot rot)."""
    import chatmem.context.tokens as mod

    assert mod.__all__ and all(hasattr(mod, name) for name in mod.__all__)
