"""The runtime is chosen once, by ``open()``, and injected: ``Memory`` builds every
service from it through constructors, and no service refers back to the ``Memory``."""

from __future__ import annotations

from typing import Any

import pytest

import chatmem
from chatmem.errors import UnsupportedEnvironment, ValidationError
from chatmem.http import HTTPResponse, MockTransport
from chatmem.runtime import CPythonRuntime, LocalDrainLock, default_runtime


class Recording(CPythonRuntime):
    """CPython with a fake clock, sleep and random, and a count of what was asked of it."""

    def __init__(self) -> None:
        self.slept: list[float] = []
        self.locks: list[str] = []
        super().__init__(
            clock=lambda: 1_700_000_000_000,
            sleep=self.nap,
            rand=lambda: 0.25,
            transport=MockTransport(lambda *a: HTTPResponse(200, {}, b"{}")),
        )

    async def nap(self, seconds: float) -> None:
        self.slept.append(seconds)

    def drain_lock(self, name: str) -> LocalDrainLock:
        self.locks.append(name)
        return super().drain_lock(name)


async def test_open_takes_a_runtime_and_every_service_gets_its_parts() -> None:
    """The clock, sleep, random, transport and drain lock of the given runtime reach the services."""
    rt = Recording()

    async with await chatmem.open("rt", runtime=rt) as mem:
        s = await mem.sessions.create(title="t")
        created = s.created_at
    assert mem.runtime is rt and created == 1_700_000_000_000
    assert mem.sync.sleep == rt.nap and mem.sync.rand() == 0.25 and mem.sync.transport is rt.transport
    assert rt.locks == ["chatmem"]  # one drain lock, asked of the runtime once, by the store name


async def test_open_refuses_what_is_not_a_runtime() -> None:
    """A wrong ``runtime=`` is a ValidationError naming the field; nothing is opened."""
    with pytest.raises(ValidationError) as e:
        (await chatmem.open(runtime="page"))  # type: ignore[arg-type]
    assert e.value.field == "runtime"


async def test_cpython_runtime_has_no_browser_parts() -> None:
    """IndexedDB and the bundled BPE counter are the page's: on CPython, a clear error."""
    rt = default_runtime()
    assert isinstance(rt, CPythonRuntime) and not chatmem.IN_BROWSER
    with pytest.raises(UnsupportedEnvironment):
        await rt.open_indexeddb("x", durability="relaxed")
    with pytest.raises(UnsupportedEnvironment):
        await chatmem.BPETokenizer.load("o200k_base", runtime=rt)
    assert rt.online is None and rt.on_online(lambda: None) is None


async def test_no_service_refers_back_to_memory() -> None:
    """Services hold the store, the core and each other, never the facade (no patching after build)."""

    mem = await chatmem.open("back")
    await mem.close()
    services = [
        mem.sessions,
        mem.messages,
        mem.context_store,
        mem.retention,
        mem.sync,
        mem.index,
        mem._builder,
        mem._transfer,
        mem.session("s1"),
        mem.runtime,
    ]
    seen: set[int] = set()

    def refs(obj: Any, depth: int) -> Any:
        if depth > 3 or id(obj) in seen or isinstance(obj, (str, int, float, bool, type(None))):
            return
        seen.add(id(obj))
        yield obj
        for v in vars(obj).values() if hasattr(obj, "__dict__") else []:
            yield from refs(v, depth + 1)

    for svc in services:
        assert all(o is not mem for o in refs(svc, 0)), type(svc).__name__
