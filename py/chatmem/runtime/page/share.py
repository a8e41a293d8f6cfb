"""One query index for all tabs of the page's origin: ``web/js/index-share.js`` (a Web
Lock names the owner; requests and answers travel on a BroadcastChannel) as the
``chatmem.index.shared.ShareTransport`` of ``LiveIndex``."""

from __future__ import annotations

import json
from typing import Any, Callable

from pyodide.ffi import create_proxy  # type: ignore[import-not-found]

from .bridge import bridge

__all__ = ["PageShareTransport"]


class PageShareTransport:
    """The sharing point of the index cached at ``path``; ``owned`` holds the paths whose
    Web Lock this page holds (their engine opens the file without taking the lock again)."""

    def __init__(self, path: str, owned: set[str]):
        self.path = path
        self._owned = owned
        self._js = bridge().indexShare(path)
        self._proxies: list[Any] = []

    def _proxy(self, fn: Callable[..., Any]) -> Any:
        proxy = create_proxy(fn)
        self._proxies.append(proxy)
        return proxy

    async def claim(self, on_owner: Callable[[], None]) -> str:
        def granted() -> None:
            self._owned.add(self.path)
            on_owner()

        role = str(await self._js.claim(self._proxy(granted)))
        if role == "owner":
            self._owned.add(self.path)
        return role

    async def request(self, rid: str, body: str) -> str:
        return str(await self._js.request(rid, body))

    def forget(self, rid: str) -> None:
        self._js.forget(rid)

    def serve(self, handler: Callable[[str, str], None]) -> None:
        self._js.serve(self._proxy(lambda rid, body: handler(str(rid), str(body))))

    def answer(self, rid: str, body: str) -> None:
        self._js.answer(rid, body)

    def stop(self) -> None:
        self._js.stop()

    async def close(self) -> None:
        # before the release: the next owner may be another memory of this page
        self._owned.discard(self.path)
        await self._js.close()
        for p in self._proxies:
            p.destroy()
        self._proxies.clear()

    def info(self) -> dict[str, Any]:
        """This tab's role, id and requests in flight (for status displays and tests)."""
        return json.loads(str(self._js.info()))  # type: ignore[no-any-return]
