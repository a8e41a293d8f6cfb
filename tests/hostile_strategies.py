"""Hypothesis strategies for hostile records, exports and sync operations (CPython only).

Every example holds exactly one *poison* (NaN or Infinity, an integer past 64
bits, a lone surrogate, nesting past the depth limit, a string past the size
limit, a wrong type, an unknown field) put at a random place of an otherwise
valid record, so every example must be refused.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

__all__ = [
    "SMALL_LIMITS",
    "poison",
    "json_poison",
    "shape_poison",
    "hostile_message",
    "hostile_session_kwargs",
    "hostile_export",
    "hostile_import",
    "hostile_op",
]

#: what the batteries run with, so an oversize record stays cheap to build
SMALL_LIMITS = {"max_message_bytes": 64 * 1024, "max_session_bytes": 16 * 1024, "max_depth": 32}

_SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)
_TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=20)
_KEY = st.text(alphabet="abcdefghij_", min_size=1, max_size=6)


def _surrogate_text() -> st.SearchStrategy[str]:
    return st.tuples(_TEXT, _SURROGATES, _TEXT).map("".join)


def json_poison() -> st.SearchStrategy[Any]:
    """Poisons that JSON text can carry (for the wire): NaN/Infinity, big ints, lone surrogates, depth, size."""
    return st.one_of(
        st.sampled_from([float("nan"), float("inf"), float("-inf")]),
        st.sampled_from([2**63, -(2**63) - 1, 10**30]),
        _surrogate_text(),
        st.integers(40, 600).map(lambda n: {"$deep": n}),
        st.integers(70 * 1024, 90 * 1024).map(lambda n: {"$big": n}),
    )


def shape_poison() -> st.SearchStrategy[Any]:
    """Poisons of shape and size that only a Python caller can hand over: nesting of lists
    or objects to 6,000 levels, cycles, integers of thousands of digits, non-string keys."""
    return st.one_of(
        st.integers(600, 6000).map(lambda n: {"$deep": n}),
        st.integers(40, 6000).map(lambda n: {"$deeplist": n}),
        st.sampled_from([{"$cycle": "dict"}, {"$cycle": "list"}]),
        st.integers(20, 6000).map(lambda n: {"$huge": n}),
        st.sampled_from([{1: "int key"}, {b"k": "bytes key"}, {None: 1}, {(1, 2): "tuple key"}]),
    )


def poison() -> st.SearchStrategy[Any]:
    """Every poison, including Python values that are not JSON at all."""
    return st.one_of(
        json_poison(),
        shape_poison(),
        st.sampled_from([b"bytes", frozenset({1}), 1 + 2j]),
    )


@st.composite
def hostile_import(draw: st.DrawFn) -> Any:
    """An import in one of the formats (or a bare value) with a poison where a reader meets it."""
    from hostile_checks import import_shapes

    shapes = import_shapes(draw(st.one_of(json_poison(), shape_poison())))
    return shapes[draw(st.integers(0, len(shapes) - 1))]


def _valid_content() -> st.SearchStrategy[Any]:
    return st.one_of(
        _TEXT, st.lists(st.builds(lambda t: {"type": "text", "text": t}, _TEXT), min_size=1, max_size=3)
    )


def _nest(value: Any, path: list[str]) -> Any:
    for k in reversed(path):
        value = {k: value}
    return value


@st.composite
def hostile_message(
    draw: st.DrawFn, poisons: st.SearchStrategy[Any] | None = None
) -> tuple[str, Any, dict[str, Any]]:
    """``(role, content, fields)`` for ``messages.append`` with one poison somewhere."""
    bad = draw(poisons if poisons is not None else poison())
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    content = draw(_valid_content())
    fields: dict[str, Any] = {}
    if draw(st.booleans()):
        fields["metadata"] = draw(st.dictionaries(_KEY, _TEXT, max_size=3))
    where = draw(st.sampled_from(["content", "part", "metadata", "created_at", "tool_calls", "role", "name"]))
    if where == "content":
        content = (
            bad
            if isinstance(bad, str) or isinstance(bad, dict) and "$big" in bad
            else [{"type": "text", "text": "x", "v": bad}]
        )
    elif where == "part":
        content = [{"type": "text", "text": "ok"}, {"type": "text", "text": "x", "extra": bad}]
    elif where == "metadata":
        fields["metadata"] = dict(
            fields.get("metadata") or {}, **_nest(bad, draw(st.lists(_KEY, min_size=1, max_size=3)))
        )
    elif where == "created_at":
        fields["created_at"] = bad
    elif where == "tool_calls":
        fields["tool_calls"] = [
            {"id": "call-1", "type": "function", "function": {"name": "f", "arguments": bad}}
        ]
    elif where == "role":
        role = bad
    else:
        fields["name"] = bad
    return role, content, fields


@st.composite
def hostile_session_kwargs(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments for ``sessions.create`` with one poison in a text field or the tags."""
    bad = draw(st.one_of(_surrogate_text(), st.integers(20 * 1024, 30 * 1024).map(lambda n: {"$big": n})))
    where = draw(st.sampled_from(["title", "tags", "character_id"]))
    if where == "tags":
        return {"tags": [draw(_TEXT), bad]}
    return {where: bad}


_RECORD_KEYS = {"created_at": "createdAt", "tool_calls": "toolCalls", "name": "name", "metadata": "metadata"}


def message_record(mid: str, sid: str, msg: tuple[str, Any, dict[str, Any]]) -> dict[str, Any]:
    """A stored-message record (camelCase) from a ``hostile_message`` example."""
    role, content, fields = msg
    rec: dict[str, Any] = {"id": mid, "sessionId": sid, "role": role, "content": content, "createdAt": 1}
    for k, v in fields.items():
        rec[_RECORD_KEYS[k]] = v
    return rec


@st.composite
def hostile_export(draw: st.DrawFn) -> dict[str, Any]:
    """A chatmem export whose one message (or session) is poisoned."""
    sid = "exp-" + draw(st.text(alphabet="abcdef0123", min_size=4, max_size=8))
    meta: dict[str, Any] = {"sessionId": sid, "title": "t", "createdAt": 1, "updatedAt": 1}
    msgs = [{"id": sid + "-ok", "role": "user", "content": "fine", "createdAt": 1}]
    if draw(st.booleans()):
        msgs.append(message_record(sid + "-bad", sid, draw(hostile_message())))
    else:
        meta[draw(st.sampled_from(["title", "createdAt"]))] = draw(json_poison())
    return {"version": "1.0.0", "exportedAt": 0, "sessions": [{"meta": meta, "messages": msgs}]}


@st.composite
def hostile_op(draw: st.DrawFn, n: int) -> dict[str, Any]:
    """A sync operation (message create or session create/update) with one JSON-carried poison."""
    kind = draw(st.sampled_from(["message", "session-create", "session-update", "hlc", "shape"]))
    base = {
        "op_id": f"bad-{n}",
        "timestamp": 1,
        "attempts": 0,
        "hlc": f"{1_700_000_000_000 + n:013d}-0000-dev",
    }
    if kind == "message":
        rec = message_record(f"m-bad-{n}", "s-ok", draw(hostile_message(json_poison())))
        return {**base, "type": "create", "resource": "message", "id": rec["id"], "data": rec}
    if kind == "hlc":
        return {
            **base,
            "type": "create",
            "resource": "session",
            "id": "s-ok",
            "hlc": draw(st.sampled_from(["9999999999999-9999-x", "9999999999999-0000-dev"])),
            "data": {"title": "from the future"},
        }
    if kind == "shape":
        data = draw(
            st.sampled_from(
                [
                    {"sessionId": "s-ok", "role": "user", "content": "no createdAt"},
                    {"sessionId": "s-ok", "role": "evil", "content": "x", "createdAt": 1},
                    {"sessionId": "s-ok", "role": "user", "content": {"x": 1}, "createdAt": 1},
                    {"sessionId": "s-ok", "role": "user", "content": "x", "createdAt": 1, "bogus": True},
                ]
            )
        )
        return {**base, "type": "create", "resource": "message", "id": f"m-bad-{n}", "data": data}
    field = draw(st.sampled_from(["title", "tags", "pinned", "createdAt"]))
    bad = draw(json_poison())
    value = [bad] if field == "tags" else bad
    typ = "create" if kind == "session-create" else "update"
    return {**base, "type": typ, "resource": "session", "id": "s-ok", "data": {field: value}}
