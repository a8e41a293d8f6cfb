"""Turn what a caller hands to import (dict, list, ``str`` or ``bytes`` JSON text) into
plain JSON values, with a clear error for text that is not JSON. Pure: no I/O."""

from __future__ import annotations

import json
from typing import Any

from ..errors import ImportFormatError, ImportLimitExceeded
from ..records.validation import DEFAULT_LIMITS, Limits, check_shape

__all__ = ["load_json", "describe"]


def _no_constants(name: str) -> Any:
    raise ImportFormatError(f"{name} is not valid JSON")


def load_json(data: Any, limits: Limits = DEFAULT_LIMITS) -> Any:
    """``data`` itself when it is already a dict or list; parsed JSON when it is text.

    ``bytes`` may be UTF-8 (with or without a byte-order mark). ``NaN`` and
    ``Infinity`` are refused, as JSON forbids them. Text longer than
    ``limits.max_import_bytes`` or nested deeper than the records allow raises
    ``LimitExceeded`` (an ``ImportFormatError`` is raised for the rest).
    """
    if isinstance(data, (dict, list)):
        return _shaped(data, limits)
    if isinstance(data, (str, bytes, bytearray, memoryview)) and len(data) > limits.max_import_bytes:
        raise ImportLimitExceeded(
            f"the import is larger than {limits.max_import_bytes} bytes",
            limit="max_import_bytes",
            maximum=limits.max_import_bytes,
        )
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            data = bytes(data).decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise ImportFormatError(f"import data is not UTF-8 text: {e}") from e
    if isinstance(data, str):
        if data.startswith("\ufeff"):
            data = data[1:]
        if not data.strip():
            raise ImportFormatError("malformed JSON: the input is empty")
        try:
            return _shaped(json.loads(data, parse_constant=_no_constants), limits)
        except RecursionError as e:
            raise ImportLimitExceeded(
                "the import is nested too deeply to be records", limit="max_depth", maximum=limits.max_depth
            ) from e
        except json.JSONDecodeError as e:
            raise ImportFormatError(f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from e
        except ValueError as e:
            raise ImportFormatError(f"malformed JSON: {e}") from e
    raise ImportFormatError(
        f"import data must be a dict, a list, or JSON text (str/bytes), got {type(data).__name__}"
    )


def _shaped(data: Any, limits: Limits) -> Any:
    """``data`` once ``check_shape`` passed it: JSON types and string keys only, numbers in
    range, nesting bounded (so no reader or error message meets a recursion limit)."""
    check_shape(data, limits, what="the import", error=ImportFormatError, too_deep=ImportLimitExceeded)
    return data


def describe(value: Any) -> str:
    """A short name for a JSON value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
