"""Run the reference server: in-process for tests (uvicorn in a thread), or
from the command line (``python -m chatmem.server``).

::

    with running_server(api_keys=["k1"], db=":memory:") as srv:
        srv.url            # "http://127.0.0.1:<port>"
        srv.faults.fail(3) # the next three pushes answer 500
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import uvicorn

from ..records.ids import Clock, system_clock
from ..records.validation import DEFAULT_LIMITS, Limits
from .accounts import space_for_key
from .app import MAX_BODY_BYTES, create_app
from .backends import open_storage
from .faults import FaultPlan
from .quotas import Quotas
from .service import SyncService
from .storage import SyncStorage
from .stream import ChangeHub

__all__ = ["SyncServer", "running_server"]


class SyncServer:
    """A reference server bound to a socket, started and stopped from another thread."""

    def __init__(
        self,
        api_keys: Sequence[str],
        *,
        storage: SyncStorage | None = None,
        db: str = ":memory:",
        host: str = "127.0.0.1",
        port: int = 0,
        faults: FaultPlan | None = None,
        cors_origins: Sequence[str] = ("*",),
        clock: Clock = system_clock,
        log_level: str = "warning",
        quotas: Quotas | None = None,
        max_body: int = MAX_BODY_BYTES,
        heartbeat: float = 15.0,
        pool_size: int = 10,
        limits: Limits = DEFAULT_LIMITS,
        max_body_bytes: int | None = None,
    ):
        self.api_keys = list(api_keys)
        self.storage: SyncStorage = storage if storage is not None else open_storage(db, pool_size=pool_size)
        self.service = SyncService(self.storage, clock, limits=limits)
        self.faults = faults if faults is not None else FaultPlan()
        self.hub = ChangeHub()
        self.app = create_app(
            self.service,
            self.api_keys,
            faults=self.faults,
            cors_origins=cors_origins,
            quotas=quotas,
            max_body=max_body if max_body_bytes is None else max_body_bytes,
            heartbeat=heartbeat,
            hub=self.hub,
        )
        self.host = host
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.port: int = self._sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level=log_level,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=3,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def space(self, api_key: str) -> str:
        """The storage space of a key (to inspect what the server holds)."""
        return space_for_key(api_key)

    def start(self, timeout: float = 10.0) -> SyncServer:
        self.faults.stopping.clear()
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._sock]},
            daemon=True,
            name=f"chatmem-sync-server:{self.port}",
        )
        self._thread.start()
        waited = threading.Event()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the sync server failed to start")
            waited.wait(0.01)
            timeout -= 0.01
            if timeout <= 0:
                raise TimeoutError("the sync server did not start in time")
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (the command line)."""
        self._server.run(sockets=[self._sock])

    def stop(self) -> None:
        """Stop serving (held requests and open streams end early) and close the storage."""
        self.faults.stopping.set()
        self.hub.close()
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._sock.close()
        self.storage.close()


@contextmanager
def running_server(
    api_keys: Sequence[str] = ("test-key",),
    *,
    db: str = ":memory:",
    storage: SyncStorage | None = None,
    faults: FaultPlan | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    clock: Clock = system_clock,
    quotas: Quotas | None = None,
    heartbeat: float = 15.0,
) -> Iterator[SyncServer]:
    """A started ``SyncServer`` on 127.0.0.1 (port 0: a free port), stopped on exit.
    ``db`` may be a SQLite path, ``":memory:"`` or a ``postgresql://`` URL."""
    srv = SyncServer(
        api_keys,
        storage=storage,
        db=db,
        host=host,
        port=port,
        faults=faults,
        clock=clock,
        quotas=quotas,
        heartbeat=heartbeat,
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
