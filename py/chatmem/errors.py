"""Every error chatmem raises, under one root.

::

    ChatmemError
    ├── ValidationError            bad input; raised before anything is written
    │   └── ReadOnlySQLError       ``mem.sql`` was given something other than one read-only query
    ├── NotFound
    │   ├── SessionNotFound
    │   └── MessageNotFound
    ├── StorageError               the store refused or failed a write or read
    │   ├── QuotaExceeded          (DOMException QuotaExceededError, SQLITE_FULL)
    │   ├── ConstraintViolation    (DOMException ConstraintError, sqlite IntegrityError)
    │   │   └── DuplicateId        a caller-chosen id that already exists
    │   ├── TransactionAborted     (DOMException AbortError, TransactionInactiveError)
    │   ├── VersionConflict        (DOMException VersionError: the database is newer)
    │   ├── UpgradeBlocked         another tab holds an old version open
    │   └── DatabaseClosed         the connection was closed (e.g. by an upgrade in another tab)
    ├── QueryError                 the query index (DuckDB) refused or failed a statement
    ├── EmbeddingError             an embedder failed for good (HTTP status, wrong dimension)
    └── UnsupportedEnvironment     an API that needs a browser (or CPython) was called elsewhere

Foreign errors are translated in one place each (``translate_dom_error`` here,
``stores.sqlite`` for sqlite3, ``index.engine`` for duckdb), always with the original kept as ``__cause__``.
"""

from __future__ import annotations

__all__ = [
    "ChatmemError",
    "ValidationError",
    "ReadOnlySQLError",
    "NotFound",
    "SessionNotFound",
    "MessageNotFound",
    "StorageError",
    "QuotaExceeded",
    "ConstraintViolation",
    "DuplicateId",
    "TransactionAborted",
    "VersionConflict",
    "UpgradeBlocked",
    "DatabaseClosed",
    "QueryError",
    "EmbeddingError",
    "UnsupportedEnvironment",
    "translate_dom_error",
]


class ChatmemError(Exception):
    """Root of every error raised by chatmem."""


class ValidationError(ChatmemError, ValueError):
    """Input is malformed: bad role, bad content, unknown field, wrong type.

    ``field`` names the offending field when there is one; ``index`` is the
    position of the item in a batch when the error is about one item of it.
    """

    def __init__(self, message: str, *, field: str | None = None, index: int | None = None):
        super().__init__(message)
        self.field = field
        self.index = index


class ReadOnlySQLError(ValidationError):
    """``mem.sql`` accepts one read-only statement (SELECT, WITH ... SELECT, ...); this was not one."""


class NotFound(ChatmemError, LookupError):
    """A session or message with the given id does not exist."""


class SessionNotFound(NotFound):
    def __init__(self, session_id: str):
        super().__init__(f"session not found: {session_id!r}")
        self.session_id = session_id


class MessageNotFound(NotFound):
    def __init__(self, message_id: str):
        super().__init__(f"message not found: {message_id!r}")
        self.message_id = message_id


class StorageError(ChatmemError):
    """The durable store failed. Nothing of the failed call was written."""

    #: the browser's DOMException name (or the sqlite error class) it came from
    dom_name: str | None = None


class QuotaExceeded(StorageError):
    """The browser (or disk) has no room left for this origin."""


class ConstraintViolation(StorageError):
    """A uniqueness or key constraint of the store was violated."""


class DuplicateId(ConstraintViolation):
    """A caller-chosen id already exists."""


class TransactionAborted(StorageError):
    """The transaction was aborted before it completed; nothing was written."""


class VersionConflict(StorageError):
    """The stored database has a newer schema than this code knows."""


class UpgradeBlocked(StorageError):
    """A schema upgrade waits for another tab that holds an older version open."""


class DatabaseClosed(StorageError):
    """The connection is closed (by ``close()``, or by an upgrade in another tab: reload)."""


class QueryError(ChatmemError):
    """The query index refused or failed a statement (bad SQL, unknown table or column).

    The engine's own exception is kept as ``__cause__``. The index is a derived
    copy of the store: nothing durable is lost when it fails.
    """


class EmbeddingError(ChatmemError):
    """An embedder failed for good: an HTTP error after retries, a malformed
    answer, or vectors of the wrong dimension. ``status`` is the last HTTP status."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


class UnsupportedEnvironment(ChatmemError, RuntimeError):
    """The call needs another runtime (a browser, or CPython)."""


_DOM_ERRORS: dict[str, type[StorageError]] = {
    "QuotaExceededError": QuotaExceeded,
    "ConstraintError": ConstraintViolation,
    "DuplicateId": DuplicateId,
    "AbortError": TransactionAborted,
    "TransactionInactiveError": TransactionAborted,
    "VersionError": VersionConflict,
    "UpgradeBlocked": UpgradeBlocked,
    "InvalidStateError": DatabaseClosed,
    "DatabaseClosed": DatabaseClosed,
    "NotFoundError": StorageError,
    "DataError": StorageError,
    "UnknownError": StorageError,
}


def translate_dom_error(name: str, message: str) -> StorageError:
    """Map a DOMException name from the IndexedDB bridge to a typed error.

    Names the bridge invents for its own checks (``DuplicateId``,
    ``UpgradeBlocked``, ``DatabaseClosed``) are mapped the same way.
    """
    cls = _DOM_ERRORS.get(name, StorageError)
    err = cls(f"{name}: {message}" if message else name)
    err.dom_name = name
    return err
