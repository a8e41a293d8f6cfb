"""check_value: the size it reports and the path its errors name, for leaves counted
in place (strings, nulls) and for values walked further (lists, nested dicts)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from chatmem.errors import LimitExceeded, ValidationError
from chatmem.records.validation import Limits, check_value

POISONS: list[tuple[Any, str, str]] = [
    # (value, the error's path prefix, words of the message)
    ({"metadata": {"a": [1, {"b": math.nan}]}}, "metadata.a[1].b: ", "NaN"),
    ({"content": "ok", "tool_calls": [{"id": "\ud800"}]}, "tool_calls[0].id: ", "lone surrogate"),
    ({"metadata": {"n": 2**63}}, "metadata.n: ", "64-bit"),
    ({"metadata": {"k": (1, 2)}}, "metadata.k: ", "tuple is not a JSON value"),
    ({"metadata": {"x": {1: "a"}}}, "metadata.x: ", "keys must be strings"),
    ([["a", {"é\ud800": 1}]], "[0][1]: ", "lone surrogate"),
]


@pytest.mark.parametrize(("value", "where", "words"), POISONS)
def test_errors_name_the_path_of_the_bad_value(value: Any, where: str, words: str) -> None:
    with pytest.raises(ValidationError) as e:
        check_value(value)
    assert str(e.value).startswith(where) and words in str(e.value)


def test_a_record_field_names_itself_in_the_error() -> None:
    with pytest.raises(ValidationError) as e:
        check_value({"role": "user", "metadata": {"deep": [math.inf]}})
    assert e.value.field == "metadata"


def test_the_root_path_prefixes_every_error() -> None:
    with pytest.raises(ValidationError) as e:
        check_value({"a": [None, math.nan]}, path="sessions[3]")
    assert str(e.value).startswith("sessions[3].a[1]: ")


@pytest.mark.parametrize(
    "value",
    [
        {"role": "user", "content": 'plain "quoted" \\ text', "name": None, "pinned": True},
        {"content": "café naïve résumé", "meta": {"k": ["x", 1, 2.5, None, False]}},
        [{"a": "b"}, [], {}, "", 0],
    ],
)
def test_size_is_at_least_the_compact_json(value: Any) -> None:
    """The size bounds the record's JSON from above (what the byte limits compare)."""
    compact = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    assert check_value(value) >= compact


def test_a_record_past_the_byte_limit_is_refused() -> None:
    with pytest.raises(LimitExceeded) as e:
        check_value({"content": "x" * 2000}, max_bytes=1000)
    assert e.value.limit == "max_message_bytes"


def test_nesting_past_the_depth_limit_names_its_path() -> None:
    value: Any = "leaf"
    for _ in range(6):
        value = {"k": value}
    with pytest.raises(LimitExceeded) as e:
        check_value(value, Limits(max_depth=3))
    assert str(e.value).startswith("k.k.k: ") and e.value.limit == "max_depth"
