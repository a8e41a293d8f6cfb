"""DOM access for the UI: the only app module that imports ``js`` / ``pyodide``.

Elements are built with ``h(tag, attrs, *children)``; strings become text
nodes (never HTML), so user content can never inject markup. Events are
delegated: one listener per event type on the app root dispatches to the
handler named by the nearest ``data-action`` (click / submit) or
``data-change`` (change) attribute.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import js  # type: ignore[import-not-found]
from pyodide.ffi import create_proxy, to_js  # type: ignore[import-not-found]

from .render import Node

__all__ = [
    "clear",
    "clear_timeout",
    "closest",
    "create_proxy",
    "download",
    "h",
    "js",
    "js_obj",
    "mount",
    "nil",
    "node",
    "on",
    "q",
    "set_timeout",
    "spawn",
    "svg",
    "svg_node",
    "text_of",
    "to_js",
]

SVG_NS = "http://www.w3.org/2000/svg"
_keep: list[Any] = []  # proxies that live as long as the page


try:
    from pyodide.ffi import jsnull
except ImportError:  # older Pyodide: null converts to None
    jsnull = None


def nil(x: Any) -> bool:
    """True for None and JS null."""
    return x is None or x is jsnull


def q(selector: str, root: Any = None) -> Any:
    """The first match, or None."""
    el = (root or js.document).querySelector(selector)
    return None if nil(el) else el


def closest(el: Any, selector: str) -> Any:
    """``el.closest(selector)``, or None (also for targets that are not elements)."""
    if nil(el) or not hasattr(el, "closest"):
        return None
    found = el.closest(selector)
    return None if nil(found) else found


def h(tag: str, attrs: dict[str, Any] | None = None, *children: Any) -> Any:
    """An element; ``attrs`` values: str/int set as attributes, True as an empty
    attribute, None/False skipped; ``class_`` and ``for_`` for reserved words."""
    el = js.document.createElement(tag)
    _attrs(el, attrs)
    append(el, *children)
    return el


def svg(tag: str, attrs: dict[str, Any] | None = None, *children: Any) -> Any:
    el = js.document.createElementNS(SVG_NS, tag)
    _attrs(el, attrs)
    append(el, *children)
    return el


def _attrs(el: Any, attrs: dict[str, Any] | None) -> None:
    for k, v in (attrs or {}).items():
        if v is None or v is False:
            continue
        name = k.rstrip("_").replace("_", "-")
        if name.startswith("on"):
            raise ValueError("event handler attributes are not allowed; use data-action")
        el.setAttribute(name, "" if v is True else str(v))


def append(el: Any, *children: Any) -> Any:
    for c in children:
        if c is None or c is False:
            continue
        if isinstance(c, (list, tuple)):
            append(el, *c)
        elif isinstance(c, (str, int, float)):
            el.appendChild(js.document.createTextNode(str(c)))
        else:
            el.appendChild(c)
    return el


def clear(el: Any) -> Any:
    while el.firstChild:
        el.removeChild(el.firstChild)
    return el


def mount(el: Any, *children: Any) -> Any:
    """Replace ``el``'s children."""
    return append(clear(el), *children)


def node(n: Node | str) -> Any:
    """A DOM node from a ``render`` tree (tag, attrs, children) or a text string."""
    if isinstance(n, str):
        return js.document.createTextNode(n)
    tag, attrs, children = n
    return h(tag, attrs, *[node(c) for c in children])


def text_of(el: Any) -> str:
    return str(el.textContent or "")


def spawn(
    coro: Awaitable[Any], on_error: Callable[[BaseException], None] | None = None
) -> asyncio.Future[Any]:
    """Run a coroutine in the page's event loop; errors go to ``on_error`` and the console."""
    fut = asyncio.ensure_future(coro)

    def done(f: asyncio.Future[Any]) -> None:
        if f.cancelled():
            return
        exc = f.exception()
        if exc is not None:
            js.console.error("".join(traceback.format_exception(exc)))
            if on_error:
                on_error(exc)

    fut.add_done_callback(done)
    return fut


def on(target: Any, event: str, fn: Callable[[Any], Any]) -> None:
    proxy = create_proxy(fn)
    _keep.append(proxy)
    target.addEventListener(event, proxy)


def set_timeout(fn: Callable[[], Any], ms: int) -> int:
    proxy = create_proxy(fn)
    _keep.append(proxy)
    return int(js.setTimeout(proxy, ms))


def clear_timeout(handle: int) -> None:
    js.clearTimeout(handle)


def js_obj(d: dict[str, Any]) -> Any:
    return to_js(d, dict_converter=js.Object.fromEntries)


def download(filename: str, text: str | list[str], mime: str = "application/json") -> None:
    """Offer ``text`` (or its chunks, in order) as a file download (a Blob URL on a temporary link)."""
    blob = js.Blob.new(to_js([text] if isinstance(text, str) else text), js_obj({"type": mime}))
    url = js.URL.createObjectURL(blob)
    a = h("a", {"href": url, "download": filename})
    js.document.body.appendChild(a)
    a.click()
    a.remove()
    set_timeout(lambda: js.URL.revokeObjectURL(url), 10_000)


def svg_node(n: Node | str) -> Any:
    """Like ``node`` but in the SVG namespace (for charts)."""
    if isinstance(n, str):
        return js.document.createTextNode(n)
    tag, attrs, children = n
    return svg(tag, attrs, *[svg_node(c) for c in children])
