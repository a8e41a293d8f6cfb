"""Active context: live state that modules push and that is injected before
each model call (the original's "Active Context" and "Context Injection").

A ``LiveContext`` holds ``ContextMessage``s keyed by ``source_type``
(``"module:discord"``, ``"module:datetime"``). Nothing here is durable: the
live context is process memory, rebuilt by the providers before each turn.

* ``replace-self``: the message replaces every entry held for its source type.
* ``append-self``: the message is appended to the entries of its source type
  (after a ``replace-self`` entry too); at most ``append_cap`` are kept per
  source type (the oldest go first).

``snapshot()`` is the original's ``getContextsSnapshot()``: a dict keyed by
source type whose value is the content dict when the last update of that
source was ``replace-self``, or the list of contents (oldest first) when it was
``append-self``. Expired entries are dropped; keys are ordered by priority
(highest first; the priority of a source is the highest of its live entries),
then by the order in which the sources first appeared.

``render_context_message(snapshot)`` builds the injected message exactly as
the original's chat orchestrator: a ``user`` message with one text part whose
lines are ``Module {key}: {JSON.stringify(value)}``. ``json_stringify`` below
reproduces JavaScript's ``JSON.stringify`` output for JSON values: compact
separators, no ASCII escaping (only ``"``, ``\\``, control characters as
``\\b \\f \\n \\r \\t`` or lowercase ``\\u00xx``, and lone surrogates as
``\\udxxx``), numbers formatted as JavaScript's ``Number.prototype.toString``
(``1.0`` -> ``1``, ``1e-7`` -> ``1e-7``, ``1e21`` -> ``1e+21``), non-finite
numbers as ``null``, and object keys that are array indices (``"0"``, ``"7"``)
first in ascending order, as JavaScript orders them.
"""

from __future__ import annotations

import copy
import inspect
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from enum import Enum
from typing import Any, Awaitable, Callable, Mapping, Protocol, cast, runtime_checkable

from ..errors import ValidationError, shown
from ..records.ids import Clock
from .render import json_stringify, render_context_message

__all__ = [
    "ContextUpdateStrategy",
    "ContextMessage",
    "LiveContext",
    "ContextProvider",
    "DatetimeProvider",
    "UserProfileProvider",
    "ModuleStateProvider",
    "ProviderFailure",
    "render_context_message",
    "json_stringify",
]


class ContextUpdateStrategy(str, Enum):
    """How a context message combines with earlier ones from the same source."""

    REPLACE_SELF = "replace-self"
    APPEND_SELF = "append-self"


@dataclass(slots=True)
class ContextMessage:
    """One piece of live context (the original's ``ContextMessage``).

    ``expires_at`` is in ms since the epoch; the entry is dropped once
    ``now >= expires_at``. ``content`` must be a JSON-serialisable dict.
    """

    source_type: str
    source_id: str
    content: dict[str, Any]
    strategy: ContextUpdateStrategy = ContextUpdateStrategy.REPLACE_SELF
    priority: int = 0
    expires_at: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.source_type, str) or not self.source_type:
            raise ValidationError("source_type must be a non-empty string", field="source_type")
        if not isinstance(self.source_id, str):
            raise ValidationError("source_id must be a string", field="source_id")
        if not isinstance(self.content, dict):
            raise ValidationError("content must be a dict", field="content")
        try:
            json.dumps(self.content, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValidationError(f"content is not JSON-serialisable: {e}", field="content") from e
        try:
            self.strategy = ContextUpdateStrategy(self.strategy)
        except ValueError as e:
            raise ValidationError("strategy must be 'replace-self' or 'append-self'", field="strategy") from e
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ValidationError("priority must be an int", field="priority")
        if self.expires_at is not None and (
            isinstance(self.expires_at, bool) or not isinstance(self.expires_at, int)
        ):
            raise ValidationError("expires_at must be an int (ms) or None", field="expires_at")


@dataclass(slots=True)
class _Source:
    entries: list[ContextMessage] = field(default_factory=list)
    strategy: ContextUpdateStrategy = ContextUpdateStrategy.REPLACE_SELF


@runtime_checkable
class ContextProvider(Protocol):
    """Anything with a ``provide()``, plain or async; ``None`` means "nothing new".
    ``register`` also takes a bare callable (plain or async) returning the same.

    A provider may also define ``drain_removals() -> list[tuple[str, str | None]]``:
    ``(source_type, source_id)`` pairs to remove, applied after its messages.
    """

    def provide(self) -> Any: ...


ProvideResult = ContextMessage | list[ContextMessage] | None


async def maybe_await(value: Any) -> Any:
    """``await value`` when it is awaitable, else ``value``: callbacks may be plain or async."""
    return await value if inspect.isawaitable(value) else value


class CallableProvider:
    """A context provider made from a bare callable (plain or async)."""

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn

    async def provide(self) -> ProvideResult:
        out: ProvideResult = await maybe_await(self.fn())
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CallableProvider) and other.fn == self.fn

    def __hash__(self) -> int:
        return hash(self.fn)


def _as_provider(provider: Any) -> ContextProvider:
    if callable(getattr(provider, "provide", None)):
        return cast(ContextProvider, provider)
    if not callable(provider):
        raise ValidationError(
            "a context provider needs a provide() method or must be callable", field="provider"
        )
    return CallableProvider(provider)


@dataclass(slots=True, frozen=True)
class ProviderFailure:
    """A provider that raised (or returned something that is not a context
    message) during ``refresh``; the other providers were still applied."""

    provider: Any
    error: BaseException


class LiveContext:
    """The live context of one ``Memory`` (``mem.context``). In memory only."""

    def __init__(self, clock: Clock, append_cap: int = 20):
        if isinstance(append_cap, bool) or not isinstance(append_cap, int) or append_cap < 1:
            raise ValidationError("append_cap must be an int >= 1", field="append_cap")
        self._clock = clock
        self.append_cap = append_cap
        self._sources: dict[str, _Source] = {}
        self._providers: list[ContextProvider] = []

    # ------------------------------------------------------------------ updates
    def update(self, msg: ContextMessage) -> None:
        """Apply one context message with its strategy (validated on construction)."""
        if not isinstance(msg, ContextMessage):
            raise ValidationError("update() takes a ContextMessage", field="msg")
        msg = copy.deepcopy(msg)
        src = self._sources.get(msg.source_type)
        if src is None:
            src = self._sources[msg.source_type] = _Source()
        if msg.strategy is ContextUpdateStrategy.REPLACE_SELF:
            src.entries = [msg]
        else:
            src.entries.append(msg)
            if len(src.entries) > self.append_cap:
                del src.entries[: len(src.entries) - self.append_cap]
        src.strategy = msg.strategy

    def remove(self, source_type: str, source_id: str | None = None) -> int:
        """Remove the entries of ``source_type`` (only those of ``source_id`` if
        given). Returns how many entries were removed."""
        src = self._sources.get(source_type)
        if src is None:
            return 0
        if source_id is None:
            del self._sources[source_type]
            return len(src.entries)
        before = len(src.entries)
        src.entries = [e for e in src.entries if e.source_id != source_id]
        if not src.entries:
            del self._sources[source_type]
        return before - len(src.entries)

    def clear(self) -> None:
        self._sources.clear()

    # ------------------------------------------------------------------ reading
    def snapshot(self, now: int | None = None) -> dict[str, Any]:
        """The live context keyed by source type (see the module docstring).

        Expired entries are pruned as a side effect. The values are copies.
        """
        if now is None:
            now = self._clock()
        ranked: list[tuple[int, int, str, Any]] = []
        for pos, (key, src) in enumerate(list(self._sources.items())):
            live = [e for e in src.entries if e.expires_at is None or now < e.expires_at]
            if not live:
                del self._sources[key]
                continue
            src.entries = live
            prio = max(e.priority for e in live)
            if src.strategy is ContextUpdateStrategy.REPLACE_SELF and len(live) == 1:
                value: Any = copy.deepcopy(live[0].content)
            else:
                value = [copy.deepcopy(e.content) for e in live]
            ranked.append((-prio, pos, key, value))
        ranked.sort(key=lambda t: (t[0], t[1]))
        return {key: value for _, _, key, value in ranked}

    def render(self, now: int | None = None) -> dict[str, Any] | None:
        """``render_context_message(self.snapshot(now))``."""
        return render_context_message(self.snapshot(now))

    # ---------------------------------------------------------------- providers
    def register(self, provider: ContextProvider | Callable[[], Any]) -> None:
        """Add a provider; ``refresh()`` (run before each turn) asks it for context.

        ``provider`` has a ``provide()`` method, or is itself a callable; either
        may be plain or async and returns a ``ContextMessage``, a list, or ``None``.
        """
        p = _as_provider(provider)
        if p not in self._providers:
            self._providers.append(p)

    def unregister(self, provider: ContextProvider | Callable[[], Any]) -> None:
        p = _as_provider(provider)
        if p in self._providers:
            self._providers.remove(p)

    @property
    def providers(self) -> list[ContextProvider]:
        return list(self._providers)

    async def refresh(self) -> list[ProviderFailure]:
        """Ask every provider, in registration order, and apply what they give.

        A provider that raises is reported in the returned list and skipped;
        the others are still applied (a broken clock module must not block a
        chat turn).
        """
        failures: list[ProviderFailure] = []
        for provider in list(self._providers):
            try:
                out = await maybe_await(provider.provide())
                msgs = [] if out is None else [out] if isinstance(out, ContextMessage) else list(out)
                for m in msgs:
                    if not isinstance(m, ContextMessage):
                        raise ValidationError(
                            f"provider returned {type(m).__name__}, not a ContextMessage",
                            field="provider",
                        )
                removals = getattr(provider, "drain_removals", None)
                gone = list(removals()) if callable(removals) else []
            except Exception as e:  # noqa: BLE001 - reported, not swallowed
                failures.append(ProviderFailure(provider, e))
                continue
            for m in msgs:
                self.update(m)
            for source_type, source_id in gone:
                self.remove(source_type, source_id)
        return failures


# ------------------------------------------------------------------ providers


class DatetimeProvider:
    """``module:datetime``: ``{"timestamp": ms, "formatted": ISO 8601, "timezone": name}``.

    ``formatted`` has second precision and ends in ``Z`` for UTC (as in the
    original's example), else carries the offset (``+01:00``). ``tz`` is a
    ``tzinfo`` or an IANA name (``"Europe/Paris"``; needs the tz database,
    which a bare Pyodide may lack: pass a ``tzinfo`` there).
    """

    source_type = "module:datetime"

    def __init__(self, clock: Clock, tz: tzinfo | str = "UTC", *, priority: int = 0):
        self._clock = clock
        self.priority = priority
        if isinstance(tz, str):
            if tz.upper() in ("UTC", "Z"):
                self.tz: tzinfo = UTC
                self.tz_name = "UTC"
            else:
                try:
                    from zoneinfo import ZoneInfo

                    self.tz = ZoneInfo(tz)
                except Exception as e:  # ZoneInfoNotFoundError, missing tzdata, bad key
                    raise ValidationError(f"unknown time zone {shown(tz)}: {e}", field="tz") from e
                self.tz_name = tz
        elif isinstance(tz, tzinfo):
            self.tz = tz
            self.tz_name = "UTC" if tz is UTC else (tz.tzname(None) or str(tz))
        else:
            raise ValidationError("tz must be a tzinfo or a time zone name", field="tz")

    def content(self, now: int) -> dict[str, Any]:
        dt = datetime.fromtimestamp(now / 1000, tz=self.tz)
        formatted = dt.isoformat(timespec="seconds")
        if formatted.endswith("+00:00") and self.tz_name == "UTC":
            formatted = formatted[:-6] + "Z"
        return {"timestamp": now, "formatted": formatted, "timezone": self.tz_name}

    async def provide(self) -> ContextMessage:
        return ContextMessage(
            self.source_type,
            "datetime",
            self.content(self._clock()),
            ContextUpdateStrategy.REPLACE_SELF,
            priority=self.priority,
        )


class UserProfileProvider:
    """``module:user-profile``: the dict returned by ``get_settings()``, a plain
    or async callable (e.g. the user profile read from stored settings). An
    empty or ``None`` profile removes the entry."""

    def __init__(
        self,
        get_settings: Callable[[], Awaitable[Mapping[str, Any] | None] | Mapping[str, Any] | None],
        *,
        source_type: str = "module:user-profile",
        priority: int = 0,
    ):
        self._get = get_settings
        self.source_type = source_type
        self.priority = priority
        self._remove = False

    async def provide(self) -> ContextMessage | None:
        settings = await maybe_await(self._get())
        self._remove = not settings
        if not settings:
            return None
        if not isinstance(settings, Mapping):
            raise ValidationError("get_settings() must return a dict or None", field="get_settings")
        return ContextMessage(
            self.source_type,
            "user-profile",
            dict(settings),
            ContextUpdateStrategy.REPLACE_SELF,
            priority=self.priority,
        )

    def drain_removals(self) -> list[tuple[str, str | None]]:
        return [(self.source_type, None)] if self._remove else []


class ModuleStateProvider:
    """Modules push their state here (``set("module:discord", {...})``); each
    refresh publishes every current state as a ``replace-self`` message, and
    ``clear(source_type)`` removes it from the live context at the next refresh."""

    def __init__(self) -> None:
        self._states: dict[str, ContextMessage] = {}
        self._cleared: list[tuple[str, str | None]] = []

    def set(
        self,
        source_type: str,
        state: dict[str, Any],
        *,
        source_id: str | None = None,
        priority: int = 0,
        expires_at: int | None = None,
    ) -> None:
        """Record a module's current state (validated now)."""
        msg = ContextMessage(
            source_type,
            source_id if source_id is not None else source_type,
            copy.deepcopy(state),
            ContextUpdateStrategy.REPLACE_SELF,
            priority=priority,
            expires_at=expires_at,
        )
        self._states[source_type] = msg
        self._cleared = [c for c in self._cleared if c[0] != source_type]

    def clear(self, source_type: str) -> None:
        if self._states.pop(source_type, None) is not None:
            self._cleared.append((source_type, None))

    def get(self, source_type: str) -> dict[str, Any] | None:
        m = self._states.get(source_type)
        return copy.deepcopy(m.content) if m else None

    async def provide(self) -> list[ContextMessage]:
        return list(self._states.values())

    def drain_removals(self) -> list[tuple[str, str | None]]:
        out, self._cleared = self._cleared, []
        return out
