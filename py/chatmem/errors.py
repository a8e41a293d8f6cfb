"""Every error chatmem raises, under one root.

::

    ChatmemError
    ├── ValidationError            bad input; raised before anything is written
    │   ├── ImportFormatError      an import file is malformed; names the path to the bad field
    │   │   └── ImportLimitExceeded  ... because it passed a limit (also a LimitExceeded)
    │   ├── ContextOverflow        even the system prompt + newest user message exceed the budget
    │   ├── LimitExceeded          a configured bound was passed (size, nesting depth; ``limit`` names it)
    │   ├── ClockSkew              an HLC is further ahead of this clock than the skew bound allows
    │   └── ReadOnlySQLError       ``mem.sql`` was given something other than one read-only query
    ├── NotFound
    │   ├── SessionNotFound
    │   ├── MessageNotFound
    │   └── FactNotFound
    ├── StorageError               the store refused or failed a write or read
    │   ├── QuotaExceeded          (DOMException QuotaExceededError, SQLITE_FULL)
    │   │   ├── RateLimited        a sync server account spent its operations of this minute (429)
    │   │   └── StorageFull        a sync server account's stored-bytes quota is full (413)
    │   ├── DatabaseUnavailable    the sync server's database did not answer (503)
    │   ├── ConstraintViolation    (DOMException ConstraintError, sqlite IntegrityError)
    │   │   └── DuplicateId        a caller-chosen id that already exists
    │   ├── TransactionAborted     (DOMException AbortError, TransactionInactiveError)
    │   ├── VersionConflict        (DOMException VersionError: the database is newer)
    │   ├── UpgradeBlocked         another tab holds an old version open
    │   ├── DatabaseClosed         the connection was closed (e.g. by an upgrade in another tab)
    │   └── IndexLocked            the cached query-index file is held by another tab (OPFS)
    ├── SyncError                  a sync request did not succeed (messages never hold the api key)
    │   ├── SyncOffline            no network / server unreachable: wait, not counted as a retry
    │   ├── SyncTransientError     timeout, dropped connection, 5xx, 429, garbled answer: retry
    │   ├── SyncAuthError          401/403: pause sync until the key is fixed; dead-letter nothing
    │   ├── SyncPermanentError     400/404/409/413/422 and other 4xx: retrying will not help
    │   ├── WrongPassphrase        end-to-end encryption: the key does not match the space's
    │   │                          key check value (or none was entered): nothing sent or applied
    │   └── DecryptionError        an encrypted record failed authentication (tampered or
    │                              moved to another identity): nothing of its page applied
    ├── ProviderError              the chat model's server failed a request (never holds the key)
    │   ├── ProviderAuthError      401/403: check the api key
    │   ├── ProviderNotFound       404: wrong base URL or model name
    │   ├── ProviderRateLimited    429 (``retry_after_ms`` when the server said)
    │   ├── ProviderServerError    5xx, or the stream broke off mid-answer
    │   ├── ProviderTimeout        no (complete) answer in time
    │   └── ProviderUnavailable    no answer at all: offline, refused, DNS
    ├── TransportError             no HTTP response at all: refused, reset, DNS, offline
    │   └── TransportTimeout       no (complete) response within the timeout
    ├── QueryError                 the query index (DuckDB) refused or failed a statement
    │   └── QueryTimeout           ``mem.sql`` ran past its ``timeout``; the query was interrupted
    ├── EmbeddingError             an embedder failed for good (HTTP status, wrong dimension)
    ├── EncryptionConflict         (reference server) a request does not fit the space's
    │                              encryption state: answered 409 with its ``code``
    └── UnsupportedEnvironment     an API that needs a browser (or CPython) was called elsewhere

Foreign errors are translated in one place each (``translate_dom_error`` here,
``stores.sqlite`` for sqlite3, ``index.sql_engine`` for duckdb, ``sync.protocol`` for the
sync server's HTTP statuses, ``providers`` for the model server's), always with the
original kept as ``__cause__``.
"""

from __future__ import annotations

__all__ = [
    "ChatmemError",
    "ValidationError",
    "ImportFormatError",
    "ImportLimitExceeded",
    "ContextOverflow",
    "LimitExceeded",
    "ClockSkew",
    "ReadOnlySQLError",
    "NotFound",
    "SessionNotFound",
    "MessageNotFound",
    "FactNotFound",
    "StorageError",
    "QuotaExceeded",
    "RateLimited",
    "StorageFull",
    "DatabaseUnavailable",
    "ConstraintViolation",
    "DuplicateId",
    "TransactionAborted",
    "VersionConflict",
    "UpgradeBlocked",
    "DatabaseClosed",
    "IndexLocked",
    "TransportError",
    "TransportTimeout",
    "SyncError",
    "SyncOffline",
    "SyncTransientError",
    "SyncAuthError",
    "SyncPermanentError",
    "WrongPassphrase",
    "DecryptionError",
    "QueryError",
    "QueryTimeout",
    "EmbeddingError",
    "UnsupportedEnvironment",
    "EncryptionConflict",
    "ProviderError",
    "ProviderAuthError",
    "ProviderNotFound",
    "ProviderRateLimited",
    "ProviderServerError",
    "ProviderTimeout",
    "ProviderUnavailable",
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


class ImportFormatError(ValidationError):
    """An import file (JSON text, export or foreign format) cannot be imported.

    ``path`` locates the problem in the input, e.g.
    ``sessions[3].messages[17].role``; ``session_index`` / ``message_index``
    are set when the problem is inside one session / message. ``field`` is the
    last path component when it names a field.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        field: str | None = None,
        session_index: int | None = None,
        message_index: int | None = None,
    ):
        super().__init__(f"{path}: {message}" if path else message, field=field, index=message_index)
        self.path = path
        self.session_index = session_index
        self.message_index = message_index


class ContextOverflow(ValidationError):
    """The token budget cannot hold even the mandatory part of a window (the
    system prompt and the newest user message). ``needed`` and ``budget`` are
    token counts; ``budget`` is ``max_tokens - reserve_tokens``."""

    def __init__(self, needed: int, budget: int):
        super().__init__(
            f"the system prompt and the newest message need {needed} tokens, but the budget is"
            f" {budget} (the model's context less the room kept for its answer)",
            field="max_tokens",
        )
        self.needed = needed
        self.budget = budget


class LimitExceeded(ValidationError):
    """A configured bound (``chatmem.records.validation.Limits``) was passed: nothing was written.

    ``limit`` is the name of the ``Limits`` field (e.g. ``"max_message_bytes"``,
    ``"max_depth"``), ``maximum`` its value.
    """

    def __init__(
        self,
        message: str,
        *,
        limit: str = "",
        maximum: int = 0,
        field: str | None = None,
        index: int | None = None,
    ):
        super().__init__(message, field=field, index=index)
        self.limit = limit
        self.maximum = maximum


class ImportLimitExceeded(ImportFormatError, LimitExceeded):
    """An import passed a ``Limits`` bound (its size, a record's size or nesting)."""

    def __init__(
        self,
        message: str,
        *,
        limit: str,
        maximum: int,
        path: str | None = None,
        field: str | None = None,
        session_index: int | None = None,
        message_index: int | None = None,
    ):
        super().__init__(
            message, path=path, field=field, session_index=session_index, message_index=message_index
        )
        self.limit = limit
        self.maximum = maximum


class ClockSkew(ValidationError):
    """A hybrid logical clock value lies further ahead of the local clock than
    ``Limits.max_clock_skew_ms`` allows; nothing (not even the clock) changed."""

    def __init__(self, message: str, *, ahead_ms: int, bound_ms: int):
        super().__init__(message, field="hlc")
        self.ahead_ms = ahead_ms
        self.bound_ms = bound_ms


class ReadOnlySQLError(ValidationError):
    """``mem.sql`` accepts one read-only statement (SELECT, WITH ... SELECT, ...); this was not one."""


def shown(value: object, width: int = 60) -> str:
    """``value`` as an error message shows it: its ``repr`` when that is short and safe,
    else a description. Never recursive and never failing, whatever the caller passed: a
    list nested 5,000 deep, a cycle or an integer of 5,000 digits (whose ``repr`` raises
    ``RecursionError`` or ``ValueError``) are described, not printed."""
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        if -(10**18) < value < 10**18:
            return repr(value)
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, str):
        text = repr(value[:width])
        return text if len(value) <= width else f"{text} (cut at {width} of {len(value)} characters)"
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__name__}"


class NotFound(ChatmemError, LookupError):
    """A session, message or fact with the given id does not exist."""


class SessionNotFound(NotFound):
    """No session has this id (``session_id``)."""

    def __init__(self, session_id: str):
        super().__init__(f"session not found: {shown(session_id)}")
        self.session_id = session_id


class MessageNotFound(NotFound):
    """No message has this id (``message_id``)."""

    def __init__(self, message_id: str):
        super().__init__(f"message not found: {shown(message_id)}")
        self.message_id = message_id


class FactNotFound(NotFound):
    """No fact has this id (``fact_id``)."""

    def __init__(self, fact_id: str):
        super().__init__(f"fact not found: {shown(fact_id)}")
        self.fact_id = fact_id


class StorageError(ChatmemError):
    """The durable store failed. Nothing of the failed call was written."""

    #: the browser's DOMException name (or the sqlite error class) it came from
    dom_name: str | None = None


class QuotaExceeded(StorageError):
    """The browser (or disk) has no room left for this origin."""


class RateLimited(QuotaExceeded):
    """A sync server account pushed its operations of this minute (HTTP 429);
    ``retry_after`` is the number of seconds to the next minute."""

    def __init__(self, message: str, retry_after: int = 1):
        super().__init__(message)
        self.retry_after = retry_after


class StorageFull(QuotaExceeded):
    """A push would take a sync server account over its stored-bytes quota (HTTP 413)."""


class DatabaseUnavailable(StorageError):
    """The sync server's database failed or did not answer (HTTP 503: retry later)."""


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


class IndexLocked(StorageError):
    """The cached index file is held by another tab (OPFS files are one-writer)."""


class EncryptionConflict(ChatmemError):
    """The reference server: a request does not fit the space's end-to-end encryption
    state (plain content in an encrypted space, a stale key, a change in progress).
    Answered ``409 {"error", "code"}``; ``code`` is e.g. ``e2e-required``."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class TransportError(ChatmemError):
    """No HTTP response: connection refused or reset, DNS failure, offline.

    Any HTTP status is a response, not an error; the sync client and the chat
    provider turn a ``TransportError`` into ``SyncOffline`` / ``ProviderUnavailable``.
    """


class TransportTimeout(TransportError):
    """No (complete) response within the timeout."""


class SyncError(ChatmemError):
    """A sync request did not succeed.

    ``status`` is the HTTP status (None when there was no response),
    ``response`` an excerpt of the answer's body (for the dead letter),
    ``retry_after_ms`` the wait the server asked for (429/503 ``Retry-After``).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        response: str | None = None,
        retry_after_ms: int | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.response = response
        self.retry_after_ms = retry_after_ms


class SyncOffline(SyncError):
    """No network, or the server could not be reached at all: wait; not a failed attempt."""


class SyncTransientError(SyncError):
    """Timeout, dropped connection, 5xx, 429, or an unreadable answer: retry with backoff."""


class SyncAuthError(SyncError):
    """The server refused the api key (401/403): pause sync until the config changes."""


class SyncPermanentError(SyncError):
    """The server refused the request itself (400/404/409/413/422, other 4xx)."""


class WrongPassphrase(SyncError):
    """The passphrase (or key) does not open this sync space's data.

    Raised before anything is pushed or applied: the derived key does not
    match the key check value the server keeps, no passphrase was entered on
    this device, or the passphrase was changed on another device. The outbox
    is untouched; ``mem.sync.status()`` reports ``wrong-passphrase`` or
    ``locked``.
    """


class DecryptionError(SyncError):
    """An encrypted record did not authenticate: its ciphertext, nonce or bound
    identity (op_id, resource, id, hlc, field) was altered. Nothing of the page
    that held it is applied and the pull cursor does not move."""


class ProviderError(ChatmemError):
    """A chat-model request failed. ``status`` is the HTTP status when there was one;
    ``partial`` the stored message holding what arrived before a stream broke, if any."""

    def __init__(self, message: str, *, status: int | None = None, retry_after_ms: int | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after_ms = retry_after_ms
        self.partial: object | None = None


class ProviderAuthError(ProviderError):
    """401/403 from the model server: the api key is missing or wrong."""


class ProviderNotFound(ProviderError):
    """404 from the model server: wrong base URL or unknown model."""


class ProviderRateLimited(ProviderError):
    """429 from the model server."""


class ProviderServerError(ProviderError):
    """5xx from the model server, or a stream that broke off before it finished."""


class ProviderTimeout(ProviderError):
    """The model server did not answer (or finish answering) in time."""


class ProviderUnavailable(ProviderError):
    """No answer at all: offline, connection refused, unknown host."""


class QueryError(ChatmemError):
    """The query index refused or failed a statement (bad SQL, unknown table or column).

    The engine's own exception is kept as ``__cause__``. The index is a derived
    copy of the store: nothing durable is lost when it fails.
    """


class QueryTimeout(QueryError):
    """A query ran longer than its ``timeout`` and was interrupted; the index is free again."""


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
