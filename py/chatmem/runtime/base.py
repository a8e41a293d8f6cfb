"""``Runtime``: everything chatmem needs from the place it runs, in one object.

A runtime opens the durable store, gives the HTTP transport, opens the query
engine (DuckDB), hands out the sync drain lock and the online status,
estimates and protects storage, counts BPE tokens, and holds the clock, the
sleep and the random source. ``chatmem.open()`` picks one (the page's in
Pyodide, CPython's elsewhere) unless ``runtime=`` is given; ``Memory`` builds
every service from it through their constructors. A test passes its own
runtime (e.g. ``CPythonRuntime(clock=fake.clock, sleep=fake.sleep, rand=...)``)
instead of patching a live object.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..errors import UnsupportedEnvironment
from ..records.ids import Clock, system_clock

if TYPE_CHECKING:
    from ..embedding.static import StaticEmbedder, TokenSums
    from ..http import Transport
    from ..index.sql_engine import EngineDerivation, SQLEngine
    from ..index.transport import ShareTransport
    from ..stores.base import Store
    from ..sync.encryption import CipherSuite
    from ..sync.lock import DrainLock

__all__ = ["Runtime", "Sleep", "Random"]

#: ``await sleep(seconds)``, like ``asyncio.sleep``
Sleep = Callable[[float], Awaitable[None]]
#: a float in [0, 1), like ``random.random``
Random = Callable[[], float]


class Runtime:
    """The base of both runtimes: the injectable clock, sleep, random and transport.

    Subclasses provide the store opener, the query engine, the drain lock,
    the online status, storage and the token counter.
    """

    #: "cpython" or "page"
    kind = "abstract"

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
        rand: Random | None = None,
        transport: Transport | None = None,
    ):
        self.clock: Clock = clock or system_clock
        self.sleep: Sleep = sleep or asyncio.sleep
        self.rand: Random = rand or random.random
        self._transport = transport

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    # ------------------------------------------------------------------ HTTP
    @property
    def transport(self) -> Transport:
        """The HTTP transport (``fetch`` in a page, ``urllib`` on CPython), built on first use."""
        if self._transport is None:
            self._transport = self._default_transport()
        return self._transport

    def _default_transport(self) -> Transport:
        raise UnsupportedEnvironment(f"{self.kind} runtime has no HTTP transport")

    # ------------------------------------------------------------------ stores and the index
    async def open_store(self, name: str, *, persist: str | None, durability: str) -> Store:
        """The durable store this runtime offers for ``name`` (created and migrated as needed)."""
        raise UnsupportedEnvironment(f"{self.kind} runtime opens no store")

    async def open_indexeddb(self, name: str, *, durability: str) -> Store:
        """The IndexedDB database ``name``; only a page has IndexedDB."""
        raise UnsupportedEnvironment("IndexedDB needs Pyodide in a browser; use persist= on CPython")

    def index_cache(self, store: Store) -> str | None:
        """Where the query index of ``store`` is cached between runs (None: not cached)."""
        return None

    async def open_query_engine(self, cache: str | None = None) -> SQLEngine:
        """A SQL engine for the query index (on the file ``cache`` when given and free)."""
        raise UnsupportedEnvironment(f"{self.kind} runtime has no query engine")

    async def early_derivation(
        self, store: Store, cache: str | None, session_counts: list[tuple[str, int]]
    ) -> EngineDerivation | None:
        """A derivation of the index from ``store`` to begin while the engine opens (its
        loads wait for ``attach``), when there is surely nothing cached to open instead (no
        file ``cache``); None where there is none."""
        return None

    def index_share(self, cache: str) -> ShareTransport | None:
        """How the tabs of this profile share the index cached at ``cache`` (None: not shared,
        every process keeps its own). See ``chatmem.index.shared``."""
        return None

    # ------------------------------------------------------------------ sync
    def drain_lock(self, name: str) -> DrainLock:
        """The lock that lets one drainer at a time push the outbox of the store ``name``."""
        raise UnsupportedEnvironment(f"{self.kind} runtime has no drain lock")

    #: ``online()`` says whether the network is up; None when the runtime cannot tell
    online: Callable[[], bool] | None = None

    def on_online(self, fn: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``fn()`` when the network comes back; returns a function that stops it (None: no such event)."""
        return None

    # ------------------------------------------------------------------ storage
    async def storage_estimate(self, store: Store) -> dict[str, Any]:
        """``{"usage", "quota", "persisted"}`` in bytes (None where unknown)."""
        return {"usage": None, "quota": None, "persisted": False}

    async def request_persistence(self, store: Store) -> bool:
        """Ask to keep this data ("keep my data"). True when it is kept."""
        return False

    # ------------------------------------------------------------------ tokens
    async def token_counter(self, encoding: str) -> Callable[[str], int]:
        """A synchronous ``count(text)`` for an OpenAI BPE encoding."""
        raise UnsupportedEnvironment("the bundled BPE counter runs in the browser; pass count= on CPython")

    # ------------------------------------------------------------------ embedding model, encryption
    def model_loader(self) -> Callable[[], Awaitable[bytes]] | None:
        """How to get the shipped embedding model's bytes here (None: read its file)."""
        return None

    def token_sums(self, model: StaticEmbedder) -> TokenSums | None:
        """A faster way to ``model``'s sums here (the page's, in JS); None: its own Python."""
        return None

    def cipher_suite(self) -> CipherSuite:
        """AES-GCM and PBKDF2 for end-to-end encrypted sync."""
        raise UnsupportedEnvironment(f"{self.kind} runtime has no cipher suite")
