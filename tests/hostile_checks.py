"""Hostile inputs against a ``Memory``: each must raise a typed error, write nothing,
and leave the store usable. Plain Python: runs on CPython and inside the page (Pyodide).

A case is ``(kind, args)``: ``("append", (role, content, fields))``,
``("create", kwargs)``, ``("update", kwargs)`` or ``("import", data)``. Values may
hold markers the page cannot receive as they are: ``{"$deep": n}`` (n nested
objects), ``{"$big": n}`` (a string of n characters); ``expand`` builds them.
"""

from __future__ import annotations

from typing import Any

from chatmem.errors import ValidationError

__all__ = ["EXPLICIT_MESSAGE_CASES", "deep", "expand", "state", "check_cases"]


def deep(n: int, leaf: Any = 1) -> Any:
    """``{"a": {"a": ... leaf}}``, ``n`` objects deep, built without recursion."""
    v = leaf
    for _ in range(n):
        v = {"a": v}
    return v


def expand(v: Any) -> Any:
    """Replace the ``$deep`` / ``$big`` markers (markers sit at most a few levels down)."""
    if isinstance(v, dict):
        if set(v) == {"$deep"}:
            return deep(int(v["$deep"]))
        if set(v) == {"$big"}:
            return "x" * int(v["$big"])
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
    ("import", {"version": "1.0.0", "exportedAt": 0, "sessions": [
        {"meta": {"sessionId": "imp-1", "title": "t", "createdAt": 1, "updatedAt": 1},
         "messages": [{"id": "imp-m1", "role": "user", "content": {"$big": 5 * 1024 * 1024}, "createdAt": 1}]}]}),
    ("import", {"version": "1.0.0", "exportedAt": 0, "sessions": [
        {"meta": {"sessionId": "imp-2", "title": "t", "createdAt": 10**30, "updatedAt": 1}, "messages": []}]}),
    ("import", {"version": "1.0.0", "exportedAt": 0, "sessions": [
        {"meta": {"sessionId": "imp-3", "title": "t", "createdAt": 1, "updatedAt": 1},
         "messages": [{"id": "imp-m3", "role": "user", "content": "x", "createdAt": 1,
                       "metadata": {"$deep": 2000}}]}]}),
    ("import", '{"version":"1.0.0","sessions":[{"meta":{"sessionId":"imp-4","createdAt":1,"updatedAt":1},'
               '"messages":[{"id":"imp-m4","role":"user","content":"x","createdAt":1,"metadata":{"a":NaN}}]}]}'),
    ("import", '{"version":"1.0.0","sessions":[' + "[" * 50_000 + "]" * 50_000 + "]}"),
]


async def state(mem: Any) -> tuple[Any, ...]:
    """Everything a failed call must leave as it was: sessions, messages, outbox."""
    sessions = sorted((s.session_id, s.title, tuple(s.tags), s.message_count)
                      for s in await mem.sessions.list(limit=None, archived=None))
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
