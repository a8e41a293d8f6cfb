"""What starts after the first paint, with its progress in the sidebar's status line
(``#work-status``): the search index (DuckDB-Wasm, then the index opened from its
saved copy and caught up with the store, or derived from the store), then the
embeddings of every stored message for semantic and hybrid search
(``mem.embed_in_background``: the shipped model is downloaded now, never before
the interface is up, and embedded in batches that yield to the page; a reload
resumes where the last saved batch ended).

The status line's ``data-state`` is ``index`` | ``embedding`` | ``ready`` |
``failed``; while embedding, ``data-done`` / ``data-total`` count messages.
"""

from __future__ import annotations

import asyncio
from typing import Any

import chatmem

from .dom import q

__all__ = ["POLL_S", "run"]

#: seconds between two readings of the embedding progress
POLL_S = 0.25


class Status:
    """The sidebar's status line: a sentence and, while there is one, a progress bar."""

    def __init__(self) -> None:
        self.el = q("#work-status")

    @property
    def state(self) -> str | None:
        """What the line says now: "index", "embedding", "ready", "failed" (None: not shown)."""
        return str(self.el.dataset.state) if self.el is not None and self.el.dataset.state else None

    def show(self, state: str, text: str, done: int | None = None, total: int | None = None) -> None:
        el = self.el
        if el is None:
            return
        el.dataset.state = state
        el.removeAttribute("hidden")
        el.setAttribute("aria-busy", "true" if state in ("index", "embedding") else "false")
        q(".text", el).textContent = text
        bar = q("progress", el)
        if total:
            el.dataset.done, el.dataset.total = str(done or 0), str(total)
            bar.max, bar.value = total, done or 0
            bar.removeAttribute("hidden")
        else:
            bar.removeAttribute("value")  # indeterminate while the amount is not known
            if state in ("ready", "failed"):
                bar.setAttribute("hidden", "")


async def run(app: Any, step: Any) -> None:
    """The index, then the embeddings; each step's outcome shown, a failure said and kept local."""
    status = Status()
    box = q("#search-input")
    box.setAttribute("placeholder", "Search all conversations (loading the index…)")
    status.show("index", "Loading the search index…")
    try:
        await app.mem.index.ready()
    except Exception as e:  # noqa: BLE001 - the next query tries again; say why now
        step("index", "failed", str(e))
        status.show("failed", "The search index did not start; searching will try again.")
        app.toast(f"The search index did not start ({e}); searching will try again.", error=True)
        return
    finally:
        box.setAttribute("placeholder", "Search all conversations")
    step("index", "done")
    if app.mem.index.notice:  # rebuilt from the messages, or kept in memory only
        app.toast(app.mem.index.notice)
    status.show("ready", _index_sentence(app.mem.index.last_open))
    await embed(app, status)


def _index_sentence(opened: dict[str, Any]) -> str:
    if opened.get("mode") == "rebuilt":
        return f"Search index built from {_n(opened.get('sessions', 0), 'conversation')}."
    fresh = int(opened.get("refreshed", 0)) + int(opened.get("dropped", 0))
    return (
        f"Search index ready ({_n(fresh, 'conversation')} brought up to date)."
        if fresh
        else "Search index ready."
    )


def _n(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


async def embed(app: Any, status: Status, *, quiet: bool = False) -> None:
    """Embed what lacks a vector with the shipped model (offline, free); a remote embedder
    (which costs calls) embeds only what a semantic query needs. ``quiet``: say nothing
    until there is progress to show (a recount after writes, usually two counts)."""
    if not isinstance(app.mem.index.embedder, chatmem.LocalEmbedder):
        return
    running = app.mem.embedding_task  # one embedding at a time: follow the one under way
    task = running if running is not None and not running.done() else app.mem.embed_in_background()
    if not quiet:
        status.show("embedding", "Preparing semantic search…")
    while not task.done():
        done, total = app.mem.index.embed_progress
        if total and done < total:
            status.show(
                "embedding", f"Preparing semantic search: {done:,} of {total:,} messages", done, total
            )
        await asyncio.wait([task], timeout=POLL_S)
    try:
        task.result()
    except Exception as e:  # noqa: BLE001 - keyword search works on; semantic search retries
        status.show("failed", f"Semantic search is not ready: {e}")
        app.toast(f"Could not prepare semantic search ({e}); it is tried again when needed.", error=True)
        return
    done, total = app.mem.index.embed_progress
    status.show(
        "ready", f"Search index ready; semantic search ready for {_n(total, 'message')}.", done, total
    )
