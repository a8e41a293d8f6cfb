"""Which chatmem capabilities this build has.

Every capability that lands in parallel is checked here and nowhere else, so
that once it is merged its check (and its fallback in the UI) can be removed:

- ``search``        ``mem.search`` (ranked search)      — fallback: substring scan over ``mem.messages``
- ``sql``           ``mem.sql`` (query index)           — fallback: counts computed from ``mem.messages``
- ``build_context`` ``mem.build_context`` (window)      — fallback: ``chatmem.window.fit_window`` preview
- ``live_context``  ``mem.context`` (providers)         — fallback: "no context providers" note
- ``retention``     ``mem.retention`` (apply policies)  — fallback: ``chatmem.retention.plan_retention``
- ``sync``          ``mem.sync`` (outbox client)        — fallback: outbox counts from the store, sync off
- ``export`` / ``import_sessions`` (transfer)           — fallback: buttons disabled with a note
- ``storage_estimate`` on ``mem``                       — fallback: ``chatmem._browser.storage_estimate``
"""

from __future__ import annotations

from typing import Any

__all__ = ["available", "CAPABILITIES"]

CAPABILITIES = ("search", "sql", "build_context", "context", "retention", "sync", "export",
                "import_sessions", "storage_estimate")


def available(mem: Any) -> dict[str, bool]:
    """Capability name -> present on this ``Memory``."""
    return {name: hasattr(mem, name) for name in CAPABILITIES}
