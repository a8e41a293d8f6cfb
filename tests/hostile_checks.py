"""Hostile inputs against a ``Memory``: each must raise a typed error, write nothing,
and leave the store usable. Plain Python: runs on CPython and inside the page (Pyodide).

A case is ``(kind, args)``: ``("append", (role, content, fields))``,
``("create", kwargs)``, ``("update", kwargs)``, ``("import", data)``, or one value
for another entry point (``add``, ``append_many``, ``fork``, ``delete_messages``,
``export``, ``sql_param``, ``sql_timeout``). Values may hold markers the page cannot
receive as they are (see ``expand``): deep nesting, long strings, huge integers, cycles.
"""

from __future__ import annotations

from typing import Any

from chatmem.errors import ValidationError

__all__ = [
    "EXPLICIT_MESSAGE_CASES",
    "SHAPE_CASES",
    "SHAPE_POISONS",
    "check_cases",
    "cycle",
    "deep",
    "deep_list",
    "expand",
    "import_shapes",
    "state",
]


def deep(n: int, leaf: Any = 1) -> Any:
    """``{"a": {"a": ... leaf}}``, ``n`` objects deep, built without recursion."""
    v = leaf
    for _ in range(n):
        v = {"a": v}
    return v


def deep_list(n: int, leaf: Any = 1) -> Any:
    """``[[... leaf]]``, ``n`` lists deep, built without recursion."""
    v = leaf
    for _ in range(n):
        v = [v]
    return v


def cycle(kind: str) -> Any:
    """A dict or list that holds itself."""
    if kind == "dict":
        d: dict[str, Any] = {}
        d["a"] = d
        return d
    items: list[Any] = []
    items.append(items)
    return items


def expand(v: Any) -> Any:
    """Replace the markers (which sit at most a few levels down): ``$deep`` (nested objects),
    ``$deeplist`` (nested lists), ``$big`` (a long string), ``$huge`` (an integer of that
    many digits), ``$cycle`` (a dict or list holding itself)."""
    if isinstance(v, dict):
        if set(v) == {"$deep"}:
            return deep(int(v["$deep"]))
        if set(v) == {"$deeplist"}:
            return deep_list(int(v["$deeplist"]))
        if set(v) == {"$big"}:
            return "x" * int(v["$big"])
        if set(v) == {"$huge"}:
            return 10 ** int(v["$huge"])
        if set(v) == {"$cycle"}:
            return cycle(str(v["$cycle"]))
        return {k: expand(x) for k, x in v.items()}
    if isinstance(v, list):
        return [expand(x) for x in v]
    if isinstance(v, tuple):
        return tuple(expand(x) for x in v)
    return v


#: the message cases met in the wild (lone surrogates, 64-bit overflow, NaN, deep nesting, size, bad types)
EXPLICIT_MESSAGE_CASES: list[tuple[str, Any]] = [
    ("append", ("user", "\ud800 lone surrogate", {})),
    ("append", ("user", "fine", {"created_at": 10**30})),
    ("append", ("user", [{"type": "text", "text": "a", "score": float("nan")}], {})),
    ("append", ("user", "fine", {"metadata": {"x": float("inf")}})),
    ("append", ("user", "fine", {"metadata": {"$deep": 5000}})),
    ("append", ("user", [{"type": "text", "text": "a", "extra": {"$deep": 3000}}], {})),
    ("append", ("user", {"$big": 5 * 1024 * 1024}, {})),
    ("append", ("evil", {"x": 1}, {})),
    ("append", ("user", "fine", {"metadata": {1: "non-string key"}})),
    ("append", ("user", "fine", {"metadata": {"k\udfff": 1}})),
    ("append", ("user", "fine", {"no_such_field": 1})),
    ("create", {"title": "\udc80"}),
    ("create", {"tags": ["ok", "\ud83d"]}),
    ("update", {"title": "\ud800"}),
    (
        "import",
        {
            "version": "1.0.0",
            "exportedAt": 0,
            "sessions": [
                {
                    "meta": {"sessionId": "imp-1", "title": "t", "createdAt": 1, "updatedAt": 1},
                    "messages": [
                        {"id": "imp-m1", "role": "user", "content": {"$big": 5 * 1024 * 1024}, "createdAt": 1}
                    ],
                }
            ],
        },
    ),
    (
        "import",
        {
            "version": "1.0.0",
            "exportedAt": 0,
            "sessions": [
                {
                    "meta": {"sessionId": "imp-2", "title": "t", "createdAt": 10**30, "updatedAt": 1},
                    "messages": [],
                }
            ],
        },
    ),
    (
        "import",
        {
            "version": "1.0.0",
            "exportedAt": 0,
            "sessions": [
                {
                    "meta": {"sessionId": "imp-3", "title": "t", "createdAt": 1, "updatedAt": 1},
                    "messages": [
                        {
                            "id": "imp-m3",
                            "role": "user",
                            "content": "x",
                            "createdAt": 1,
                            "metadata": {"$deep": 2000},
                        }
                    ],
                }
            ],
        },
    ),
    (
        "import",
        '{"version":"1.0.0","sessions":[{"meta":{"sessionId":"imp-4","createdAt":1,"updatedAt":1},'
        '"messages":[{"id":"imp-m4","role":"user","content":"x","createdAt":1,"metadata":{"a":NaN}}]}]}',
    ),
    ("import", '{"version":"1.0.0","sessions":[' + "[" * 50_000 + "]" * 50_000 + "]}"),
]


#: values no entry point may take, each put where a caller could pass it
SHAPE_POISONS: list[Any] = [
    {"$deeplist": 5000},
    {"$deep": 5000},
    {"$cycle": "dict"},
    {"$cycle": "list"},
    {1: 2},
    {b"version": "1.0.0"},
    {"$huge": 5000},
    10**30,
    float("nan"),
    float("inf"),
    "\ud800",
    {"\ud800": 1},
    {1, 2},
    b"bytes",
]


def import_shapes(x: Any) -> list[Any]:
    """Imports in each format with ``x`` where a reader meets it first (a title, a time,
    the mapping, the sessions, the version) and the bare value itself."""
    return [
        [
            {
                "title": x,
                "create_time": 1.0,
                "current_node": "r",
                "mapping": {
                    "r": {
                        "id": "r",
                        "parent": None,
                        "children": [],
                        "message": {
                            "id": "m",
                            "author": {"role": "user"},
                            "create_time": 1.0,
                            "metadata": x,
                            "content": {"content_type": "text", "parts": [x]},
                        },
                    }
                },
            }
        ],
        [{"title": "t", "create_time": x, "mapping": x, "current_node": "r"}],
        [{"uuid": x, "name": "n", "created_at": x, "chat_messages": x}],
        [
            {
                "uuid": "u",
                "name": x,
                "created_at": "2024-01-01T00:00:00Z",
                "chat_messages": [
                    {
                        "uuid": "m",
                        "sender": "human",
                        "text": x,
                        "content": [x],
                        "created_at": "2024-01-01T00:00:00Z",
                    }
                ],
            }
        ],
        {"format": "chat-sessions-index:v1", "sessions": x, "index": x},
        {
            "format": "chat-sessions-index:v1",
            "sessions": {"s": {"meta": x, "messages": [{"role": "user", "content": x}]}},
        },
        {"version": x, "exportedAt": x, "sessions": x},
        {"version": "1.0.0", "exportedAt": 1, "sessions": [{"meta": x, "messages": x}]},
        x,
    ]


#: every entry point that takes caller data, with each shape poison: imports in every
#: format, appends, batches, session ids, forks, deletes, exports and queries
SHAPE_CASES: list[tuple[str, Any]] = [
    *[("import", shape) for x in SHAPE_POISONS for shape in import_shapes(x)],
    *[
        (kind, x)
        for x in SHAPE_POISONS
        for kind in ("add", "append_many", "fork", "delete_messages", "export", "sql_param", "sql_timeout")
        if not (kind == "sql_param" and isinstance(x, float))
    ],  # NaN and Infinity are SQL values
    *[("append", ("user", "fine", {"metadata": {"k": x}})) for x in SHAPE_POISONS],
    *[("append", ("user", [{"type": "text", "text": "a", "v": x}], {})) for x in SHAPE_POISONS],
    *[("create", {"tags": x}) for x in SHAPE_POISONS],
]


async def state(mem: Any) -> tuple[Any, ...]:
    """Everything a failed call must leave as it was: sessions, messages, outbox."""
    sessions = sorted(
        (s.session_id, s.title, tuple(s.tags), s.message_count)
        for s in await mem.sessions.list(limit=None, archived=None)
    )
    msgs = []
    for sid, *_ in sessions:
        msgs += [(m.id, m.seq) for m in await mem.messages.list(sid, limit=None)]
    pending = len(await mem.store.outbox_list())
    return tuple(sessions), tuple(sorted(msgs)), pending


async def _attempt(mem: Any, sid: str, kind: str, args: Any) -> None:
    args = expand(args)
    if kind == "append":
        role, content, fields = args
        await mem.messages.append(sid, role, content, **fields)
    elif kind == "create":
        await mem.sessions.create(**args)
    elif kind == "update":
        await mem.sessions.update(sid, **args)
    elif kind == "import":
        await mem.import_sessions(args, preserve_ids=True)
    elif kind == "add":
        await mem.messages.add(args, "user", "hi")
    elif kind == "append_many":
        await mem.messages.append_many(sid, args if isinstance(args, list) else [args])
    elif kind == "fork":
        await mem.sessions.fork(sid, at_index=args)
    elif kind == "delete_messages":
        await mem.sessions.delete_messages(sid, args if isinstance(args, list) else [args])
    elif kind == "export":
        await mem.export(args if isinstance(args, list) else [args])
    elif kind == "sql_param":
        await mem.sql("SELECT ? AS a", [args])
    elif kind == "sql_timeout":
        await mem.sql("SELECT 1 AS a", timeout=args)
    else:
        raise AssertionError(f"unknown case kind {kind}")


async def check_cases(mem: Any, cases: list[tuple[str, Any]]) -> list[str]:
    """Run every case; return the error class names. Raises AssertionError on the first
    case that is accepted, raises something untyped, writes anything, or breaks the
    next normal call."""
    s = await mem.sessions.create(title="hostile")
    sid = s.session_id
    await mem.messages.append(sid, "user", "needle before")
    names = []
    for i, (kind, args) in enumerate(cases):
        before = await state(mem)
        try:
            await _attempt(mem, sid, kind, args)
        except ValidationError as e:
            names.append(type(e).__name__)
        except Exception as e:  # noqa: BLE001 - the point: nothing else may escape
            raise AssertionError(f"case {i} ({kind}) raised {type(e).__name__}: {str(e)[:200]}") from e
        else:
            raise AssertionError(f"case {i} ({kind}) was accepted: {str(args)[:200]}")
        after = await state(mem)
        assert after == before, f"case {i} ({kind}) changed the store"
        # the next normal operation works and is found
        m = await mem.messages.append(sid, "assistant", f"needle after {i}")
        assert (await mem.messages.get(m.id)).text == f"needle after {i}"
    hits = await mem.search("needle", limit=None)
    assert len(hits) == len(cases) + 1, len(hits)
    return names
