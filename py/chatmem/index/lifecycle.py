"""The lifecycle of a tab's query index (``LiveIndex.state``), one value with its
transitions written down.

::

    UNOPENED ──> OPENING ──> DERIVING ────> READY <──> CATCHING_UP
                   │   └───> CATCHING_UP ─┘   │  └───> DERIVING (a rebuild)
                   └──> FAILED <──────────────┤       (a failure of either, or of the
                          └──> OPENING        │        fill of messages: FAILED)
                                              └──> OPENING (a takeover, a forced rebuild)
    any state ──> CLOSED ──> OPENING (a query after closing opens it again)

* ``UNOPENED``: no query yet. Writes need no note: the opening reads the store as it is then.
* ``OPENING``: the engine opens, the store's sessions are read, the tab claims its role;
  a write is noted and its session re-read before the first answer.
* ``DERIVING``: the index is derived from the store; writes are queued.
* ``CATCHING_UP``: the index catches up with the store (a cached file's opening) or with
  the queued writes; writes are queued.
* ``READY``: it answers queries; writes are queued until the next one. After a derivation
  that left the texts out, ``messages`` is filled meanwhile (``fill.py``); if that fails,
  the index goes to ``FAILED``.
* ``FAILED``: the last opening failed (its half-made index dropped); the next query
  opens again.
* ``CLOSED``: closed; nothing is kept (a later query opens the index again).

The index exists (``LiveIndex.index``) exactly in ``DERIVING``, ``CATCHING_UP`` and
``READY`` (``HOLDS_INDEX``).
"""

from __future__ import annotations

from enum import Enum

__all__ = ["HOLDS_INDEX", "TRANSITIONS", "IndexState", "check_transition"]


class IndexState(Enum):
    UNOPENED = "unopened"
    OPENING = "opening"
    DERIVING = "deriving"
    CATCHING_UP = "catching-up"
    READY = "ready"
    FAILED = "failed"
    CLOSED = "closed"


S = IndexState

#: the states each state may be followed by
TRANSITIONS: dict[IndexState, frozenset[IndexState]] = {
    S.UNOPENED: frozenset({S.OPENING, S.CLOSED}),
    S.OPENING: frozenset({S.DERIVING, S.CATCHING_UP, S.READY, S.FAILED, S.CLOSED}),
    S.DERIVING: frozenset({S.READY, S.FAILED, S.CLOSED}),
    S.CATCHING_UP: frozenset({S.READY, S.DERIVING, S.FAILED, S.CLOSED}),
    S.READY: frozenset({S.CATCHING_UP, S.DERIVING, S.OPENING, S.FAILED, S.CLOSED}),
    S.FAILED: frozenset({S.OPENING, S.CLOSED}),
    S.CLOSED: frozenset({S.OPENING, S.CLOSED}),
}

#: the states in which the tab holds an index (its own, or a guest's view of the owner's)
HOLDS_INDEX = frozenset({S.DERIVING, S.CATCHING_UP, S.READY})


def check_transition(old: IndexState, new: IndexState) -> None:
    """Raise ``RuntimeError`` for a move the lifecycle does not allow (a bug, not bad input)."""
    if new is not old and new not in TRANSITIONS[old]:
        raise RuntimeError(f"the query index cannot go from {old.value} to {new.value}")
