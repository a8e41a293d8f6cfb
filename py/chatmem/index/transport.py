"""What a runtime offers so that the tabs of a profile share one query index (see ``shared.py``)."""

from __future__ import annotations

from typing import Callable, Protocol

__all__ = ["ShareTransport"]


class ShareTransport(Protocol):
    """What a runtime offers to share one query index between tabs (``chatmem.index.shared``;
    the page: ``web/js/index-share.js``)."""

    async def claim(self, on_owner: Callable[[], None]) -> str:
        """``"owner"``, ``"guest"`` (``on_owner()`` is called when this tab's turn
        comes) or ``"solo"`` (no sharing here: every tab keeps its own index)."""
        ...

    async def request(self, rid: str, body: str) -> str:
        """Send a request to the owner (this tab included); its answer, after any takeover."""
        ...

    def forget(self, rid: str) -> None:
        """Stop waiting for ``rid`` (its ``request`` answers at once)."""
        ...

    def serve(self, handler: Callable[[str, str], None]) -> None:
        """As owner: pass every request, queued ones first, to ``handler(rid, body)``."""
        ...

    def answer(self, rid: str, body: str) -> None:
        """As owner: deliver the answer to ``rid`` to the tab that asked."""
        ...

    def stop(self) -> None:
        """Take no more requests (those taken are still answered)."""
        ...

    async def close(self) -> None:
        """Leave: stop waiting in line, or release ownership (the next tab takes over)."""
        ...
