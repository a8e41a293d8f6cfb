"""Where chatmem runs, decided in one place.

``default_runtime()`` is the only platform check in chatmem: in Pyodide it
gives ``page.PageRuntime`` (IndexedDB, DuckDB-Wasm, ``fetch``, Web Locks, the
``online`` event, the bundled BPE counter), elsewhere ``CPythonRuntime``
(memory or SQLite, the ``duckdb`` package, ``urllib``). ``chatmem.open()``
calls it once unless given ``runtime=``. ``runtime.page`` is the only module
that imports ``js`` or ``pyodide``, and is imported only in a page.
"""

from __future__ import annotations

import sys

from ..http import Transport
from ..sync.lock import DrainLock, LocalDrainLock
from .base import Random, Runtime, Sleep
from .cpython import CPythonRuntime, UrllibTransport

__all__ = [
    "IN_BROWSER",
    "Runtime",
    "CPythonRuntime",
    "DrainLock",
    "LocalDrainLock",
    "UrllibTransport",
    "Sleep",
    "Random",
    "default_runtime",
    "default_transport",
]

#: True when running in Pyodide (a browser page or worker)
IN_BROWSER = sys.platform == "emscripten"


def default_runtime() -> Runtime:
    """A fresh runtime for this platform: the page's in Pyodide, CPython's elsewhere."""
    if IN_BROWSER:
        from .page import PageRuntime

        return PageRuntime()
    return CPythonRuntime()


def default_transport() -> Transport:
    """The HTTP transport of this platform (for objects made outside ``open()``, e.g. a provider)."""
    return default_runtime().transport
