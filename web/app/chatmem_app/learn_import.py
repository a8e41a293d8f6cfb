"""Learning from an import: after a chat export is imported, the offer to learn about the
person from it, then a progress bar while ``mem.facts.extract`` reads the imported
conversations one by one in the background, and Cancel.

What was read before Cancel stays learnt (each conversation's watermark moves as it is
read), so learning again later goes on where it stopped. The state lives on the app
(``app.learning``), so the Your data panel shows it again when it is reopened.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from chatmem.errors import SessionNotFound

from . import dom
from .dom import h, q

__all__ = ["ACTIONS", "Learning", "offer", "view"]

State = Literal["offered", "running", "done", "cancelled", "failed"]


@dataclass
class Learning:
    """One import's learning: which conversations, how far, what was learnt."""

    session_ids: list[str]
    state: State = "offered"
    #: conversations read so far
    read: int = 0
    #: facts learnt (added, or waiting for approval) so far
    learnt: int = 0
    error: str = ""
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def total(self) -> int:
        return len(self.session_ids)


def offer(app: Any, report: Any) -> Any:
    """After an import that brought conversations: offer to learn from them (replacing an
    earlier offer that was not taken; one that runs goes on)."""
    ids = list(report.session_ids)
    if not ids or (app.learning is not None and app.learning.state == "running"):
        return view(app)
    app.learning = Learning(ids)
    return view(app)


def view(app: Any) -> Any:
    """The offer, the progress bar or the outcome (None when there is nothing to show)."""
    st: Learning | None = app.learning
    if st is None:
        return None
    n = st.total
    what = f"{n} conversation{'s' if n != 1 else ''}"
    if st.state == "offered":
        body = [
            h(
                "p",
                {},
                f"I can learn about you from the {what} you imported: your name, where you live, what you like.",
            ),
            h(
                "button",
                {"type": "button", "class": "btn small primary", "data-action": "learn-import"},
                "Learn about me from them",
            ),
        ]
    elif st.state == "running":
        body = [
            h("label", {"for": "learn-progress"}, f"Learning from {what}…"),
            h("progress", {"id": "learn-progress", "max": str(max(n, 1)), "value": str(st.read)}),
            h("p", {"class": "note", "id": "learn-count"}, _count(st)),
            h(
                "button",
                {"type": "button", "class": "btn small ghost", "data-action": "learn-import-cancel"},
                "Cancel",
            ),
        ]
    else:
        said = {
            "done": f"Read {what}. {_learnt(st)}",
            "cancelled": f"Stopped after {st.read} of {what}. {_learnt(st)} What was read stays learnt.",
            "failed": f"Stopped after {st.read} of {what}: {st.error}",
        }[st.state]
        body = [
            h("p", {"class": "status-err" if st.state == "failed" else ""}, said),
            h(
                "button",
                {"type": "button", "class": "btn small", "data-action": "panel", "data-panel": "memory"},
                "See what I know about you",
            ),
        ]
    return h("div", {"class": "learn-import", "id": "learn-import", "role": "status"}, body)


def _count(st: Learning) -> str:
    return f"{st.read} of {st.total} read · {_learnt(st)}"


def _learnt(st: Learning) -> str:
    return f"{st.learnt} thing{'s' if st.learnt != 1 else ''} learnt."


def _show(app: Any) -> None:
    """Draw the learning's state where it is shown (if the panel is open)."""
    el, new = q("#learn-import"), view(app)
    if el is not None and new is not None:
        el.replaceWith(new)


async def _run(app: Any, st: Learning) -> None:
    try:
        for sid in st.session_ids:
            try:
                report = await app.mem.facts.extract(sid)
            except SessionNotFound:  # deleted since the import: nothing to read
                report = None
            if report is not None:
                st.learnt += report.added + report.pending
                if report.errors:
                    raise report.errors[0]
            st.read += 1
            bar, count = q("#learn-progress"), q("#learn-count")
            if bar is not None:
                bar.value = st.read
            if count is not None:
                dom.mount(count, _count(st))
        st.state = "done"
    except asyncio.CancelledError:
        st.state = "cancelled"
    except Exception as e:  # noqa: BLE001 - shown in place, never lost in a toast
        st.state, st.error = "failed", str(e)
    _show(app)


async def _start(app: Any, el: Any, ev: Any) -> None:
    st: Learning | None = app.learning
    if st is None or st.state != "offered":
        return
    st.state = "running"
    _show(app)
    st.task = asyncio.ensure_future(_run(app, st))


async def _cancel(app: Any, el: Any, ev: Any) -> None:
    st: Learning | None = app.learning
    if st is not None and st.task is not None and not st.task.done():
        st.task.cancel()


ACTIONS = {"learn-import": _start, "learn-import-cancel": _cancel}
