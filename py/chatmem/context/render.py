"""The context message as the original injects it: ``Module <key>: <json>``
lines, the JSON printed exactly as JavaScript's ``JSON.stringify`` prints it."""

from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

from ..errors import LimitExceeded, ValidationError

__all__ = ["render_context_message", "json_stringify"]


def render_context_message(snapshot: Mapping[str, Any]) -> dict[str, Any] | None:
    """The injected context message, or ``None`` for an empty snapshot::

    {"role": "user", "content": [{"type": "text", "text": "Module k: {json}\\n..."}]}
    """
    if not snapshot:
        return None
    text = "\n".join(f"Module {key}: {json_stringify(value)}" for key, value in snapshot.items())
    return {"role": "user", "content": [{"type": "text", "text": text}]}


_INDEX_KEY = re.compile(r"0|[1-9][0-9]*")
_SURROGATE = re.compile("[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]")


def _js_number(x: float) -> str:
    """JavaScript's Number::toString for a finite float (shortest round trip)."""
    if x == 0:
        return "0"
    if x < 0:
        return "-" + _js_number(-x)
    mantissa, _, exp_s = repr(x).partition("e")
    int_part, _, frac = mantissa.partition(".")
    raw = int_part + frac
    stripped = raw.lstrip("0")
    # value = 0.<digits> * 10**n
    n = len(int_part) + (int(exp_s) if exp_s else 0) - (len(raw) - len(stripped))
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    e = n - 1
    sign = "+" if e >= 0 else "-"
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{head}e{sign}{abs(e)}"


def _js_string(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)
    if _SURROGATE.search(out):

        def fix(m: re.Match[str]) -> str:
            t = m.group()
            if len(t) == 2:  # a well-formed pair JavaScript would print as is
                return t.encode("utf-16", "surrogatepass").decode("utf-16")
            return f"\\u{ord(t):04x}"

        out = _SURROGATE.sub(fix, out)
    return out


_MAX_DEPTH = 64  # chatmem.records.validation.DEFAULT_LIMITS.max_depth


def _stringify(v: Any, out: list[str], depth: int = 1) -> None:
    if depth > _MAX_DEPTH and isinstance(v, (Mapping, list, tuple)):
        raise LimitExceeded(
            f"a value is nested deeper than {_MAX_DEPTH} levels",
            limit="max_depth",
            maximum=_MAX_DEPTH,
            field="content",
        )
    if v is None or v is True or v is False:
        out.append("null" if v is None else "true" if v else "false")
    elif isinstance(v, str):
        out.append(_js_string(v))
    elif isinstance(v, int):
        out.append(str(v))
    elif isinstance(v, float):
        out.append(_js_number(v) if math.isfinite(v) else "null")
    elif isinstance(v, Mapping):
        keys = [str(k) if not isinstance(k, str) else k for k in v]
        pairs = list(zip(keys, v.values()))
        index = sorted(
            (p for p in pairs if _INDEX_KEY.fullmatch(p[0]) and int(p[0]) < 2**32 - 1),
            key=lambda p: int(p[0]),
        )
        rest = [p for p in pairs if not (_INDEX_KEY.fullmatch(p[0]) and int(p[0]) < 2**32 - 1)]
        out.append("{")
        for i, (k, val) in enumerate(index + rest):
            if i:
                out.append(",")
            out.append(_js_string(k))
            out.append(":")
            _stringify(val, out, depth + 1)
        out.append("}")
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(",")
            _stringify(item, out, depth + 1)
        out.append("]")
    else:
        raise ValidationError(f"{type(v).__name__} is not a JSON value", field="content")


def json_stringify(value: Any) -> str:
    """``JSON.stringify(value)`` as JavaScript prints it (see the module docstring)."""
    out: list[str] = []
    _stringify(value, out)
    return "".join(out)
